/* libFuzzer target: hp_graph_load_buffer over arbitrary bytes.  Whatever
 * loads must be a consistent graph whose constants read back. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/graph.h"
#include "hpdlf/tensor.h"

static void check(const struct hp_graph *g)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		for (int j = 0; j < n->ninputs; j++)
			if (n->inputs[j] < -1 || n->inputs[j] >= g->nvalues)
				abort();
		for (int j = 0; j < n->nattrs; j++)
			if (!hp_node_attr(n, n->attrs[j].name))
				abort();
	}
	for (int v = 0; v < g->nvalues; v++) {
		const struct hp_value *val = &g->values[v];
		struct hp_tensor t = { val->dtype, val->shape, NULL };
		size_t bytes = hp_tensor_bytes(&t);
		void *buf;

		if (!val->data || hp_shape_numel(&val->shape) < 0)
			continue;
		buf = malloc(bytes + 1);
		if (buf && val->kind == HP_VALUE_INITIALIZER) {
			if (hp_graph_read_init(g, v, buf) < 0 || memcmp(buf, val->data, bytes))
				abort();
		} else if (buf && bytes) {
			memcpy(buf, val->data, bytes); /* the whole constant is readable */
		}
		free(buf);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct hp_graph *g;

	if (hp_graph_load_buffer(data, size, "fuzz.onnx", NULL, &g) == 0) {
		check(g);
		hp_graph_free(g);
	}
	return 0;
}
