/* Dead taps of a Conv dropped: a kernel tap that reads only padding, for
 * every output position, contributes nothing but products 0 * w.  ASPP
 * heads (DeepLabV3) run 3x3 convolutions with dilation 12, 24 and 36 and
 * pad = dilation on feature maps of 6x6 to 32x32: on a 6x6 map every tap
 * but the centre lies in the padding for every output, so the convolution
 * is a 1x1 convolution, and was 53% of DeepLabV3-MobileNetV3's kernel
 * time at 96x96 through the 3x3 paths.
 *
 * Per spatial axis (1-D to 3-D, any group) the pass finds the live taps,
 * those that read some input position for some output (from the input
 * size, pads, stride, dilation), and when their hull [t0, t1] is smaller
 * than the kernel rewrites the Conv to that kernel: W sliced once (a new
 * initializer), pads begin pb - t0*d and end the least that keeps the
 * output size, dilation 1 when one tap is left (so the 1x1 paths take it).
 * Pads stay >= 0: where a negative begin pad would be needed (strides or
 * pads smaller than the dilation) the hull grows to dead taps again until
 * it is not, and likewise at the end (any end pad > -stride keeps the size).
 * auto_pad becomes explicit pads.
 *
 * Exactness: with finite weights the dropped products are +-0, so the
 * result is the full convolution's up to summation order (the smaller
 * kernel takes other kernel paths; tests/exec/test_fuse_dil.c checks it
 * against a double reference over all taps).  With an Inf or NaN weight on
 * a dead tap the full convolution through im2col gives NaN (0 * Inf); the
 * rewritten one does not.  ONNX Runtime 1.20 never multiplies padding: it
 * gives the finite value for such weights (checked with a 6x6 map,
 * dilation 12, W[0,0,0,0] = Inf: no NaN; with pad 1 and no dilation the
 * border outputs whose tap reads padding are finite too), so the pass
 * follows ONNX Runtime and drops the taps whatever their values.
 *
 * It changes the kernel path (rounding), so it runs in core and out of
 * core alike, before planning: both plan the same graph.  The sliced
 * weights live in memory, at most DIL_MAX_BYTES of them in every mode;
 * under a budget a sliced weight of HP_FZ_SPILL_MIN_BYTES or more goes to
 * the graph's spill file instead (as fuse_const.c does), written a block of
 * (output channel, input channel) rows at a time. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "exec/fuse_internal.h"

#define DIL_MAX_BYTES (256u << 20)


static int64_t floor_div(int64_t a, int64_t b) /* b > 0 */
{
	return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* Tap t reads some input position in [0, h) for some output o < out. */
static int tap_live(int64_t t, int64_t h, int64_t out, int64_t s, int64_t d, int64_t pb)
{
	int64_t lo = -floor_div(t * d - pb, s); /* ceil((pb - t d) / s) */
	int64_t hi = floor_div(h - 1 + pb - t * d, s);

	lo = lo < 0 ? 0 : lo;
	hi = hi > out - 1 ? out - 1 : hi;
	return lo <= hi;
}

/* Begin and end pads of axis i as ONNX defines them (auto_pad included);
 * the output size, or 0 when the attributes are not usable here. */
static int64_t axis_pads(const struct hp_node *n, int nd, int i, int64_t h, int64_t k, int64_t s, int64_t d,
			 int64_t *pb, int64_t *pe)
{
	const char *ap = hp_attr_string(n, "auto_pad", "NOTSET");
	const int64_t *p;
	int64_t ek = (k - 1) * d + 1, out, total;

	if (!strcmp(ap, "VALID")) {
		*pb = *pe = 0;
	} else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
		out = (h + s - 1) / s;
		total = (out - 1) * s + ek - h;
		total = total < 0 ? 0 : total;
		*pb = !strcmp(ap, "SAME_UPPER") ? total / 2 : total - total / 2;
		*pe = total - *pb;
	} else if (!strcmp(ap, "NOTSET") || !ap[0]) {
		int cnt = hp_attr_ints(n, "pads", &p);
		if (cnt >= 0 && cnt != 2 * nd)
			return 0;
		*pb = cnt > 0 ? p[i] : 0;
		*pe = cnt > 0 ? p[nd + i] : 0;
	} else {
		return 0;
	}
	if (*pb < 0 || *pe < 0 || h + *pb + *pe < ek)
		return 0;
	return (h + *pb + *pe - ek) / s + 1;
}

