/* Data parallelism in the training graph: the optimizer updates read
 * gradients summed over the ranks.  Gradients are grouped into buckets in
 * the order backward produces them; each bucket's reduction is an
 * AllReduce node (kernels/comm_op.c) placed by the topological sort right
 * after the bucket's last gradient, so the planner budgets its buffers like
 * any node's and the task net runs it as a communication transition while
 * backward goes on.  A token threads the buckets in one chain: every rank
 * issues them in the same order. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/comm_watch.h"
#include "exec/pipe.h"
#include "exec/train_dp.h"
#include "exec/train_internal.h"
#include "store/crc.h"

struct grad {
	int producer, update, value;
	uint64_t bytes;
};

static int is_update(const struct hp_node *n)
{
	return !strcmp(n->domain, "ai.hpdlf") && (!strcmp(n->op_type, "SGDUpdate") || !strcmp(n->op_type, "AdamUpdate"));
}

static int by_producer(const void *a, const void *b)
{
	const struct grad *x = a, *y = b;

	if (x->producer != y->producer)
		return (x->producer > y->producer) - (x->producer < y->producer);
	return (x->update > y->update) - (x->update < y->update);
}

/* The gradients the updates read, in the order their producers run. */
static int collect(const struct hp_graph *g, struct grad **out, int *count)
{
	struct grad *gr = calloc((size_t)g->nnodes + 1, sizeof *gr);
	int n = 0;

	if (!gr)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *nd = &g->nodes[i];
		int v = nd->ninputs > 1 ? nd->inputs[1] : -1;
		if (!is_update(nd) || v < 0)
			continue;
		gr[n++] = (struct grad){ .producer = g->values[v].producer, .update = i, .value = v,
					 .bytes = (uint64_t)hp_shape_numel(&g->values[v].shape) * 4 };
	}
	qsort(gr, (size_t)n, sizeof *gr, by_producer);
	*out = gr;
	*count = n;
	return 0;
}

/* The updates' scheduling hint once they read sums over the ranks: after
 * every other ready node (after the late gathers of --shard parameters
 * too), so that backward goes on while the buckets are on the wire and each
 * update runs when its bucket is summed, instead of the next backward
 * kernel waiting behind it (in the plan's order, the budget's). */
#define UPDATE_LATE ((1 << 30) + 1)

uint64_t hp_dp_default_bucket(uint64_t grad_bytes)
{
	/* a quarter of the gradients (overlap even on small models), within
	 * the sizes where MPI reaches its bandwidth without holding backward */
	uint64_t b = grad_bytes / 4;

	return b < (64u << 10) ? 64u << 10 : b > (4u << 20) ? 4u << 20 : b;
}

/* One AllReduce over gr[0..k): reads the previous token, rewires the
 * updates to its outputs; *token becomes its token. */
static int add_bucket(struct hp_graph *g, const struct grad *gr, int k, int ranks, int index, int *token)
{
	int *in = calloc((size_t)k + 1, sizeof *in), *out = calloc((size_t)k + 1, sizeof *out), node, rc = 0;
	struct hp_attr a = { .name = (char *)"ranks", .type = HP_ATTR_INT, .i = ranks };
	struct hp_shape scalar = { 0 };
	char name[300];

	if (!in || !out) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	in[0] = *token;
	snprintf(name, sizeof name, "allreduce.%d.token", index);
	if ((out[0] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, &scalar)) < 0) {
		rc = out[0];
		goto out;
	}
	for (int i = 0; i < k; i++) {
		in[1 + i] = gr[i].value;
		snprintf(name, sizeof name, "%s.allreduced", g->values[gr[i].value].name);
		out[1 + i] = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, HP_F32, &g->values[gr[i].value].shape);
		if (out[1 + i] < 0) {
			rc = out[1 + i];
			goto out;
		}
	}
	snprintf(name, sizeof name, "allreduce.%d", index);
	if ((node = hp_graph_add_node(g, name, "AllReduce", k + 1, in, k + 1, out)) < 0) {
		rc = node;
		goto out;
	}
	free(g->nodes[node].domain);
	if (!(g->nodes[node].domain = strdup("ai.hpdlf")) || (rc = hp_graph_add_attr(g, node, &a)) < 0) {
		rc = rc < 0 ? rc : hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	for (int i = 0; i < k; i++) {
		g->nodes[gr[i].update].inputs[1] = out[1 + i];
		g->nodes[gr[i].update].sched = UPDATE_LATE;
	}
	*token = out[0];
out:
	free(in);
	free(out);
	return rc;
}

