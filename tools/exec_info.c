/* hpdlf-exec --info: what a model takes and gives, before running it: its
 * inputs and outputs with their names (those --input, --output and --shape
 * want), types and shapes (symbolic dims by name), and its size. */
#include <inttypes.h>
#include <stdio.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"
#include "tools/exec_cli.h"

static void print_value(const struct hp_value *v)
{
	char name[1024], dim[256];

	printf("  %-24s %-8s [", hp_escape(v->name, name, sizeof name), hp_dtype_name(v->dtype));
	for (int d = 0; d < v->shape.rank; d++) {
		if (v->shape.dims[d] >= 0)
			printf("%s%" PRId64, d ? ", " : "", v->shape.dims[d]);
		else
			printf("%s%s", d ? ", " : "", v->dim_param[d] ? hp_escape(v->dim_param[d], dim, sizeof dim) : "?");
	}
	printf("]\n");
}

/* Dynamic input dims set to 1, as a run without --shape does; 1 if any. */
static int fix_dynamic(struct hp_graph *g)
{
	int any = 0;

	for (int i = 0; i < g->ninputs; i++) {
		struct hp_value *v = &g->values[g->inputs[i]];
		for (int d = 0; d < v->shape.rank; d++)
			if (v->shape.dims[d] < 0) {
				v->shape.dims[d] = 1;
				any = 1;
			}
	}
	return any;
}

int exec_info(const char *model)
{
	struct hp_graph *g = NULL;
	uint64_t params = 0, bytes = 0;
	int rc = hp_graph_load(model, &g);

	if (rc < 0) {
		fprintf(stderr, "hpdlf-exec: %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
		return hp_exit_status(rc);
	}
	for (int i = 0; i < g->nvalues; i++) {
		const struct hp_value *v = &g->values[i];
		int64_t n = v->kind == HP_VALUE_INITIALIZER ? hp_shape_numel(&v->shape) : 0;
		if (n > 0) {
			params += (uint64_t)n;
			bytes += (uint64_t)n * hp_dtype_size(v->dtype);
		}
	}
	printf("%s: opset %" PRId64 ", %d nodes, %" PRIu64 " weights (%" PRIu64 " bytes)\n", model,
	       g->opset, g->nnodes, params, bytes);
	printf("inputs (--input NAME=FILE.npy, --shape NAME=D0xD1...):\n");
	for (int i = 0; i < g->ninputs; i++)
		print_value(&g->values[g->inputs[i]]);
	/* output types and shapes come from shape inference: dynamic dims at 1 */
	int dynamic = fix_dynamic(g), inferred = hp_graph_infer(g) == 0;
	printf("outputs (--output NAME=FILE.npy)%s:\n", !inferred ? " (shapes unknown: inference failed)" :
		dynamic ? " (shapes with the dynamic input dims at 1)" : "");
	for (int i = 0; i < g->noutputs; i++)
		print_value(&g->values[g->outputs[i]]);
	hp_graph_free(g);
	return 0;
}
