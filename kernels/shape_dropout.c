/* Dropout.  Inference (training_mode false or absent, or ratio 0): Y = X,
 * mask all true.  Training mode draws the mask as ONNX's reference does,
 * with NumPy's legacy generator:
 *
 *   np.random.seed(seed); mask = np.random.uniform(0, 1, x.shape) >= ratio
 *   y = mask * x * (1 / (1 - ratio))
 *
 * np.random.seed(int) is MT19937's init_genrand(seed) (checked against
 * numpy 1.24), and each uniform double takes two 32-bit outputs:
 * ((a >> 5) * 2^26 + (b >> 6)) / 2^53.  So the same seed gives numpy's mask
 * bit for bit, on any thread count (the draw is sequential).  The seed is
 * the node's `seed` attribute (taken modulo 2^32); without one it is
 * HPK_DROPOUT_SEED mixed with a hash of the node's name, fixed so that runs
 * are reproducible (an executor that wants a session seed sets the
 * attribute before hp_graph_infer).  Every run of the node draws the same
 * mask, as the reference does for a fixed seed.
 *
 * Two op variants share the code: inference Dropout aliases X's bytes;
 * training Dropout writes a new tensor and is never constant-folded.
 * prepare points n->op at the variant the node needs. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/shape_util.h"

#define HPK_DROPOUT_SEED 0x5eed1234u

/* ---- MT19937 (Matsumoto & Nishimura), as numpy's legacy RandomState ---- */

struct mt19937 {
	uint32_t mt[624];
	int pos;
};

static void mt_seed(struct mt19937 *s, uint32_t seed)
{
	s->mt[0] = seed;
	for (int i = 1; i < 624; i++)
		s->mt[i] = 1812433253u * (s->mt[i - 1] ^ (s->mt[i - 1] >> 30)) + (uint32_t)i;
	s->pos = 624;
}

static void mt_refill(struct mt19937 *s)
{
	for (int i = 0; i < 624; i++) {
		uint32_t y = (s->mt[i] & 0x80000000u) | (s->mt[(i + 1) % 624] & 0x7fffffffu);
		s->mt[i] = s->mt[(i + 397) % 624] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
	}
	s->pos = 0;
}

static uint32_t mt_next(struct mt19937 *s)
{
	uint32_t y;

	if (s->pos >= 624)
		mt_refill(s);
	y = s->mt[s->pos++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	return y ^ (y >> 18);
}

/* numpy's random_sample: 53 random bits in [0, 1). */
static double mt_double(struct mt19937 *s)
{
	uint32_t a = mt_next(s) >> 5, b = mt_next(s) >> 6;

	return (a * 67108864.0 + b) / 9007199254740992.0;
}

/* ---- the op -------------------------------------------------------------- */

struct dropout_p {
	uint32_t seed;
	float ratio;        /* attribute or default, when there is no ratio input */
	int training;       /* -1: decided at run time from the training_mode input */
};

static const struct hp_op op_dropout_train;

static uint32_t name_seed(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return HPK_DROPOUT_SEED ^ h;
}

static int dropout_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0), *tm = hpks_in(g, n, 2), *r = hpks_in(g, n, 1);
	const struct hp_attr *sa = hp_node_attr(n, "seed");
	struct dropout_p *p;
	double ratio = hp_attr_float(n, "ratio", 0.5f);
	int cnt, rc;

	if (r && r->data && (rc = hpks_const_floats(g, n, 1, "ratio", &ratio, 1, &cnt)) < 0)
		return rc;
	if (!(p = calloc(1, sizeof *p)))
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	p->ratio = (float)ratio;
	p->seed = sa ? (uint32_t)(uint64_t)hp_attr_int(n, "seed", 0) : name_seed(n->name ? n->name : "");
	p->training = !tm ? 0 : tm->data ? hpks_get_i(tm->data, tm->dtype, 0) != 0 : -1;
	if (p->training && (!r || r->data) && ratio == 0)
		p->training = 0; /* ratio 0 keeps every element: the identity */
	if (p->training && x->dtype != HP_F32 && x->dtype != HP_F64)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "training-mode Dropout of %s (float32, float64 only)",
				     hp_dtype_name(x->dtype));
	if ((!r || r->data) && !(ratio >= 0 && ratio < 1) && p->training)
		return hp_node_error(g, n, HP_EMODEL, "ratio %g is outside [0, 1)", ratio);
	if (p->training)
		n->op = &op_dropout_train;
	hpks_set_out(g, n, 0, x->dtype, &x->shape);
	hpks_set_out(g, n, 1, g->opset < 10 ? x->dtype : HP_BOOL, &x->shape);
	return 0;
}

