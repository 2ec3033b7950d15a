/* NonMaxSuppression(boxes [B,N,4], scores [B,C,N], max_output_boxes_per_class?,
 * iou_threshold?, score_threshold?; center_point_box) -> selected [K, 3].
 *
 * The output's length K depends on the data, and hpdlf plans every shape
 * before running: the op folds when its inputs are compile-time constants
 * and is refused with HP_ENOTCONST otherwise (hpdlf-exec then retries with
 * small inputs bound).  Per batch and class, boxes scoring above the
 * threshold are taken by decreasing score (ties: lower index first) and
 * kept unless their IoU with a kept box exceeds iou_threshold, as ONNX
 * Runtime does. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

struct nms_in {
	const struct hp_tensor *boxes, *scores;
	int64_t max_out;
	double iou, score;
	int has_score, center;
};

static void corners(const struct nms_in *in, int64_t b, int64_t i, double *c)
{
	int64_t n = in->boxes->shape.dims[1];
	double v[4];

	for (int k = 0; k < 4; k++)
		v[k] = hpks_get_f(in->boxes->data, in->boxes->dtype, (b * n + i) * 4 + k);
	if (in->center) { /* [xc, yc, w, h] -> y1, x1, y2, x2 */
		c[0] = v[1] - v[3] / 2, c[1] = v[0] - v[2] / 2, c[2] = v[1] + v[3] / 2, c[3] = v[0] + v[2] / 2;
		return;
	}
	c[0] = fmin(v[0], v[2]), c[1] = fmin(v[1], v[3]), c[2] = fmax(v[0], v[2]), c[3] = fmax(v[1], v[3]);
}

static double iou(const double *a, const double *b)
{
	double ih = fmin(a[2], b[2]) - fmax(a[0], b[0]), iw = fmin(a[3], b[3]) - fmax(a[1], b[1]);
	double inter = ih > 0 && iw > 0 ? ih * iw : 0;
	double u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;

	return inter > 0 && u > 0 ? inter / u : 0;
}

/* Select into sel (triples; room for B*C*N); returns the count or -ENOMEM. */
static int64_t nms_select(const struct nms_in *in, int64_t *sel)
{
	int64_t B = in->scores->shape.dims[0], C = in->scores->shape.dims[1], N = in->scores->shape.dims[2], k = 0;
	int64_t *order = malloc((size_t)(N + 1) * sizeof *order), *kept = malloc((size_t)(N + 1) * sizeof *kept);
	double *sc = malloc((size_t)(N + 1) * sizeof *sc);

	if (!order || !kept || !sc)
		k = -ENOMEM;
	for (int64_t b = 0; k >= 0 && b < B; b++)
		for (int64_t c = 0; c < C; c++) {
			int64_t m = 0, nk = 0;
			for (int64_t i = 0; i < N; i++) { /* insertion by score, stable */
				double s = hpks_get_f(in->scores->data, in->scores->dtype, (b * C + c) * N + i);
				int64_t j = m++;
				if (in->has_score && !(s > in->score)) {
					m--;
					continue;
				}
				for (; j > 0 && sc[j - 1] < s; j--)
					sc[j] = sc[j - 1], order[j] = order[j - 1];
				sc[j] = s, order[j] = i;
			}
			for (int64_t j = 0; j < m && nk < in->max_out; j++) {
				double cj[4], ck[4];
				int ok = 1;
				corners(in, b, order[j], cj);
				for (int64_t q = 0; q < nk && ok; q++) {
					corners(in, b, kept[q], ck);
					ok = !(iou(cj, ck) > in->iou);
				}
				if (!ok)
					continue;
				kept[nk++] = order[j];
				sel[3 * k] = b, sel[3 * k + 1] = c, sel[3 * k + 2] = order[j];
				k++;
			}
		}
	free(order);
	free(kept);
	free(sc);
	return k;
}

static int nms_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *bx = hpks_in(g, n, 0), *sc = hpks_in(g, n, 1);
	struct hp_tensor tb = { bx->dtype, bx->shape, bx->data }, ts = { sc->dtype, sc->shape, sc->data };
	struct nms_in in = { &tb, &ts, 0, 0, 0, 0, (int)hp_attr_int(n, "center_point_box", 0) };
	struct hp_shape s = { 2, { 0, 3 } };
	int64_t v = 0, *sel;
	double f[1];
	int cnt = 0, rc = 0;

	if (bx->shape.rank != 3 || bx->shape.dims[2] != 4 || sc->shape.rank != 3 ||
	    sc->shape.dims[0] != bx->shape.dims[0] || sc->shape.dims[2] != bx->shape.dims[1])
		return hp_node_error(g, n, HP_ESHAPE, "boxes must be [B,N,4] and scores [B,C,N]");
	for (int i = 0; i < n->ninputs; i++)
		if (n->inputs[i] >= 0 && !g->values[n->inputs[i]].data)
			return hp_node_error(g, n, HP_ENOTCONST, "input %d must be a compile-time constant: the number "
					     "of boxes selected sets the output shape", i);
	if (hpks_in(g, n, 2) && (rc = hpks_const_ints(g, n, 2, "max_output_boxes_per_class", &v, 1, &cnt)) < 0)
		return rc;
	in.max_out = cnt ? v : 0;
	if (hpks_in(g, n, 3) && (rc = hpks_const_floats(g, n, 3, "iou_threshold", f, 1, &cnt)) == 0 && cnt)
		in.iou = f[0];
	if (rc == 0 && hpks_in(g, n, 4) && (rc = hpks_const_floats(g, n, 4, "score_threshold", f, 1, &cnt)) == 0)
		in.has_score = cnt, in.score = f[0];
	if (rc < 0)
		return rc;
	if (!(sel = malloc((size_t)(3 * hp_shape_numel(&sc->shape) + 3) * sizeof *sel)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	if ((s.dims[0] = nms_select(&in, sel)) < 0) {
		free(sel);
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	}
	hpks_set_out(g, n, 0, HP_I64, &s);
	hpks_set_out_data(g, n, 0, sel);
	return 0;
}

/* Always folded at prepare: the executors never run a folded node. */
static int nms_run(const struct hp_node *n, const struct hp_kargs *a)
{
	(void)a;
	return hp_node_error(NULL, n, HP_EINTERNAL, "runs only folded");
}

static const struct hp_op op_nms = {
	.domain = "", .name = "NonMaxSuppression", .min_inputs = 2, .max_inputs = 5, .min_outputs = 1,
	.max_outputs = 1, .prepare = nms_prepare, .run = nms_run,
};

const struct hp_op *const hp_ops_nms[] = { &op_nms, NULL };