int hp_dp_insert_reduce(struct hp_graph *g, int ranks, uint64_t bucket, int *nbuckets)
{
	struct grad *gr = NULL;
	uint64_t total = 0, acc = 0;
	int n = 0, first = 0, token = -1, nb = 0, rc;

	*nbuckets = 0;
	if (ranks < 2)
		return 0;
	if ((rc = collect(g, &gr, &n)) < 0)
		return rc;
	for (int i = 0; i < n; i++)
		total += gr[i].bytes;
	if (!bucket)
		bucket = hp_dp_default_bucket(total);
	for (int i = 0; i < n && rc == 0; i++) {
		acc += gr[i].bytes;
		if (acc < bucket && i + 1 < n)
			continue;
		rc = add_bucket(g, gr + first, i + 1 - first, ranks, nb++, &token);
		first = i + 1;
		acc = 0;
	}
	free(gr);
	if (rc == 0 && (rc = hp_graph_finalize(g)) == 0)
		rc = hp_graph_infer(g);
	*nbuckets = nb;
	return rc;
}

int hp_dp_setup(struct hp_trainer *t)
{
	int rc = hp_comm_init();

	if (t->o.async_sgd && !t->o.async_deterministic)
		hp_comm_watch_tolerate(); /* a lost rank stops contributing, the others train on */
	if (rc == 0)
		rc = hp_comm_join_watch(); /* no rank waits forever for a lost one */
	if (rc < 0)
		return rc;
	t->rank = hp_comm_rank();
	t->nranks = hp_comm_size();
	t->dpr = t->rank;
	if (t->o.pipeline > 1)
		return 0; /* D pipelines share each batch: hp_pipe_setup (train.c) */
	/* --plan --ranks N alone: the step of one of N ranks, no MPI */
	if (t->nranks == 1 && t->o.graph_only && t->o.plan_ranks > 1)
		t->nranks = t->o.plan_ranks;
	t->lbatch = t->o.batch / t->nranks;
	if (t->o.batch % t->nranks)
		return hp_error(HP_EUSAGE, "--batch %lld does not split over %d ranks: it is the global batch, each "
				"rank trains on batch/ranks rows of it (give a multiple of %d)", (long long)t->o.batch,
				t->nranks, t->nranks);
	return 0;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
	return h * 0xBF58476D1CE4E5B9ull;
}

/* The model file: its size and the crc32c of each MiB. */
static int hash_file(const char *path, uint64_t *h)
{
	static char buf[1 << 20];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t k;

	if (fd < 0)
		return hp_error(-errno, "rank %d: %s: %s", hp_comm_rank(), path, strerror(errno));
	while ((k = read(fd, buf, sizeof buf)) > 0)
		*h = mix(mix(*h, (uint64_t)k), hs_crc32c(buf, (size_t)k));
	close(fd);
	return k < 0 ? hp_error(-errno, "rank %d: %s: %s", hp_comm_rank(), path, strerror(errno)) : 0;
}

static uint64_t dbits(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof u);
	return u;
}

/* What must be equal on every rank for the ranks to train one model: the
 * model bytes and the flags that shape the steps (not --budget, --threads
 * or tiers, which are each node's own). */
