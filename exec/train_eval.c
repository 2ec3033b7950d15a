/* Validation: the loss (and for cross-entropy the accuracy) of the weights
 * trained so far on a held-out dataset.  The model is evaluated as
 * inference sees it, BatchNormalization with its running statistics and
 * Dropout as identity: the original forward graph, loaded afresh with the
 * trained weights and running statistics read from the training session in
 * place of its initializers (before inference, so that nothing folded from
 * the old weights survives), run over the validation rows a batch at a
 * time.  The loss is taken here from the outputs in double precision, so
 * that a last, padded batch counts its real rows only.  The validation
 * arrays are read like the training data: store tensors backed by their
 * files out of core, mapped in core. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "exec/comm.h"
#include "exec/exec_internal.h"
#include "exec/split_weight.h"
#include "exec/train_internal.h"
#include "exec/train_params.h"

struct hp_eval {
	struct hp_dataset data;
	int64_t first, count;  /* this rank's rows of the validation set */
};

/* Sums over the rows evaluated: the loss, the right predictions, the
 * elements counted (rows, or rows times positions for dense labels). */
struct eval_sums {
	double loss, correct, count;
};

/* Samples alike (int32 and int64 labels both read as class indices). */
static int same_rows(const struct hp_darray *a, const struct hp_darray *b)
{
	int ints = (a->dtype == HP_I32 || a->dtype == HP_I64) && (b->dtype == HP_I32 || b->dtype == HP_I64);

	if ((a->dtype != b->dtype && !ints) || a->shape.rank != b->shape.rank)
		return 0;
	for (int i = 1; i < a->shape.rank; i++)
		if (a->shape.dims[i] != b->shape.dims[i])
			return 0;
	return 1;
}

int hp_eval_open(struct hp_trainer *t)
{
	struct hp_eval *e = calloc(1, sizeof *e);
	int rc;

	if (!e)
		return hp_error(-ENOMEM, "out of memory");
	t->eval = e;
	if ((rc = hp_dataset_open(&e->data, t->o.val_data, t->o.val_labels)) < 0)
		return hp_error_prefix(rc, "validation data");
	if (!same_rows(&e->data.x, &t->data.x) || !same_rows(&e->data.y, &t->data.y))
		return hp_error(HP_EDATA, "validation data %s / %s: its samples differ in dtype or dims from the "
				"training data's", e->data.x.what, e->data.y.what);
	e->first = e->data.n * t->rank / t->nranks;
	e->count = e->data.n * (t->rank + 1) / t->nranks - e->first;
	return hp_dataset_attach(&e->data, hp_session_store(t->s));
}

/* Initializer v of the evaluation graph takes the training session's
 * current bytes of its namesake when training changes that one (weights,
 * running statistics; a partitioned weight read whole). */
static int take_trained(struct hp_trainer *t, struct hp_graph *g, int v, const char *whole)
{
	struct hp_value *ev = &g->values[v];
	int tv = hp_graph_find_value(t->g, ev->name);
	struct hp_tensor a = { .dtype = ev->dtype, .shape = ev->shape };
	uint64_t n = hp_tensor_bytes(&a);
	void *buf;
	int rc;

	if (tv < 0 || !whole[tv] || t->g->values[tv].next < 0)
		return 0;
	struct hp_tensor b = { .dtype = t->g->values[tv].dtype, .shape = t->g->values[tv].shape };
	if (hp_tensor_bytes(&b) != n || b.dtype != a.dtype)
		return hp_error(HP_EINTERNAL, "'%s': the training graph holds %llu bytes, the model %llu", ev->name,
				(unsigned long long)hp_tensor_bytes(&b), (unsigned long long)n);
	if (!(buf = malloc(n ? n : 1)))
		return hp_error(-ENOMEM, "out of memory for '%s'", ev->name);
	rc = hp_whole_read(t->s, tv, 0, n, buf);
	/* rank 0's: without --sync-bn each rank's running statistics are its
	 * own, and rank 0's are the ones exported */
	if (rc == 0 && t->nranks > 1)
		rc = hp_comm_bcast(buf, n, 0);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	free(ev->data);
	ev->data = buf;
	ev->src.kind = HP_BLOB_MEMORY;
	return 0;
}