/* An attribute INTS of nd values >= 1 (or absent: 1); 0 when malformed. */
static int ints_or_one(const struct hp_node *n, const char *name, int nd, int64_t *v)
{
	const int64_t *p;
	int cnt = hp_attr_ints(n, name, &p);

	for (int i = 0; i < nd; i++) {
		v[i] = cnt > 0 ? p[i] : 1;
		if (v[i] < 1)
			return 0;
	}
	return cnt < 0 || cnt == nd;
}

/* Axis i's cut: the live hull, grown until the pads are >= 0 and the output
 * size is kept.  1 when it is smaller than the kernel, 0 when not, -1 when
 * no tap is live (left alone: the output is the bias). */
static int axis_cut(int64_t h, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t out, struct hp_fz_cut *c, int i)
{
	int64_t t0 = -1, t1 = -1, npb, pe;

	for (int64_t t = 0; t < k; t++)
		if (tap_live(t, h, out, s, d, pb)) {
			t0 = t0 < 0 ? t : t0;
			t1 = t;
		}
	if (t0 < 0)
		return -1;
	if (t0 * d > pb)
		t0 = pb / d;
	npb = pb - t0 * d;
	/* least end pad for `out` outputs; floor division keeps it down to -(s - 1) */
	while ((pe = (out - 1) * s + (t1 - t0) * d + 1 - h - npb) <= -s && t1 < k - 1)
		t1++;
	c->t0[i] = t0;
	c->kin[i] = k;
	c->k[i] = t1 - t0 + 1;
	c->dil[i] = c->k[i] == 1 ? 1 : d;
	c->pb[i] = npb;
	c->pe[i] = pe < 0 ? 0 : pe;
	return c->k[i] < k;
}

int hp_fz_conv_cut(const struct hp_graph *g, const struct hp_node *n, struct hp_fz_cut *c)
{
	const struct hp_value *x, *w;
	int64_t s[3], d[3];
	int smaller = 0;

	if (!hp_fz_is(n, "Conv") || n->folded || n->ninputs < 2 || n->noutputs != 1 || n->inputs[0] < 0 ||
	    n->inputs[1] < 0 || hp_attr_int(n, "hpdlf_path", -1) != -1)
		return 0;
	x = &g->values[n->inputs[0]];
	w = &g->values[n->inputs[1]];
	c->nd = x->shape.rank - 2;
	if (c->nd < 1 || c->nd > 3 || w->shape.rank != x->shape.rank || x->dtype != HP_F32 || w->dtype != HP_F32 ||
	    !ints_or_one(n, "strides", c->nd, s) ||
	    !ints_or_one(n, "dilations", c->nd, d))
		return 0;
	for (int i = 0; i < x->shape.rank; i++)
		if (x->shape.dims[i] < 1 || w->shape.dims[i] < 1)
			return 0;
	for (int i = 0; i < c->nd; i++) {
		int64_t h = x->shape.dims[2 + i], k = w->shape.dims[2 + i], pb, pe, out, r;
		if (!(out = axis_pads(n, c->nd, i, h, k, s[i], d[i], &pb, &pe)) ||
		    (r = axis_cut(h, k, s[i], d[i], pb, out, c, i)) < 0)
			return 0;
		smaller |= r;
	}
	return smaller;
}

/* nr rows of W (kvol floats each) from src, sliced by c into dst. */
static void slice_rows(const float *src, int64_t nr, const struct hp_fz_cut *c, float *dst)
{
	int64_t kin[3] = { 1, 1, 1 }, t0[3] = { 0 }, k[3] = { 1, 1, 1 }, kvol;
	int off = 3 - c->nd;

	for (int i = 0; i < c->nd; i++) {
		kin[off + i] = c->kin[i];
		t0[off + i] = c->t0[i];
		k[off + i] = c->k[i];
	}
	kvol = kin[0] * kin[1] * kin[2];
	for (int64_t r = 0; r < nr; r++)
		for (int64_t a = 0; a < k[0]; a++)
			for (int64_t b = 0; b < k[1]; b++)
				for (int64_t e = 0; e < k[2]; e++)
					*dst++ = src[r * kvol + ((t0[0] + a) * kin[1] + t0[1] + b) * kin[2] + t0[2] + e];
}

