/* --plan-dot: the plan as Graphviz.  The steps run top to bottom in plan
 * order (one box per kernel with its predicted time); the I/O the plan
 * issues before a step hangs beside it in one note (loads in green, pointing
 * at the step that needs them; write-backs and evictions in salmon); the
 * title holds the budget, the peak and the predicted time.  Values are not
 * drawn: a real model's data flow would bury the schedule. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/tensor.h"
#include "exec/plan.h"
#include "exec/speed.h"

#define MAX_LISTED 6 /* actions named per note; the rest are counted */

static void esc(FILE *f, const char *s)
{
	for (; *s; s++)
		fprintf(f, *s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
}

static const char *size_str(const struct hp_graph *g, int v, char *buf, size_t len)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return hp_format_size(hp_tensor_bytes(&t), buf, len);
}

static void title(FILE *f, const struct hp_graph *g, const struct hp_plan *p, const struct hp_plan_opts *po)
{
	char b[32], k[32], l[32], w[32];

	fprintf(f, "  labelloc=t;\n  label=\"");
	esc(f, g->path ? g->path : "model");
	fprintf(f, ": %d steps, budget %s, planned peak %s\\nloads %s, write-backs %s; predicted %.2f ms "
		   "(compute %.2f ms, I/O %.2f ms)\";\n",
		p->nsteps, po->budget ? hp_format_size(po->budget, b, sizeof b) : "unlimited",
		hp_format_size(p->peak_bytes, k, sizeof k), hp_format_size(p->bytes_loaded, l, sizeof l),
		hp_format_size(p->bytes_written, w, sizeof w), p->predicted_ms, p->compute_ms, p->io_ms);
}

/* The note of the actions issued before step s (none: nothing drawn). */
static void actions(FILE *f, const struct hp_graph *g, const struct hp_plan *p, int s)
{
	static const char *what[] = { "", "load", "evict", "write-back", "free" };
	int n = 0, loads = 0, listed = 0;
	char b[32];

	for (int a = p->act_begin[s]; a < p->act_begin[s + 1]; a++)
		if (p->acts[a].act != HP_ACT_FREE)
			n++, loads += p->acts[a].act == HP_ACT_LOAD;
	if (!n)
		return;
	fprintf(f, "  io%d [shape=note,style=filled,fillcolor=%s,label=\"", s, loads == n ? "palegreen" : "lightsalmon");
	for (int a = p->act_begin[s]; a < p->act_begin[s + 1]; a++) {
		const struct hp_plan_act_rec *x = &p->acts[a];
		if (x->act == HP_ACT_FREE)
			continue;
		if (listed++ == MAX_LISTED) {
			fprintf(f, "... %d more\\l", n - MAX_LISTED);
			break;
		}
		fprintf(f, "%s ", what[x->act]);
		esc(f, g->values[x->value].name);
		fprintf(f, " (%s)", size_str(g, x->value, b, sizeof b));
		if (x->act == HP_ACT_LOAD)
			fprintf(f, " for %d", x->for_step);
		fprintf(f, "\\l");
	}
	fprintf(f, "\"];\n  io%d -> k%d [style=dashed,arrowhead=none];\n  { rank=same; io%d; k%d; }\n", s, s, s, s);
	for (int a = p->act_begin[s]; a < p->act_begin[s + 1]; a++)
		if (p->acts[a].act == HP_ACT_LOAD && p->acts[a].for_step != s) {
			fprintf(f, "  io%d -> k%d [color=darkgreen,constraint=false];\n", s, p->acts[a].for_step);
			break; /* one arrow per note keeps the picture readable */
		}
}

static void steps(FILE *f, const struct hp_graph *g, const struct hp_plan *p, const struct hp_plan_opts *po)
{
	for (int s = 0; s < p->nsteps; s++) {
		const struct hp_node *n = &g->nodes[p->node[s]];
		enum hp_kclass cls = HP_KC_MEM;
		double ms = po->speed ? hp_speed_kernel_ms(po->speed, g, n, &cls) : 0;
		fprintf(f, "  k%d [shape=box,style=filled,fillcolor=%s,label=\"%d: ", s,
			cls == HP_KC_GEMM ? "lightblue" : "white", s);
		esc(f, n->op_type);
		fprintf(f, "  %.2f ms\\n", ms);
		esc(f, n->name);
		fprintf(f, "\"];\n");
		if (s)
			fprintf(f, "  k%d -> k%d [weight=10];\n", s - 1, s);
		actions(f, g, p, s);
	}
}

int hp_plan_dot(const struct hp_graph *g, const struct hp_plan *p, const struct hp_plan_opts *po, const char *path)
{
	FILE *f = fopen(path, "w");
	int rc = 0;

	if (!f)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	fprintf(f, "digraph plan {\n  rankdir=TB;\n  node [fontsize=10,fontname=\"Helvetica\"];\n");
	title(f, g, p, po);
	steps(f, g, p, po);
	fprintf(f, "}\n");
	if (ferror(f))
		rc = hp_error(-EIO, "%s: write failed", path);
	if (fclose(f) != 0 && rc == 0)
		rc = hp_error(-errno, "%s: write failed: %s", path, strerror(errno));
	return rc;
}
