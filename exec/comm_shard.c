/* The collectives of a bucket over the shard partition (exec/shard.h).
 *
 * A bucket of k tensors is laid out for MPI as one block per rank, rank
 * q's block being the concatenation of q's slices of the k tensors.  A
 * reduce-scatter over these blocks leaves each rank the sum of its own
 * slices (--shard optimizer/gradients: ReduceScatter nodes); an
 * all-gather of the blocks rebuilds whole tensors from every rank's
 * slices (AllGather nodes).  The plain AllReduce of a bucket (--shard
 * none) is the same reduce-scatter then an all-gather of the sums, not an
 * MPI_Allreduce: MPI sums an element in an order that depends on the
 * collective and the element's place in it, so only the same
 * reduce-scatter over the same blocks makes every --shard mode give the
 * same bits.  The traffic is that of a ring allreduce.  With two ranks
 * every order of a sum is the same addition, so there the AllReduce is one
 * MPI allreduce over the packed blocks (half the collectives, MPI's own
 * algorithm for the size), with the same bits as the reduce-scatter.
 *
 * The blocks go through pieces of a staging buffer of this module's own
 * (as comm_reduce.c explains, MPI never reads store pages): piece j holds
 * elements [j*P, (j+1)*P) of every rank's block, so the pieces, and the
 * sums, are the same whichever node reduces the bucket.
 *
 * A node with attribute group=1 runs over the group of this rank
 * (hp_comm_group_split: a pipeline stage's D replicas) instead of the job,
 * its ranks and ranges those of the group; attribute mean_over, when
 * present, is what the sums are divided by instead of the ranks (a
 * pipeline's M x D micro-batch means). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "exec/comm.h"
#include "exec/shard.h"

#define STAGE_FLOATS ((uint64_t)1 << 20) /* 4 MiB over all ranks' pieces */
#define MIN_PIECE ((uint64_t)1 << 10) /* many ranks: small pieces, not a big buffer */

enum dir { PACK, UNPACK };

/* A bucket's tensors as the blocks see them. */
struct lay {
	int k, N, r, grp;
	uint64_t *n;   /* each tensor's whole element count */
	float **p;     /* its data: whole, or (sliced) this rank's slice only */
	int sliced;
	uint64_t *len; /* [q]: rank q's block length */
	uint64_t piece;
	int *counts, *displs;
};

static pthread_mutex_t stage_mu = PTHREAD_MUTEX_INITIALIZER;
static float *stage; /* N pieces, then this rank's own */
static uint64_t stage_floats;

int hp_comm_is_shard_op(const struct hp_node *n)
{
	/* the op first, by its first letter before any strcmp: the planner
	 * asks for every step of every plan it simulates, and most steps a
	 * training graph adds are in the domain too */
	const char *op = n->op_type;

	return ((op[0] == 'R' && !strcmp(op, "ReduceScatter")) || (op[0] == 'A' && !strcmp(op, "AllGather"))) &&
	       !strcmp(n->domain, "ai.hpdlf");
}

/* Copy between buf and elements [a, b) of rank q's block. */
static void walk(const struct lay *l, int q, uint64_t a, uint64_t b, float *buf, enum dir d)
{
	uint64_t base = 0;

	for (int i = 0; i < l->k && a < b; i++) {
		uint64_t lo, hi;
		hp_shard_range(l->n[i], q, l->N, &lo, &hi);
		if (a >= base + (hi - lo)) {
			base += hi - lo;
			continue;
		}
		uint64_t from = a - base, m = hi - lo - from < b - a ? hi - lo - from : b - a;
		float *x = l->p[i] + (l->sliced ? 0 : lo) + from;
		if (d == PACK)
			memcpy(buf, x, m * sizeof *buf);
		else
			memcpy(x, buf, m * sizeof *buf);
		buf += m;
		a += m;
		base += hi - lo;
	}
}

/* Counts and displacements of the piece starting at element `at` of
 * every block; 0 when no block reaches that far. */
static int piece_at(struct lay *l, uint64_t at)
{
	int tot = 0;

	for (int q = 0; q < l->N; q++) {
		uint64_t c = l->len[q] > at ? l->len[q] - at : 0;
		l->counts[q] = (int)(c < l->piece ? c : l->piece);
		l->displs[q] = tot;
		tot += l->counts[q];
	}
	return tot;
}

static void lay_free(struct lay *l)
{
	free(l->n);
	free(l->p);
	free(l->len);
	free(l->counts);
	free(l->displs);
}

/* Tensors 1..nt-1 of ts (slot 0 is the token): numel from shapes of
 * `whole`, data from `data`. */