/* W's sliced copy: into memory (*out), or with spill_fd >= 0 into that
 * file at `at`, a block of rows at a time; W read from memory or its file. */
static int slice_weight(const struct hp_graph *g, int wv, const struct hp_fz_cut *c, float **out, int spill_fd,
			uint64_t at)
{
	const struct hp_value *w = &g->values[wv];
	int64_t rows = w->shape.dims[0] * w->shape.dims[1], kvol = hp_shape_numel(&w->shape) / rows, nk = 1, blk;
	float *in = NULL, *dst = NULL;
	int fd = -1, rc = 0;

	for (int i = 0; i < c->nd; i++)
		nk *= c->k[i];
	blk = spill_fd >= 0 ? HP_FZ_SPILL_BLOCK_BYTES / 4 / kvol : rows;
	blk = blk < 1 ? 1 : blk > rows ? rows : blk;
	if (!(dst = malloc((size_t)(spill_fd >= 0 ? blk : rows) * (size_t)nk * sizeof *dst + 1)) ||
	    (!w->data && !(in = malloc((size_t)(blk * kvol) * sizeof *in + 1)))) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	if (!w->data && blk < rows && (fd = open(g->files[w->src.file], O_RDONLY | O_CLOEXEC)) < 0) {
		rc = hp_error(-errno, "%s: %s", g->files[w->src.file], strerror(errno));
		goto out;
	}
	for (int64_t r0 = 0; r0 < rows && rc == 0; r0 += blk) {
		int64_t nr = rows - r0 < blk ? rows - r0 : blk;
		const float *src = w->data ? (const float *)w->data + r0 * kvol : in;
		float *to = spill_fd >= 0 ? dst : dst + r0 * nk;
		if (!w->data && blk == rows && hp_graph_read_init(g, wv, in) < 0) {
			rc = hp_error(-EIO, "cannot read '%s' to slice it", w->name);
			break;
		}
		if (!w->data && blk < rows &&
		    (rc = hp_fz_read_at(fd, g->files[w->src.file], w, (uint64_t)(r0 * kvol) * 4, in,
					(size_t)(nr * kvol) * sizeof *in)) < 0)
			break;
		slice_rows(src, nr, c, to);
		if (spill_fd >= 0)
			rc = hp_fz_write_at(spill_fd, at + (uint64_t)(r0 * nk) * 4, dst, (size_t)(nr * nk) * sizeof *dst,
					    w->name);
	}
out:
	if (fd >= 0)
		close(fd);
	free(in);
	if (rc == 0 && spill_fd < 0)
		*out = dst;
	else
		free(dst);
	return rc;
}

/* The sliced weight as a new initializer: its value index. */
static int new_weight(struct hp_graph *g, int wv, const struct hp_fz_cut *c, int spill)
{
	struct hp_shape s = g->values[wv].shape;
	const struct hp_value *w = &g->values[wv];
	float *data = NULL;
	uint64_t at;
	int fd, fi, rc;

	for (int i = 0; i < c->nd; i++)
		s.dims[2 + i] = c->k[i];
	if (spill && (uint64_t)hp_shape_numel(&s) * 4 >= HP_FZ_SPILL_MIN_BYTES &&
	    (w->data || (w->src.kind == HP_BLOB_FILE && w->src.file >= 0 && w->src.file < g->nfiles))) {
		if ((fi = hp_fz_spill(g, &fd, &at)) < 0)
			return fi;
		if ((rc = slice_weight(g, wv, c, NULL, fd, at)) < 0)
			return rc;
		return hp_fz_file_init(g, g->values[wv].name, ".taps", &s, fi, at);
	}
	if ((rc = slice_weight(g, wv, c, &data, -1, 0)) < 0)
		return rc;
	return hp_fz_memory_init(g, g->values[wv].name, ".taps", &s, data);
}

static int is_geometry_attr(const char *name)
{
	return !strcmp(name, "pads") || !strcmp(name, "dilations") || !strcmp(name, "kernel_shape") ||
	       !strcmp(name, "auto_pad");
}

