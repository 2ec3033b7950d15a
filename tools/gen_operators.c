/* Writes docs/operators.md from the operator registry, so the list cannot
 * go stale: the docs-operators test runs `--check docs/operators.md` and
 * fails when the committed file differs from what the registry says.
 *
 *   hpdlf-gen-operators              print the page
 *   hpdlf-gen-operators --check F    exit 1 (with the fix) when F differs
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/autodiff_internal.h"
#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"

static int cmp_op(const void *a, const void *b)
{
	return strcmp((*(const struct hp_op *const *)a)->name, (*(const struct hp_op *const *)b)->name);
}

static void range(char *buf, size_t len, int lo, int hi)
{
	if (lo == hi)
		snprintf(buf, len, "%d", lo);
	else if (hi >= 64)
		snprintf(buf, len, "%d+", lo);
	else
		snprintf(buf, len, "%d-%d", lo, hi);
}

/* The page into a malloc'd buffer. */
static char *page(void)
{
	int count, n = 0, ngrad = 0;
	const struct hp_op *const *all = hp_op_list(&count);
	const struct hp_op **ops = malloc((size_t)count * sizeof *ops);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!ops || !f)
		exit(3);
	for (int i = 0; i < count; i++)
		if (!all[i]->domain || !all[i]->domain[0])
			ops[n++] = all[i];
	qsort(ops, (size_t)n, sizeof *ops, cmp_op);
	for (int i = 0; i < n; i++)
		ngrad += ad_has_rule(ops[i]->name);
	fprintf(f, "# Supported ONNX operators\n\n"
		   "Generated from the operator registry by `hpdlf-gen-operators` (tools/gen_operators.c);\n"
		   "the `docs-operators` test fails when this page and the registry disagree.\n"
		   "Regenerate with `build/docs/hpdlf-gen-operators > docs/operators.md`.\n\n"
		   "%d operators of the default domain (ai.onnx); %d of them have a gradient rule\n"
		   "(training differentiates through them; the others are refused on the gradient\n"
		   "path with a message naming the node).\n\n"
		   "If, Loop and Scan are not kernels: the importer inlines the branch of an If whose\n"
		   "condition is a constant and unrolls a Loop with a constant trip count or a Scan\n"
		   "over inputs of declared length (onnx/control.c).  A condition or trip count known\n"
		   "only once shapes and bound inputs are (Shape -> Gather -> Equal, a scalar input\n"
		   "given with --input) is folded during shape inference (onnx/control_defer.c);\n"
		   "control flow decided by tensor data at run time is refused with a message naming\n"
		   "the node.  Training differentiates the unrolled nodes like any others.\n\n"
		   "| Operator | Inputs | Outputs | Gradient |\n|---|---|---|---|\n", n, ngrad);
	for (int i = 0; i < n; i++) {
		char in[16], out[16];
		range(in, sizeof in, ops[i]->min_inputs, ops[i]->max_inputs);
		range(out, sizeof out, ops[i]->min_outputs, ops[i]->max_outputs);
		fprintf(f, "| %s | %s | %s | %s |\n", ops[i]->name, in, out, ad_has_rule(ops[i]->name) ? "yes" : "");
	}
	fclose(f);
	free(ops);
	return buf;
}

static int check(const char *path, const char *want)
{
	FILE *f = fopen(path, "r");
	char *got = NULL;
	size_t cap = 0;
	ssize_t len = f ? getdelim(&got, &cap, '\0', f) : -1;
	int same = len >= 0 && (size_t)len == strlen(want) && !memcmp(got, want, (size_t)len);

	if (f)
		fclose(f);
	free(got);
	if (!same)
		fprintf(stderr, "%s is stale: regenerate it with build/docs/hpdlf-gen-operators > docs/operators.md\n",
			path);
	return same ? 0 : 1;
}

int main(int argc, char **argv)
{
	char *p = page();
	int rc = 0;

	if (argc == 3 && !strcmp(argv[1], "--check"))
		rc = check(argv[2], p);
	else if (argc == 1)
		fputs(p, stdout);
	else {
		fprintf(stderr, "usage: hpdlf-gen-operators [--check FILE]\n");
		rc = 2;
	}
	free(p);
	return rc;
}
