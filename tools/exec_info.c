/* hpdlf-exec --info (what a model is and whether hpdlf runs it), and the
 * check of --input/--output names against the model's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"
#include "hpdlf/tensor.h"
#include "tools/exec_cli.h"

/* "a, b, c" of the names of values vs[0..n) (escaped, within len). */
static char *name_list(const struct hp_graph *g, const int *vs, int n, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = 0;
	for (int i = 0; i < n && used + 8 < len; i++) {
		char esc[256];
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
					 hp_escape(g->values[vs[i]].name, esc, sizeof esc));
	}
	if (!n)
		snprintf(buf, len, "none");
	return buf;
}

/* Initializers the model lists among its inputs may be bound too (IR < 4). */
static int input_name_ok(const struct hp_graph *g, const char *name)
{
	int v = hp_graph_find_value(g, name);

	return v >= 0 && (g->values[v].kind == HP_VALUE_INPUT || g->values[v].kind == HP_VALUE_INITIALIZER);
}

int exec_check_names(const struct hp_graph *g, const struct cli *c)
{
	char list[768], esc[256];

	for (int k = 0; k < c->ninputs; k++)
		if (!input_name_ok(g, c->inputs[k].name))
			return hp_error(HP_EUSAGE, "--input %s: the model has no input of that name (its inputs: %s)",
					hp_escape(c->inputs[k].name, esc, sizeof esc),
					name_list(g, g->inputs, g->ninputs, list, sizeof list));
	for (int k = 0; k < c->noutputs; k++) {
		int v = hp_graph_find_value(g, c->outputs[k].name);
		if (v < 0 || !g->values[v].is_output)
			return hp_error(HP_EUSAGE, "--output %s: the model has no output of that name (its outputs: %s)",
					hp_escape(c->outputs[k].name, esc, sizeof esc),
					name_list(g, g->outputs, g->noutputs, list, sizeof list));
	}
	return 0;
}

/* "[N,3,224,224]" with the model's names for dynamic dims. */
static char *dims_of(const struct hp_value *v, char *buf, size_t len)
{
	size_t used = 0;

	if (v->shape.rank < 0)
		return strcpy(buf, "?");
	used += (size_t)snprintf(buf, len, "[");
	for (int d = 0; d < v->shape.rank && used < len; d++) {
		if (v->shape.dims[d] >= 0)
			used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, d ? "," : "", v->shape.dims[d]);
		else
			used += (size_t)snprintf(buf + used, len - used, "%s%s", d ? "," : "",
						 v->dim_param[d] ? v->dim_param[d] : "?");
	}
	if (used < len)
		snprintf(buf + used, len - used, "]");
	return buf;
}

static void print_values(const struct hp_graph *g, const char *what, const int *vs, int n)
{
	char esc[256], dims[256];

	printf("  %s (%d):\n", what, n);
	for (int i = 0; i < n; i++) {
		const struct hp_value *v = &g->values[vs[i]];
		printf("    %-24s %-8s %s\n", hp_escape(v->name, esc, sizeof esc),
		       v->dtype ? hp_dtype_name(v->dtype) : "?", dims_of(v, dims, sizeof dims));
	}
}

static void print_params(const struct hp_graph *g)
{
	int64_t count = 0, bytes = 0;
	int n = 0;
	char sz[32];

	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		int64_t e = hp_shape_numel(&val->shape);
		if (val->kind != HP_VALUE_INITIALIZER || e < 0)
			continue;
		n++;
		count += e;
		bytes += e * (int64_t)hp_dtype_size(val->dtype);
	}
	printf("  parameters: %" PRId64 " in %d initializer%s, %s (%" PRId64 " bytes)\n", count, n, n == 1 ? "" : "s",
	       hp_format_size((uint64_t)bytes, sz, sizeof sz), bytes);
	/* exporters that write weights as Constant nodes: those train too */
	count = n = 0;
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		int64_t e = hp_shape_numel(&val->shape);
		if (val->kind == HP_VALUE_CONSTANT && val->producer < 0 && val->data && val->dtype == HP_F32 && e > 1) {
			n++;
			count += e;
		}
	}
	if (n)
		printf("  float constants: %" PRId64 " in %d tensor%s (Constant nodes; in parameter slots they train)\n",
		       count, n, n == 1 ? "" : "s");
}

struct op_count {
	const char *op, *domain;
	int count, supported;
};

static int by_count(const void *a, const void *b)
{
	const struct op_count *x = a, *y = b;

	return x->count != y->count ? y->count - x->count : strcmp(x->op, y->op);
}

/* The operator histogram (after normalization: what hpdlf runs) and the
 * operators it lacks. */