/* "3x3 dilation 12" or "1x1" into buf. */
static void kernel_str(char *buf, size_t len, const int64_t *k, const int64_t *d, int nd)
{
	int at = 0, dil = 0;

	for (int i = 0; i < nd && at < (int)len; i++) {
		at += snprintf(buf + at, len - (size_t)at, "%s%lld", i ? "x" : "", (long long)k[i]);
		dil |= d[i] != 1;
	}
	for (int i = 0; dil && i < nd && at < (int)len; i++)
		at += snprintf(buf + at, len - (size_t)at, "%s%lld", i ? "x" : " dilation ", (long long)d[i]);
}

int hp_fz_conv_recut(struct hp_graph *g, int ci, int wv, const struct hp_fz_cut *c, struct hp_fuse_report *r,
		     const char *pattern)
{
	int ni, rc = 0;
	int64_t pads[6], d_old[3], kin[3];
	char line[512], from[96], to[96];
	const struct hp_node *n = &g->nodes[ci];
	int in[3] = { n->inputs[0], wv, n->ninputs > 2 ? n->inputs[2] : -1 };
	if ((ni = hp_fz_add_node(g, n->name, "Conv", 0, n->ninputs > 2 ? 3 : 2, in, n->outputs[0])) < 0)
		return ni;
	n = &g->nodes[ci]; /* the node array may have moved */
	for (int a = 0; a < n->nattrs && rc == 0; a++)
		if (!is_geometry_attr(n->attrs[a].name))
			rc = hp_graph_add_attr(g, ni, &n->attrs[a]);
	for (int i = 0; i < c->nd; i++) {
		pads[i] = c->pb[i];
		pads[c->nd + i] = c->pe[i];
	}
	if (rc == 0)
		rc = hp_fz_attr_ints(g, ni, "kernel_shape", c->k, c->nd);
	if (rc == 0)
		rc = hp_fz_attr_ints(g, ni, "pads", pads, 2 * c->nd);
	if (rc == 0)
		rc = hp_fz_attr_ints(g, ni, "dilations", c->dil, c->nd);
	if (rc < 0)
		return rc;
	n = &g->nodes[ci];
	ints_or_one(n, "dilations", c->nd, d_old);
	for (int i = 0; i < c->nd; i++)
		kin[i] = c->kin[i];
	kernel_str(from, sizeof from, kin, d_old, c->nd);
	kernel_str(to, sizeof to, c->k, c->dil, c->nd);
	snprintf(line, sizeof line, "Conv '%s': %s kernel to %s (taps reading only padding dropped)", n->name, from, to);
	hp_fz_note(r, pattern, line);
	/* the new node takes the old one's place (the plan keeps the imported order) */
	struct hp_node t = g->nodes[ci];
	g->nodes[ci] = g->nodes[ni];
	g->nodes[ni] = t;
	hp_graph_remove_node(g, ni);
	return 0;
}

int hp_fuse_dead_taps(struct hp_graph *g, struct hp_fuse_report *r, int spill)
{
	uint64_t left = DIL_MAX_BYTES;
	int any = 0, rc;

	for (int i = 0; i < g->nnodes; i++) {
		struct hp_fz_cut c;
		uint64_t bytes;
		int w = g->nodes[i].ninputs > 1 ? g->nodes[i].inputs[1] : -1, wv;
		if (w < 0 || !hp_fz_const(g, w) || hp_fz_user_fed(g, w) || !hp_fz_conv_cut(g, &g->nodes[i], &c))
			continue;
		bytes = (uint64_t)g->values[g->nodes[i].inputs[1]].shape.dims[0] *
			(uint64_t)g->values[g->nodes[i].inputs[1]].shape.dims[1] * 4;
		for (int a = 0; a < c.nd; a++)
			bytes *= (uint64_t)c.k[a];
		if (bytes > left)
			continue;
		left -= bytes;
		if ((wv = new_weight(g, w, &c, spill)) < 0)
			return wv;
		if ((rc = hp_fz_conv_recut(g, i, wv, &c, r, "Conv dead taps")) < 0)
			return rc;
		any = 1;
	}
	return any;
}