static int job_hash(const struct hp_trainer *t, uint64_t *model, uint64_t *flags)
{
	const struct hp_trainer_opts *o = &t->o;
	const struct hp_train_spec *sp = &o->spec;
	uint64_t v[] = { (uint64_t)o->batch, (uint64_t)o->steps, (uint64_t)o->epochs, (uint64_t)o->shuffle,
			 o->seed, o->bucket, (uint64_t)o->resume, (uint64_t)sp->loss, (uint64_t)sp->optimizer,
			 dbits(sp->lr), dbits(sp->momentum), dbits(sp->weight_decay), (uint64_t)sp->nesterov,
			 dbits(sp->beta1), dbits(sp->beta2), dbits(sp->eps), sp->seed, (uint64_t)sp->ignore_index,
			 (uint64_t)o->sync_bn, (uint64_t)o->shard, (uint64_t)o->async_sgd, (uint64_t)o->async_deterministic,
			 (uint64_t)o->exchange_every, (uint64_t)o->exchange_peers, dbits(o->blend), (uint64_t)o->parzen,
			 (uint64_t)o->pipeline, (uint64_t)o->micro_batches,
			 (uint64_t)o->pipeline_schedule, (uint64_t)o->npipeline_cuts, (uint64_t)o->lr_schedule,
			 (uint64_t)o->warmup_steps, (uint64_t)o->lr_step_size, dbits(o->lr_gamma) };

	*model = 0;
	*flags = 0;
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		*flags = mix(*flags, v[i]);
	return hash_file(t->model, model);
}

int hp_dp_agree(struct hp_trainer *t)
{
	uint64_t model, flags, lo, hi, flo, fhi;
	int rc;

	if (t->nranks < 2)
		return 0;
	if ((rc = job_hash(t, &model, &flags)) < 0 || (rc = hp_comm_minmax_u64(model, &lo, &hi)) < 0 ||
	    (rc = hp_comm_minmax_u64(flags, &flo, &fhi)) < 0)
		return rc;
	if (lo != hi)
		return hp_error(HP_EUSAGE, "rank %d of %d: the ranks were given different model files (%s differs in "
				"size or bytes on some rank)", t->rank, t->nranks, t->model);
	if (flo != fhi)
		return hp_error(HP_EUSAGE, "rank %d of %d: the ranks were given different training flags (every rank "
				"needs the same --batch, --steps/--epochs, --optimizer, --lr, --seed, --bucket, --shard ...)",
				t->rank, t->nranks);
	return 0;
}

void hp_dp_stop_put(const struct hp_trainer *t, double *v)
{
	int sig = t->o.cancel ? (int)*t->o.cancel : 0;

	v[0] = sig != 0;
	v[1] = sig == SIGTERM;
	v[2] = sig == SIGUSR1;
}

/* Every rank stops on the same signal, so the job's ranks all exit with one
 * status (128 + N) and say the same: SIGTERM (Slurm's scancel, time
 * limit) before SIGUSR1 before any other flag, taken as SIGINT.  A rank
 * whose own flag is clear finds that signal in it (hpdlf/train.h). */
void hp_dp_stop_take(struct hp_trainer *t, const double *v)
{
	t->dp_stop = v[1] > 0 ? SIGTERM : v[2] > 0 ? SIGUSR1 : v[0] > 0 ? SIGINT : 0;
	if (t->dp_stop && t->o.cancel && !*t->o.cancel)
		*t->o.cancel = t->dp_stop;
}

int hp_dp_mean_loss(struct hp_trainer *t, double *loss)
{
	double v[1 + HP_DP_STOP_WORDS] = { *loss };
	int rc;

	if (t->nranks < 2 || t->o.async_sgd) /* async: each rank's own loss, no collective */
		return 0;
	hp_dp_stop_put(t, v + 1);
	if ((rc = hp_comm_allreduce(v, 1 + HP_DP_STOP_WORDS, HP_F64)) < 0)
		return rc;
	*loss = v[0] / t->nranks;
	hp_dp_stop_take(t, v + 1);
	return 0;
}
