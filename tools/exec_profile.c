/* --profile: kernel time per operator type and per node over the measured
 * iterations (the warm-up subtracted), from the session's per-node
 * accumulators: the same intervals as the --trace spans. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/graph.h"
#include "tools/exec_cli.h"

#define TOP 15

struct row {
	const char *name, *op;
	uint64_t calls;
	double ms, flops;       /* flops: of all calls */
};

static int by_ms(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	return (x->ms < y->ms) - (x->ms > y->ms);
}

int exec_profile_snapshot(struct hp_session *s, struct hp_node_profile **out, int *n)
{
	int k = hp_session_profile(s, NULL, 0);

	*out = NULL;
	*n = 0;
	if (k < 0)
		return k;
	if (!(*out = calloc((size_t)k + 1, sizeof **out)))
		return hp_error(-ENOMEM, "out of memory");
	*n = hp_session_profile(s, *out, k);
	return 0;
}

/* Rows per node, minus what the warm-up (before) had added. */
static int node_rows(const struct hp_graph *g, const struct hp_node_profile *p, int n,
		     const struct hp_node_profile *before, int nb, struct row *r)
{
	int k = 0;

	for (int i = 0, j = 0; i < n; i++) {
		uint64_t calls = p[i].calls;
		double ms = p[i].total_ms;
		while (j < nb && before[j].node < p[i].node)
			j++;
		if (j < nb && before[j].node == p[i].node) {
			calls -= before[j].calls;
			ms -= before[j].total_ms;
		}
		if (!calls)
			continue;
		const struct hp_node *nd = &g->nodes[p[i].node];
		r[k++] = (struct row){ nd->name, nd->op_type, calls, ms, p[i].flops * (double)calls };
	}
	return k;
}

static int type_rows(const struct row *nodes, int n, struct row *t)
{
	int k = 0;

	for (int i = 0; i < n; i++) {
		int j = 0;
		while (j < k && strcmp(t[j].op, nodes[i].op))
			j++;
		if (j == k)
			t[k++] = (struct row){ nodes[i].op, nodes[i].op, 0, 0, 0 };
		t[j].calls += nodes[i].calls;
		t[j].ms += nodes[i].ms;
		t[j].flops += nodes[i].flops;
	}
	return k;
}

static void print_rows(const char *title, const struct row *r, int n, int top, double total, int names)
{
	char label[64], en[96], eo[64];

	fprintf(stderr, "hpdlf-exec:   %-40s %8s %11s %10s %7s %8s\n", title, "calls", "total ms", "mean ms", "share",
		"GFLOP/s");
	for (int i = 0; i < n && i < top; i++) {
		/* names come from the model: escaped, never raw */
		hp_escape(r[i].op, eo, sizeof eo);
		if (names)
			snprintf(label, sizeof label, "%s (%s)", hp_escape(r[i].name, en, sizeof en), eo);
		else
			snprintf(label, sizeof label, "%s", eo);
		fprintf(stderr, "hpdlf-exec:   %-40.40s %8llu %11.3f %10.4f %6.1f%% %8.2f\n", label,
			(unsigned long long)r[i].calls, r[i].ms, r[i].ms / (double)r[i].calls,
			total > 0 ? 100.0 * r[i].ms / total : 0.0, r[i].ms > 0 ? r[i].flops / r[i].ms / 1e6 : 0.0);
	}
}

static json_object *rows_json(const struct row *r, int n, double total, int names)
{
	json_object *a = json_object_new_array();

	for (int i = 0; i < n; i++) {
		json_object *o = json_object_new_object();
		if (names)
			json_object_object_add(o, "node", json_object_new_string(r[i].name));
		json_object_object_add(o, "op_type", json_object_new_string(r[i].op));
		json_object_object_add(o, "calls", json_object_new_int64((int64_t)r[i].calls));
		json_object_object_add(o, "total_ms", json_object_new_double(r[i].ms));
		json_object_object_add(o, "share", json_object_new_double(total > 0 ? r[i].ms / total : 0));
		json_object_object_add(o, "gflops", json_object_new_double(r[i].ms > 0 ? r[i].flops / r[i].ms / 1e6 : 0));
		json_object_array_add(a, o);
	}
	return a;
}

int exec_profile_report(struct hp_session *s, const struct hp_graph *g, const struct cli *c,
			const struct hp_node_profile *before, int nb, json_object *stats)
{
	struct hp_node_profile *p;
	struct row *nodes = NULL, *types = NULL;
	int n, nn, nt, rc = exec_profile_snapshot(s, &p, &n);
	double total = 0;

	if (rc < 0)
		return rc;
	nodes = calloc((size_t)n + 1, sizeof *nodes);
	types = calloc((size_t)n + 1, sizeof *types);
	if (!nodes || !types) {
		rc = hp_error(-ENOMEM, "out of memory");
		goto out;
	}
	nn = node_rows(g, p, n, before, nb, nodes);
	nt = type_rows(nodes, nn, types);
	for (int i = 0; i < nn; i++)
		total += nodes[i].ms;
	qsort(nodes, (size_t)nn, sizeof *nodes, by_ms);
	qsort(types, (size_t)nt, sizeof *types, by_ms);
	if (!c->quiet) {
		fprintf(stderr, "hpdlf-exec: profile: %.3f ms of kernel time in %d nodes (summed over workers)\n", total, nn);
		print_rows("by operator type", types, nt, nt, total, 0);
		print_rows(nn > TOP ? "top nodes" : "nodes", nodes, nn, TOP, total, 1);
	}
	if (stats) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "kernel_ms", json_object_new_double(total));
		json_object_object_add(o, "by_op_type", rows_json(types, nt, total, 0));
		json_object_object_add(o, "by_node", rows_json(nodes, nn, total, 1));
		json_object_object_add(stats, "profile", o);
	}
out:
	free(p);
	free(nodes);
	free(types);
	return rc;
}