static int lay_init(struct lay *l, int grp, int nt, const struct hp_tensor *whole, const struct hp_tensor *data,
		    int sliced)
{
	memset(l, 0, sizeof *l);
	l->k = nt - 1;
	l->grp = grp;
	l->N = grp ? hp_comm_group_size() : hp_comm_size();
	l->r = grp ? hp_comm_group_rank() : hp_comm_rank();
	l->sliced = sliced;
	l->n = calloc((size_t)l->k + 1, sizeof *l->n);
	l->p = calloc((size_t)l->k + 1, sizeof *l->p);
	l->len = calloc((size_t)l->N, sizeof *l->len);
	l->counts = calloc((size_t)l->N, sizeof *l->counts);
	l->displs = calloc((size_t)l->N, sizeof *l->displs);
	if (!l->n || !l->p || !l->len || !l->counts || !l->displs)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < l->k; i++) {
		l->n[i] = (uint64_t)hp_shape_numel(&whole[i + 1].shape);
		l->p[i] = data[i + 1].data;
		for (int q = 0; q < l->N; q++) {
			uint64_t lo, hi;
			hp_shard_range(l->n[i], q, l->N, &lo, &hi);
			l->len[q] += hi - lo;
		}
	}
	l->piece = STAGE_FLOATS / (uint64_t)l->N > MIN_PIECE ? STAGE_FLOATS / (uint64_t)l->N : MIN_PIECE;
	return 0;
}

static uint64_t max_len(const struct lay *l)
{
	uint64_t m = 0;

	for (int q = 0; q < l->N; q++)
		m = l->len[q] > m ? l->len[q] : m;
	return m;
}

static int need_stage(const struct lay *l)
{
	uint64_t want = l->piece * (uint64_t)(l->N + 1);

	if (stage_floats >= want)
		return 0;
	free(stage);
	stage_floats = 0;
	if (!(stage = malloc(want * sizeof *stage)))
		return hp_error(-ENOMEM, "no memory for the staging buffer of the ranks' collectives");
	stage_floats = want;
	return 0;
}

/* This rank's piece at `at` of the bucket's blocks, summed and scaled,
 * into `mine`. */
static int rs_piece(struct lay *in, uint64_t at, float *mine, float s)
{
	int rc;

	piece_at(in, at);
	for (int q = 0; q < in->N; q++)
		walk(in, q, at, at + (uint64_t)in->counts[q], stage + in->displs[q], PACK);
	if ((rc = in->grp ? hp_comm_group_reduce_scatter(stage, mine, in->counts)
			  : hp_comm_reduce_scatter(stage, mine, in->counts)) < 0)
		return rc;
	for (int j = 0; j < in->counts[in->r]; j++)
		mine[j] *= s;
	return 0;
}

/* Every rank's piece at `at` (counts already set) from `mine` into the
 * whole tensors of out. */
static int ag_piece(struct lay *out, uint64_t at, const float *mine)
{
	int rc = out->grp ? hp_comm_group_allgatherv(mine, stage, out->counts, out->displs)
			  : hp_comm_allgatherv(mine, stage, out->counts, out->displs);

	for (int q = 0; rc == 0 && q < out->N; q++)
		walk(out, q, at, at + (uint64_t)out->counts[q], stage + out->displs[q], UNPACK);
	return rc;
}

/* Two ranks: the piece's blocks summed whole by one allreduce, scaled
 * and unpacked.  With two ranks an element's sum is one addition, which
 * gives the same bits in either order, so this equals the reduce-scatter
 * and all-gather of every --shard mode for half the collectives. */
static int ar_piece(struct lay *in, struct lay *out, uint64_t at, float s)
{
	int tot = piece_at(in, at), rc;

	for (int q = 0; q < in->N; q++)
		walk(in, q, at, at + (uint64_t)in->counts[q], stage + in->displs[q], PACK);
	if ((rc = in->grp ? hp_comm_group_allreduce(stage, (size_t)tot)
			  : hp_comm_allreduce(stage, (size_t)tot, HP_F32)) < 0)
		return rc;
	for (int j = 0; j < tot; j++)
		stage[j] *= s;
	piece_at(out, at);
	for (int q = 0; q < out->N; q++)
		walk(out, q, at, at + (uint64_t)out->counts[q], stage + out->displs[q], UNPACK);
	return 0;
}

enum rs_mode { RS_SLICE, RS_FULL, RS_ALL };

/* Reduce-scatter of the bucket, then this rank's sums into its slices
 * (RS_SLICE: outputs are the slices; RS_FULL: whole outputs, the rest
 * this rank's own gradient) or everybody's into whole outputs (RS_ALL). */
