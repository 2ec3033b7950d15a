/* TfIdfVectorizer over integer tokens ([N] or [B, N]; pool_int64s -- the
 * pool_strings form needs strings, which hpdlf does not hold): counts of
 * the pool's n-grams (min_gram_length..max_gram_length, skips 0..
 * max_skip_count between their tokens; 1-grams counted once) into
 * ngram_indexes slots, as TF, IDF (present: weight) or TFIDF (count *
 * weight). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/shape_util.h"

struct tpriv {
	int mode;             /* 0 TF, 1 IDF, 2 TFIDF */
	int64_t minn, maxn, maxskip, width;
};

static int tfidf_prepare(struct hp_graph *g, struct hp_node *n)
{
	const struct hp_value *x = hpks_in(g, n, 0);
	const int64_t *counts, *idx, *pool;
	int nc = hp_attr_ints(n, "ngram_counts", &counts), ni = hp_attr_ints(n, "ngram_indexes", &idx);
	int np = hp_attr_ints(n, "pool_int64s", &pool);
	const char *mode = hp_attr_string(n, "mode", "");
	struct tpriv *p = calloc(1, sizeof *p);
	struct hp_shape s = x->shape;

	if (!p)
		return hp_node_error(g, n, -ENOMEM, "out of memory");
	n->priv = p;
	if (np < 0)
		return hp_node_error(g, n, HP_EUNSUPPORTED, "only pool_int64s is supported (pool_strings needs strings)");
	if ((x->dtype != HP_I32 && x->dtype != HP_I64) || x->shape.rank < 1 || x->shape.rank > 2 || nc < 1 || ni < 0)
		return hp_node_error(g, n, HP_EMODEL, "needs int tokens [N] or [B,N], ngram_counts and ngram_indexes");
	p->mode = !strcmp(mode, "TF") ? 0 : !strcmp(mode, "IDF") ? 1 : !strcmp(mode, "TFIDF") ? 2 : -1;
	if (p->mode < 0)
		return hp_node_error(g, n, HP_EMODEL, "mode '%s' is not TF, IDF or TFIDF", mode);
	p->minn = hp_attr_int(n, "min_gram_length", 1);
	p->maxn = hp_attr_int(n, "max_gram_length", 1);
	p->maxskip = hp_attr_int(n, "max_skip_count", 0);
	if (p->minn < 1 || p->maxn < p->minn || p->maxn > nc || p->maxskip < 0)
		return hp_node_error(g, n, HP_EMODEL, "gram lengths or skip count do not fit ngram_counts");
	for (int i = 0; i < ni; i++)
		p->width = idx[i] + 1 > p->width ? idx[i] + 1 : p->width;
	s.dims[s.rank - 1] = p->width;
	hpks_set_out(g, n, 0, HP_F32, &s);
	return 0;
}

/* Ordinal of the pool n-gram of length len equal to tokens at t, t+step, ...; -1 if none. */
static int64_t find_gram(const struct hp_node *n, int64_t len, const int64_t *tok, int64_t step)
{
	const int64_t *counts, *pool;
	int nc = hp_attr_ints(n, "ngram_counts", &counts), np = hp_attr_ints(n, "pool_int64s", &pool);
	int64_t lo = counts[len - 1], hi = len < nc ? counts[len] : np, ord = 0;

	for (int64_t l = 1; l < len; l++) /* n-grams of shorter lengths come first */
		ord += ((l < nc ? counts[l] : np) - counts[l - 1]) / l;
	for (int64_t at = lo; at + len <= hi; at += len, ord++) {
		int64_t j = 0;
		while (j < len && pool[at + j] == tok[j * step])
			j++;
		if (j == len)
			return ord;
	}
	return -1;
}

static int tfidf_run(const struct hp_node *n, const struct hp_kargs *a)
{
	const struct tpriv *p = n->priv;
	const struct hp_tensor *x = &a->in[0];
	const int64_t *idx;
	const float *wts;
	int nw = hp_attr_ints(n, "ngram_indexes", &idx), nwt = 0;
	int64_t B = x->shape.rank == 2 ? x->shape.dims[0] : 1, N = x->shape.dims[x->shape.rank - 1];
	int64_t *tok = malloc((size_t)(N + 1) * sizeof *tok);
	float *y = a->out[0].data;
	const struct hp_attr *wa = hp_node_attr(n, "weights");

	if (!tok)
		return hp_node_error(NULL, n, -ENOMEM, "out of memory");
	wts = wa && wa->type == HP_ATTR_FLOATS ? wa->floats : NULL;
	nwt = wts ? wa->n : 0;
	memset(y, 0, hp_tensor_bytes(&a->out[0]));
	for (int64_t b = 0; b < B; b++) {
		for (int64_t i = 0; i < N; i++)
			tok[i] = hpks_get_i(x->data, x->dtype, b * N + i);
		for (int64_t len = p->minn; len <= p->maxn; len++)
			for (int64_t skip = 0; skip <= (len == 1 ? 0 : p->maxskip); skip++)
				for (int64_t t = 0; t + (len - 1) * (skip + 1) < N; t++) {
					int64_t ord = find_gram(n, len, tok + t, skip + 1);
					if (ord >= 0 && ord < nw)
						y[b * p->width + idx[ord]] += 1;
				}
		for (int64_t k = 0; k < nw; k++) {
			float *v = &y[b * p->width + idx[k]], w = k < nwt ? wts[k] : 1;
			*v = p->mode == 0 ? *v : p->mode == 1 ? (*v > 0 ? w : 0) : *v * w;
		}
	}
	free(tok);
	return 0;
}

static const struct hp_op op_tfidf = {
	.domain = "", .name = "TfIdfVectorizer", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
	.prepare = tfidf_prepare, .run = tfidf_run,
};

const struct hp_op *const hp_ops_tfidf[] = { &op_tfidf, NULL };