/* The mask of inference Dropout: all ones in its dtype. */
static void fill_ones(const struct hp_tensor *m)
{
	int64_t cnt = hp_shape_numel(&m->shape);
	size_t es = hp_dtype_size(m->dtype);
	unsigned char one[8] = { 1 };

	if (m->dtype == HP_F32)
		memcpy(one, &(float){ 1 }, 4);
	else if (m->dtype == HP_F64)
		memcpy(one, &(double){ 1 }, 8);
	else if (m->dtype == HP_F16)
		memcpy(one, &(uint16_t){ 0x3c00 }, 2);
	for (int64_t i = 0; i < cnt; i++)
		memcpy((char *)m->data + (size_t)i * es, one, es);
}

/* y = (mask * x) * scale in x's type, as numpy evaluates the reference. */
static void draw(const struct dropout_p *p, float ratio, const struct hp_kargs *a)
{
	struct mt19937 s;
	const struct hp_tensor *x = &a->in[0];
	uint8_t *mask = a->nout > 1 ? a->out[1].data : NULL;
	int64_t cnt = hp_shape_numel(&x->shape);
	float fscale = 1.0f / (1.0f - ratio);
	double dscale = 1.0 / (1.0 - (double)ratio);

	mt_seed(&s, p->seed);
	for (int64_t i = 0; i < cnt; i++) {
		int keep = mt_double(&s) >= (double)ratio;
		if (x->dtype == HP_F32)
			((float *)a->out[0].data)[i] = ((float)keep * ((const float *)x->data)[i]) * fscale;
		else
			((double *)a->out[0].data)[i] = ((double)keep * ((const double *)x->data)[i]) * dscale;
		if (mask)
			mask[i] = (uint8_t)keep;
	}
}

static int dropout_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct dropout_p *p = n->priv;
	int training = p->training;
	float ratio = p->ratio;

	if (training < 0)
		training = hpks_get_i(a->in[2].data, a->in[2].dtype, 0) != 0;
	if (training && a->nin > 1 && a->in[1].data)
		ratio = (float)hpks_get_f(a->in[1].data, a->in[1].dtype, 0);
	if (training && ratio != 0) {
		if (!(ratio >= 0 && ratio < 1))
			return hp_error(HP_EDATA, "node '%s' (Dropout): ratio %g is outside [0, 1)", n->name,
					(double)ratio);
		draw(p, ratio, a);
		return 0;
	}
	if (a->out[0].data != a->in[0].data)
		hpks_copy_bytes(a->out[0].data, a->in[0].data, hp_tensor_bytes(&a->in[0]));
	if (a->nout > 1 && a->out[1].data)
		fill_ones(&a->out[1]);
	return 0;
}

const struct hp_op hpks_op_dropout = {
	.domain = "", .name = "Dropout", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1, .max_outputs = 2,
	.flags = HP_OP_ALIAS, .prepare = dropout_prepare, .run = dropout_run,
};

static const struct hp_op op_dropout_train = {
	.domain = "", .name = "Dropout", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1, .max_outputs = 2,
	.flags = HP_OP_NO_FOLD | HP_OP_INPLACE, .prepare = dropout_prepare, .run = dropout_run,
};