static int run_rs(const struct hp_node *n, const struct hp_kargs *a, enum rs_mode mode)
{
	float s = 1.0f / (float)hp_attr_int(n, "mean_over", hp_attr_int(n, "ranks", 1));
	int grp = (int)hp_attr_int(n, "group", 0);
	struct lay in, out = { 0 };
	int rc = lay_init(&in, grp, a->nin, a->in, a->in, 0);

	if (rc == 0)
		rc = lay_init(&out, grp, a->nin, a->in, a->out, mode == RS_SLICE);
	for (int i = 1; rc == 0 && mode == RS_FULL && i < a->nin; i++)
		memcpy(a->out[i].data, a->in[i].data, (size_t)out.n[i - 1] * sizeof(float));
	if (rc == 0)
		rc = need_stage(&in);
	for (uint64_t at = 0, end = max_len(&in); rc == 0 && at < end; at += in.piece) {
		float *mine = stage + (uint64_t)in.N * in.piece;
		if (mode == RS_ALL && in.N == 2) {
			rc = ar_piece(&in, &out, at, s);
			continue;
		}
		if ((rc = rs_piece(&in, at, mine, s)) < 0)
			break;
		piece_at(&out, at);
		if (mode == RS_ALL)
			rc = ag_piece(&out, at, mine);
		else
			walk(&out, out.r, at, at + (uint64_t)out.counts[out.r], mine, UNPACK);
	}
	lay_free(&in);
	lay_free(&out);
	return rc;
}

/* Every rank's slices (the inputs) into the whole outputs. */
static int run_ag(const struct hp_node *n, const struct hp_kargs *a)
{
	int grp = (int)hp_attr_int(n, "group", 0);
	struct lay in, out = { 0 };
	int rc = lay_init(&in, grp, a->nin, a->out, a->in, 1);

	if (rc == 0)
		rc = lay_init(&out, grp, a->nin, a->out, a->out, 0);
	if (rc == 0)
		rc = need_stage(&in);
	for (uint64_t at = 0, end = max_len(&in); rc == 0 && at < end; at += in.piece) {
		float *mine = stage + (uint64_t)in.N * in.piece;
		piece_at(&in, at);
		walk(&in, in.r, at, at + (uint64_t)in.counts[in.r], mine, PACK);
		piece_at(&out, at);
		rc = ag_piece(&out, at, mine);
	}
	lay_free(&in);
	lay_free(&out);
	return rc;
}

/* The node was built for this job: its ranks and this rank's ranges are
 * those of the communicator. */
static int check_node(const struct hp_node *n, const struct hp_kargs *a, int ag)
{
	const int64_t *r;
	int grp = (int)hp_attr_int(n, "group", 0), k = hp_attr_ints(n, "range", &r);
	int N = grp ? hp_comm_group_size() : hp_comm_size(), me = grp ? hp_comm_group_rank() : hp_comm_rank();

	if (hp_attr_int(n, "ranks", 1) != N || hp_attr_int(n, "rank", 0) != me || k != 2 * (a->nin - 1))
		return hp_error(HP_EINTERNAL, "built for rank %lld of %lld, run by rank %d of %d%s",
				(long long)hp_attr_int(n, "rank", 0), (long long)hp_attr_int(n, "ranks", 1), me, N,
				grp ? " (its group)" : "");
	for (int i = 1; i < a->nin; i++) {
		uint64_t lo, hi;
		hp_shard_range((uint64_t)hp_shape_numel(ag ? &a->out[i].shape : &a->in[i].shape), me, N, &lo, &hi);
		if ((uint64_t)r[2 * i - 2] != lo || (uint64_t)r[2 * i - 1] != hi)
			return hp_error(HP_EINTERNAL, "tensor %d: range [%lld, %lld) is not the shard partition's",
					i, (long long)r[2 * i - 2], (long long)r[2 * i - 1]);
	}
	return 0;
}

static int locked(const struct hp_node *n, const struct hp_kargs *a, int ag, enum rs_mode mode)
{
	int rc;

	if (a->out[0].data)
		*(float *)a->out[0].data = 0;
	pthread_mutex_lock(&stage_mu);
	rc = ag ? run_ag(n, a) : run_rs(n, a, mode);
	pthread_mutex_unlock(&stage_mu);
	return rc < 0 ? hp_error_prefix(rc, "node '%s' (%s)", n->name, n->op_type) : 0;
}

int hp_comm_run_shard_op(const struct hp_node *n, const struct hp_kargs *a)
{
	int ag = !strcmp(n->op_type, "AllGather"), rc;

	/* one process running a sharded graph alone: the kernel's meaning */
	if (hp_comm_size() == 1 && hp_attr_int(n, "ranks", 1) != 1)
		return n->op->run(n, a);
	if ((rc = check_node(n, a, ag)) < 0)
		return hp_error_prefix(rc, "node '%s' (%s)", n->name, n->op_type);
	return locked(n, a, ag, ag ? RS_ALL : hp_attr_int(n, "full", 0) ? RS_FULL : RS_SLICE);
}

int hp_comm_shard_allreduce(const struct hp_node *n, const struct hp_kargs *a)
{
	return locked(n, a, 0, RS_ALL);
}