/* The forward graph with the trained state, its data input fixed to a
 * batch of t->lbatch rows. */
static int eval_graph(struct hp_trainer *t, struct hp_graph **out)
{
	struct hp_param_counts pc = { .size = sizeof pc };
	struct hp_graph *g = NULL;
	struct hp_shape s = t->data.x.shape;
	char *whole = NULL;
	int rc;

	s.dims[0] = t->lbatch;
	if ((rc = hp_graph_load(t->model, &g)) < 0)
		return rc;
	rc = hp_train_params(g, NULL, 0, &pc); /* Constant-node weights by the training graph's names */
	if (rc == 0)
		rc = hp_graph_set_input_shape(g, t->g->values[t->vin].name, &s);
	if (rc == 0 && !(whole = hp_whole_state(t->g)))
		rc = hp_error(-ENOMEM, "out of memory");
	for (int v = 0; rc == 0 && v < g->nvalues; v++)
		if (g->values[v].kind == HP_VALUE_INITIALIZER && g->values[v].dtype == HP_F32)
			rc = take_trained(t, g, v, whole);
	free(whole);
	if (rc == 0)
		rc = hp_graph_infer(g);
	if (rc < 0) {
		hp_graph_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

static int64_t label_at(const struct hp_darray *y, const void *p, int64_t i)
{
	return y->dtype == HP_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* Softmax cross-entropy over dim 1 of logits [rows, C, S...] against
 * labels [rows, S...], skipping ignore_index, as torch's mean reduction
 * counts; and whether the arg max is the label. */
static void add_ce(const struct hp_trainer *t, const struct hp_tensor *out, const void *lab, int64_t rows,
		   struct eval_sums *sum)
{
	/* classes on axis 1, or last (train.c classes_last) */
	int last = t->classes_first != NULL;
	int64_t c = out->shape.rank > 1 ? out->shape.dims[last ? out->shape.rank - 1 : 1] : out->shape.dims[0];
	int64_t sp = hp_shape_numel(&out->shape) / (out->shape.rank > 1 ? out->shape.dims[0] : 1) / c;
	int64_t st = last ? 1 : sp;
	const float *x = out->data;

	for (int64_t r = 0; r < rows; r++)
		for (int64_t s = 0; s < sp; s++) {
			int64_t y = label_at(&t->eval->data.y, lab, r * sp + s), arg = 0;
			const float *row = x + (last ? (r * sp + s) * c : r * c * sp + s);
			double mx = -INFINITY, z = 0;
			if (y == t->o.spec.ignore_index)
				continue;
			for (int64_t k = 0; k < c; k++)
				if (row[k * st] > mx) {
					mx = row[k * st];
					arg = k;
				}
			for (int64_t k = 0; k < c; k++)
				z += exp(row[k * st] - mx);
			sum->loss += y >= 0 && y < c ? mx + log(z) - row[y * st] : NAN;
			sum->correct += arg == y;
			sum->count += 1;
		}
}

static void add_mse(const struct hp_tensor *out, const float *target, int64_t rows, struct eval_sums *sum)
{
	int64_t per = hp_shape_numel(&out->shape) / out->shape.dims[0];
	const float *x = out->data;

	for (int64_t i = 0; i < rows * per; i++)
		sum->loss += ((double)x[i] - target[i]) * ((double)x[i] - target[i]);
	sum->count += (double)(rows * per);
}

/* Rows [from, from + rows) (rows <= lbatch; the batch padded with the
 * last row) through session s, added to sum. */
static int eval_batch(struct hp_trainer *t, struct hp_session *s, const char *oname, int64_t from, int64_t rows,
		      struct hp_tensor *xb, void *yb, struct eval_sums *sum)
{
	struct hp_eval *e = t->eval;
	struct hp_tensor out = { 0 };
	int rc;

	for (int64_t k = 0; k < t->lbatch; k++)
		t->rows[k] = e->first + from + (k < rows ? k : rows - 1);
	rc = hp_darray_gather(&e->data.x, t->rows, t->lbatch, xb->data);
	if (rc == 0)
		rc = hp_darray_gather(&e->data.y, t->rows, rows, yb);
	if (rc == 0)
		rc = hp_session_set_input(s, t->g->values[t->vin].name, xb);
	if (rc == 0)
		rc = hp_session_run(s);
	if (rc == 0)
		rc = hp_session_get_output(s, oname, &out);
	if (rc < 0)
		return rc;
	if (t->o.spec.loss == HP_LOSS_CROSS_ENTROPY)
		add_ce(t, &out, yb, rows, sum);
	else
		add_mse(&out, yb, rows, sum);
	hp_tensor_free(&out);
	return 0;
}

/* Every value of g at once: what an in-core session holds at most. */
static uint64_t all_bytes(const struct hp_graph *g)
{
	uint64_t n = 0;

	for (int v = 0; v < g->nvalues; v++) {
		struct hp_tensor a = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };
		n += hp_tensor_bytes(&a);
	}
	return n;
}

/* In core when even all of the forward's values at once are a small part
 * of the budget (an out-of-core session's own store costs more than that);
 * otherwise planned for the budget, with a spill file of its own (the
 * training session's tiers stay its own). */
static int eval_session(struct hp_trainer *t, struct hp_graph *g, struct hp_session **s)
{
	struct hp_exec_opts eo;

	hp_exec_opts_init(&eo, sizeof eo);
	eo.threads = t->o.threads;
	eo.budget = t->o.budget && all_bytes(g) > t->o.budget / 8 ? t->o.budget : 0;
	eo.seed = t->o.seed;
	return hp_session_create(g, &eo, s);
}

static int eval_run(struct hp_trainer *t, struct hp_graph *g, struct eval_sums *sum)
{
	const char *oname = t->o.spec.output ? t->o.spec.output : g->values[g->outputs[0]].name;
	struct hp_session *s = NULL;
	struct hp_tensor xb = { 0 };
	void *yb = calloc((size_t)t->lbatch, t->eval->data.y.row_bytes);
	int rc = yb ? eval_session(t, g, &s) : hp_error(-ENOMEM, "out of memory");

	if (rc == 0)
		rc = hp_tensor_alloc(&xb, g->values[g->inputs[0]].dtype, &g->values[g->inputs[0]].shape);
	for (int64_t at = 0; rc == 0 && at < t->eval->count; at += t->lbatch) {
		int64_t rows = t->eval->count - at < t->lbatch ? t->eval->count - at : t->lbatch;
		rc = eval_batch(t, s, oname, at, rows, &xb, yb, sum);
	}
	hp_tensor_free(&xb);
	hp_session_destroy(s);
	free(yb);
	return rc;
}

static int check_eval(const struct hp_trainer *t)
{
	if (!t->o.val_data)
		return hp_error(HP_EUSAGE, "no validation data was given (val_data)");
	if (!t->s)
		return hp_error(HP_EUSAGE, "this trainer was built with graph_only: it cannot evaluate");
	if (t->o.spec.loss == HP_LOSS_OUTPUT)
		return hp_error(HP_EUSAGE, "validation needs --loss cross-entropy or mse (output:NAME is the graph's own, "
				"computed in training mode)");
	if (t->o.shard == HP_SHARD_PARAMETERS && t->nranks > 1)
		return hp_error(HP_EUSAGE, "validation with --shard parameters: no rank holds the whole weights");
	return 0;
}

int hp_trainer_evaluate(struct hp_trainer *t, double *loss, double *accuracy)
{
	struct eval_sums sum = { 0 };
	struct hp_graph *g = NULL;
	int rc = check_eval(t);

	*loss = *accuracy = NAN;
	if (rc == 0 && !t->eval)
		rc = hp_eval_open(t);
	if (rc == 0)
		rc = eval_graph(t, &g);
	if (rc == 0)
		rc = eval_run(t, g, &sum);
	hp_graph_free(g);
	if (rc == 0 && t->nranks > 1)
		rc = hp_comm_allreduce(&sum, 3, HP_F64); /* every rank takes part, rows or not */
	if (rc < 0)
		return hp_error_prefix(rc, "validation at step %lld", (long long)t->step);
	*loss = sum.count > 0 ? sum.loss / sum.count : NAN;
	if (t->o.spec.loss == HP_LOSS_CROSS_ENTROPY && sum.count > 0)
		*accuracy = sum.correct / sum.count;
	return 0;
}

void hp_eval_free(struct hp_eval *e)
{
	if (!e)
		return;
	hp_dataset_close(&e->data);
	free(e);
}