static int print_ops(const struct hp_graph *g)
{
	struct op_count *h = calloc((size_t)g->nnodes + 1, sizeof *h);
	int n = 0, missing = 0;

	if (!h)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *nd = &g->nodes[i];
		int k = 0;
		while (k < n && (strcmp(h[k].op, nd->op_type) || strcmp(h[k].domain, nd->domain)))
			k++;
		if (k == n)
			h[n++] = (struct op_count){ nd->op_type, nd->domain, 0, hp_op_find(nd->domain, nd->op_type) != NULL };
		h[k].count++;
	}
	qsort(h, (size_t)n, sizeof *h, by_count);
	printf("  operators as run, after normalization (%d nodes, %d types):", g->nnodes, n);
	for (int k = 0; k < n; k++) {
		printf("%s %s%s%s %d", k ? "," : "", h[k].domain, h[k].domain[0] ? "." : "", h[k].op, h[k].count);
		missing += !h[k].supported;
	}
	printf("\n  unsupported operators:%s", missing ? "" : " none");
	for (int k = 0, j = 0; k < n; k++)
		if (!h[k].supported)
			printf("%s %s%s%s (%d node%s)", j++ ? "," : "", h[k].domain, h[k].domain[0] ? "." : "", h[k].op,
			       h[k].count, h[k].count > 1 ? "s" : "");
	printf("\n");
	free(h);
	return 0;
}

/* Output shapes come from inference with the dynamic input dims as given by
 * --shape, else 1; when that fails (an unsupported operator) they stay '?'. */
static void try_infer(struct hp_graph *g, const struct cli *c)
{
	for (int i = 0; i < c->nshapes; i++) {
		struct hp_shape s;
		if (hp_shape_parse(c->shapes[i].value, &s) == 0)
			hp_graph_set_input_shape(g, c->shapes[i].name, &s);
	}
	for (int i = 0; i < g->ninputs; i++) {
		struct hp_value *v = &g->values[g->inputs[i]];
		for (int d = 0; d < v->shape.rank; d++)
			if (v->shape.dims[d] < 0)
				v->shape.dims[d] = 1;
	}
	if (hp_graph_infer(g) < 0)
		for (int i = 0; i < g->noutputs; i++)
			g->values[g->outputs[i]].shape.rank = -1;
}

/* --info: load (no shapes needed), then print what the model is. */
int exec_info_main(const struct cli *c)
{
	struct hp_model_info mi = { .size = sizeof mi };
	struct hp_graph *g = NULL;
	char esc[1024];
	int rc = hp_model_info(c->model, &mi);

	if (rc == 0)
		rc = hp_graph_load(c->model, &g);
	if (rc < 0) {
		fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg());
		return hp_exit_status(rc);
	}
	printf("%s\n", hp_escape(c->model, esc, sizeof esc));
	printf("  IR version %" PRId64 ", opset %" PRId64 " (ai.onnx)", mi.ir_version, g->opset);
	for (int i = 0; i < mi.ndomains; i++)
		printf(", %s %" PRId64, mi.domains[i], mi.domain_versions[i]);
	printf("\n  producer: %s%s%s\n", mi.producer[0] ? mi.producer : "(none)", mi.producer_version[0] ? " " : "",
	       mi.producer_version);
	print_values(g, "inputs", g->inputs, g->ninputs);
	print_params(g);
	rc = print_ops(g);
	if (rc == 0) {
		try_infer(g, c);
		print_values(g, "outputs (dynamic input dims as 1 unless --shape)", g->outputs, g->noutputs);
	}
	hp_graph_free(g);
	if (rc < 0) {
		fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg());
		return hp_exit_status(rc);
	}
	return 0;
}

uint16_t exec_half_of(float f, int dtype)
{
	uint32_t x, sign, mag;

	memcpy(&x, &f, 4);
	if (dtype == HP_BF16) /* round to nearest even on the upper 16 bits */
		return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
	sign = (x >> 16) & 0x8000u;
	mag = x & 0x7fffffffu;
	if (mag >= 0x47800000u) /* beyond float16's range (or inf/NaN) */
		return (uint16_t)(sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u));
	if (mag < 0x38800000u) { /* subnormal half: multiples of 2^-24 */
		float a;
		memcpy(&a, &mag, 4);
		return (uint16_t)(sign | (uint32_t)(a * 16777216.0f + 0.5f));
	}
	mag += 0xfffu + ((mag >> 13) & 1); /* round to nearest even at bit 13 */
	return (uint16_t)(sign | ((mag - 0x38000000u) >> 13));
}
