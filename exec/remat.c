/* Recompute or swap: the chain of a training graph's forward, the DP's
 * choice written into a copy of the graph as recomputation nodes, kept
 * when the planner predicts a faster step (see remat.h). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/kernels.h"
#include "hpdlf/store.h"
#include "common/name.h"
#include "exec/comm.h"
#include "exec/plan.h"
#include "exec/remat.h"
#include "exec/speed.h"
#include "exec/split.h"
#include "graph/sort.h"

/* Recomputations run when nothing else is ready (graph.h's sched): just
 * before the backward needs them; among them, copies of later forward
 * nodes first (the backward needs them first). */
#define LATE HP_REMAT_SCHED

struct ctx {
	struct hp_graph *g;
	struct hp_plan_opts po;
	char *fwd, *pers, *need;
	int *item_node, nitems;        /* forward nodes in schedule order */
	struct hp_remat_item *items;
	uint64_t room; /* the tiers' capacity (0: not bounded) */
	struct hp_plan *best_plan; /* *best's Belady plan (try_choice), handed on as plan_room's belady */
};

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static uint64_t vsize(const struct hp_graph *g, int v)
{
	struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };

	return (hp_tensor_bytes(&t) + HP_BUDGET_ALIGN - 1) / HP_BUDGET_ALIGN * HP_BUDGET_ALIGN;
}

/* A node run again gives bitwise its first outputs: deterministic (no
 * random op), nothing of it outlives the run, no communication. */
static int can_recompute(const struct ctx *c, const struct hp_node *n)
{
	if (!n->op || !n->op->prepare || (n->op->flags & HP_OP_NO_FOLD) || n->folded || hp_comm_is_allreduce(n))
		return 0;
	for (int o = 0; o < n->noutputs; o++)
		if (n->outputs[o] >= 0 && c->pers[n->outputs[o]])
			return 0;
	return 1;
}

/* What swapping value v costs: written once, read back once. */
static double swap_ms(const struct ctx *c, uint64_t b)
{
	double rd = c->po.read_MBps > 0 ? c->po.read_MBps : 1000, wr = c->po.write_MBps > 0 ? c->po.write_MBps : 1000;

	return (double)b / 1e6 * (1e3 / rd + 1e3 / wr) + (c->po.read_lat_us + c->po.write_lat_us) / 1e3;
}

static double kernel_ms(const struct ctx *c, const struct hp_node *n)
{
	enum hp_kclass cls;

	if (c->po.speed)
		return hp_speed_kernel_ms(c->po.speed, c->g, n, &cls) + c->po.speed->dispatch_us / 1e3;
	return (n->op->flops ? n->op->flops(c->g, n) : 0) / (c->po.gflops > 0 ? c->po.gflops : 50) / 1e6;
}

static int build_items(struct ctx *c)
{
	const struct hp_graph *g = c->g;

	c->item_node = malloc(((size_t)g->nnodes + 1) * sizeof *c->item_node);
	c->items = calloc((size_t)g->nnodes + 1, sizeof *c->items);
	if (!c->item_node || !c->items)
		return hp_error(-ENOMEM, "out of memory planning recomputation");
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		struct hp_remat_item *x = &c->items[c->nitems];
		if (!c->fwd[i] || n->folded)
			continue;
		for (int o = 0; o < n->noutputs; o++)
			if (n->outputs[o] >= 0 && c->need[n->outputs[o]])
				x->bytes += vsize(g, n->outputs[o]);
		x->recompute_ms = kernel_ms(c, n);
		x->swap_ms = swap_ms(c, x->bytes);
		x->can = can_recompute(c, n);
		c->item_node[c->nitems++] = i;
	}
	return 0;
}

/* rec[node]: the DP's choice, closed over the forward-only values a
 * recomputed node reads (they are recomputed too). */
static void closure(const struct ctx *c, char *rec)
{
	const struct hp_graph *g = c->g;

	for (int i = g->nnodes - 1; i >= 0; i--) {
		const struct hp_node *n = &g->nodes[i];
		if (!rec[i])
			continue;
		for (int j = 0; j < n->ninputs; j++) {
			int v = n->inputs[j], p = v >= 0 ? g->values[v].producer : -1;
			if (p >= 0 && c->fwd[p] && !rec[p] && !c->pers[v] && !c->need[v] && can_recompute(c, &g->nodes[p]))
				rec[p] = 1;
		}
	}
}

/* The hint of the copy of forward node i (hint s): with its band's
 * backward (remat.h), else after every band, copies of later forward
 * nodes first. */
static int copy_hint(int s, int i)
{
	int late = LATE - HP_REMAT_LATE_MIN;

	return s > 0 && s < HP_BAND_MAX ? HP_BAND_REMAT_SCHED(s) : LATE - (i < late ? i : late);
}

static int add_copy(struct hp_graph *g, int i, int *map)
{
	char name[1024];
	struct hp_name b;
	int nin = g->nodes[i].ninputs, nout = g->nodes[i].noutputs, node, rc = 0;
	int *in = malloc((size_t)(nin + nout + 1) * sizeof *in), *out = in + nin;

	if (!in)
		return hp_error(-ENOMEM, "out of memory");
	for (int o = 0; o < nout && rc >= 0; o++) {
		int v = g->nodes[i].outputs[o];
		hp_name_init(&b, name, sizeof name); /* "%s%s" */
		hp_name_str(&b, v >= 0 ? g->values[v].name : "");
		hp_name_str(&b, HP_REMAT_SUFFIX);
		out[o] = v < 0 ? -1 : (rc = hp_graph_add_value(g, name, HP_VALUE_ACTIVATION, g->values[v].dtype,
							      &g->values[v].shape));
		if (v >= 0)
			map[v] = out[o];
	}
	for (int j = 0; j < nin; j++) {
		int v = g->nodes[i].inputs[j];
		in[j] = v >= 0 && map[v] >= 0 ? map[v] : v;
	}
	hp_name_init(&b, name, sizeof name); /* "%s%s" */
	hp_name_str(&b, g->nodes[i].name);
	hp_name_str(&b, HP_REMAT_SUFFIX);
	node = rc < 0 ? rc : hp_graph_add_node(g, name, g->nodes[i].op_type, nin, in, nout, out);
	free(in);
	if (node < 0)
		return node;
	free(g->nodes[node].domain);
	if (!(g->nodes[node].domain = strdup(g->nodes[i].domain)))
		return hp_error(-ENOMEM, "out of memory");
	g->nodes[node].op = g->nodes[i].op;
	g->nodes[node].sched = copy_hint(g->nodes[i].sched, i);
	for (int a = 0; a < g->nodes[i].nattrs; a++)
		if ((rc = hp_graph_add_attr(g, node, &g->nodes[i].attrs[a])) < 0)
			return rc;
	return 0;
}

/* Copies of the nodes rec marks (forward order), read by every node that
 * is not forward instead of the originals; then sorted and prepared. */
static int rewrite(struct hp_graph *g, const char *fwd, const char *rec)
{
	int n0 = g->nnodes, nv0 = g->nvalues, rc = 0;
	int *map = malloc(((size_t)nv0 + 1) * sizeof *map);

	if (!map)
		return hp_error(-ENOMEM, "out of memory");
	for (int v = 0; v < nv0; v++)
		map[v] = -1;
	for (int i = 0; i < n0 && rc == 0; i++)
		if (rec[i])
			rc = add_copy(g, i, map);
	for (int i = 0; i < n0 && rc == 0; i++)
		for (int j = 0; !fwd[i] && j < g->nodes[i].ninputs; j++) {
			int v = g->nodes[i].inputs[j];
			if (v >= 0 && v < nv0 && map[v] >= 0)
				g->nodes[i].inputs[j] = map[v];
		}
	free(map);
	if (rc == 0)
		rc = hp_graph_finalize(g);
	return rc < 0 ? rc : hp_graph_infer(g);
}

/* Plan p of g holds no more below DRAM at once than the tiers' room. */
static int fits_room(const struct ctx *c, const struct hp_graph *g, const struct hp_plan *p)
{
	uint64_t state, swapped, peak;

	return !c->room || (hp_plan_footprint_of(g, p, &state, &swapped, &peak) == 0 && peak <= c->room);
}

/* The predicted step of g with rec's recomputations (a copy), kept in
 * *best when faster than *best_ms and within the tiers' room. */
static int try_choice(struct ctx *c, const char *rec, double *best_ms, struct hp_graph **best)
{
	struct hp_graph *cp = NULL;
	struct hp_plan *p = NULL;
	int rc = hp_split_graph_copy(c->g, &cp);

	if (rc == 0)
		rc = rewrite(cp, c->fwd, rec);
	if (rc == 0)
		rc = hp_plan_build(cp, &c->po, &p);
	if (rc == 0 && p->predicted_ms < *best_ms && fits_room(c, cp, p)) {
		*best_ms = p->predicted_ms;
		hp_graph_free(*best);
		*best = cp;
		cp = NULL;
		hp_plan_free(c->best_plan);
		c->best_plan = p;
		p = NULL;
	}
	hp_plan_free(p);
	hp_graph_free(cp);
	return rc == HP_EBUDGET || rc == HP_EBUDGET_OP ? 0 : rc;
}

/* Memory the stash may take: the tensor budget less twice the largest
 * step (its inputs, outputs and the state it updates beside it). */
static uint64_t stash_mem(const struct hp_plan_opts *po, const struct hp_plan *p0)
{
	uint64_t b = po->budget;

	return b > 3 * p0->min_budget ? b - 2 * p0->min_budget : b / 3;
}

static void count(const struct hp_graph *g, struct hp_remat_stats *st)
{
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *n = &g->nodes[i];
		if (!hp_remat_is_copy(n))
			continue;
		st->nodes++;
		for (int o = 0; o < n->noutputs; o++)
			if (n->outputs[o] >= 0)
				st->bytes += vsize(g, n->outputs[o]);
		st->flops += n->op->flops ? n->op->flops(g, n) : 0;
	}
}

/* The DP at a few weights of swap time against recompute time (swaps
 * overlap compute, recomputations do not: how much of a swap shows
 * depends on the step), each choice planned; the fastest is kept. */
#define ROOM_TRIES 20
static int choose(struct ctx *c, uint64_t mem, double *best_ms, struct hp_graph **best)
{
	/* while the plan without recomputation holds more below DRAM than the
	 * tiers' room (best_ms infinite then), swaps weighed 2, 4, ... 2^20
	 * times after these: choices that recompute more, until one fits */
	static const double lambda[] = { 1, 0.5, 0.25 };
	const size_t nw = sizeof lambda / sizeof *lambda, nl = nw + (isinf(*best_ms) ? ROOM_TRIES : 0);
	char *choice = malloc((size_t)c->nitems + 1), *rec = malloc((size_t)c->g->nnodes + 1);
	char *prev = calloc((size_t)c->g->nnodes + 1, 1);
	int rc = choice && rec && prev ? 0 : hp_error(-ENOMEM, "out of memory planning recomputation");

	for (size_t l = 0; rc == 0 && l < nl; l++) {
		double cost, w = l < nw ? lambda[l] : (double)(2ull << (l - nw));
		int any = 0;
		if (l >= nw && *best)
			break; /* one fits the room */
		if (hp_remat_chain(c->items, c->nitems, mem, 32, w, choice, &cost) < 0)
			break; /* nothing fits the model: the planner swaps */
		memset(rec, 0, (size_t)c->g->nnodes);
		for (int k = 0; k < c->nitems; k++)
			if (choice[k] == HP_REMAT_RECOMPUTE)
				rec[c->item_node[k]] = 1, any = 1;
		closure(c, rec);
		if (!any || !memcmp(rec, prev, (size_t)c->g->nnodes))
			continue;
		memcpy(prev, rec, (size_t)c->g->nnodes);
		rc = try_choice(c, rec, best_ms, best);
	}
	free(choice);
	free(rec);
	free(prev);
	return rc;
}

/* g's sort hints with its optimizer updates hinted eager (eager_updates)
 * into *sched (g->nnodes entries, the caller frees it); *any: some are. */
static int eager_hints(const struct hp_graph *g, int **sched, int *any)
{
	int *s = *sched = malloc(((size_t)g->nnodes + 1) * sizeof *s);

	if (!s)
		return hp_error(-ENOMEM, "out of memory planning recomputation");
	for (int i = 0; i < g->nnodes; i++)
		s[i] = g->nodes[i].sched;
	for (int v = 0; v < g->nvalues; v++) {
		int b = g->values[v].next, u = b >= 0 ? g->values[b].producer : -1;
		if (u >= 0 && s[u] == -1 && strcmp(g->nodes[u].op_type, "ConvGradFilterUpdate"))
			s[u] = HP_SCHED_EAGER, *any = 1;
	}
	return 0;
}

/* Whether g sorted with hints sched moves a node (1 where that cannot be
 * told without sorting a copy).  Where none moves, the eager graph is g
 * with other hints, which the planner does not read: its plan is *p0's,
 * not faster, never kept (the 10,001-node MLP's updates already run as
 * soon as their gradient is there; planning its copy was 6-10% of a
 * --plan under a budget). */
static int eager_moves(const struct hp_graph *g, const int *sched)
{
	int *order = malloc(((size_t)g->nnodes + 1) * sizeof *order), moves = 1;

	if (order && hp_graph_sort_order(g, sched, order) == 0) {
		moves = 0;
		for (int i = 0; i < g->nnodes && !moves; i++)
			moves = order[i] != i;
	}
	free(order);
	return moves;
}

/* The optimizer updates hinted to run as soon as their gradient is there
 * (graph.h's HP_SCHED_EAGER), not after the other readers of their
 * weight (a Conv's data gradient): the old weight and the new one are
 * then held together, but the new one goes below DRAM while the data
 * gradient runs.  Kept when that plan fits and is predicted faster than
 * *p0's, which it then replaces (ResNet-18 at 50%: the update in place
 * came last and its write-back stalled the next layer's loads).  Not a
 * filter gradient fused with its update (exec/fuse_grad_update.c): run
 * before the data gradient it holds W and W' together where the fusion
 * is there to hold W and a piece of dW (ResNet-18 at 25%: its stage-4
 * weights' new versions were then written back twice a step). */
static int eager_updates(struct ctx *c, struct hp_plan **p0)
{
	struct hp_graph *cp = NULL;
	struct hp_plan *p = NULL;
	int *sched = NULL, any = 0, rc = eager_hints(c->g, &sched, &any);

	if (rc == 0 && any && !eager_moves(c->g, sched))
		any = 0; /* the same plan as *p0's (no faster): not planned */
	if (rc == 0 && any)
		rc = hp_split_graph_copy(c->g, &cp);
	for (int i = 0; rc == 0 && any && i < cp->nnodes; i++)
		cp->nodes[i].sched = sched[i]; /* a copy of c->g's nodes in their order */
	free(sched);
	if (rc == 0 && any && (rc = hp_graph_finalize(cp)) == 0)
		rc = hp_graph_infer(cp);
	if (rc == 0 && any)
		rc = hp_plan_build(cp, &c->po, &p);
	if (rc == 0 && any && p->predicted_ms < (*p0)->predicted_ms) {
		hp_split_graph_adopt(c->g, cp);
		cp = NULL;
		hp_plan_free(*p0);
		*p0 = p;
		p = NULL;
	}
	hp_plan_free(p);
	hp_graph_free(cp);
	return rc == HP_EBUDGET || rc == HP_EBUDGET_OP ? 0 : rc;
}

static int analyse(struct ctx *c, int loss)
{
	const struct hp_graph *g = c->g;

	c->fwd = malloc((size_t)g->nnodes + 1);
	c->pers = malloc((size_t)g->nvalues + 1);
	c->need = malloc((size_t)g->nvalues + 1);
	if (!c->fwd || !c->pers || !c->need)
		return hp_error(-ENOMEM, "out of memory planning recomputation");
	int rc = hp_remat_forward(g, loss, c->fwd);
	if (rc < 0)
		return rc;
	hp_remat_persistent(g, c->pers);
	hp_remat_needed(g, c->fwd, c->pers, c->need);
	return build_items(c);
}

int hp_remat_plan(struct hp_graph *g, int loss, const struct hp_plan_opts *po, struct hp_remat_stats *st)
{
	return hp_remat_plan_room(g, loss, po, 0, st);
}

/* belady (may be NULL): the plan of g as left by Belady's policy alone
 * under po (victims aside), when the search has it (NULL: not). */
static int plan_room(struct hp_graph *g, int loss, const struct hp_plan_opts *po, uint64_t room,
		     struct hp_remat_stats *st, struct hp_plan **belady)
{
	struct hp_remat_stats dummy;
	struct ctx c = { .g = g, .po = *po, .room = room };
	struct hp_plan *p0 = NULL;
	struct hp_graph *best = NULL;
	double t0 = now_ms();
	int rc = 0;

	st = st ? st : &dummy;
	memset(st, 0, sizeof *st);
	c.po.victims = 0; /* candidates by Belady's plans alone (a plan per policy: 2.3x the CPU at 4) */
	if (!po->budget)
		goto out; /* in core */
	if ((rc = hp_plan_build(g, &c.po, &p0)) < 0) {
		st->refused = rc == HP_EBUDGET || rc == HP_EBUDGET_OP;
		rc = 0; /* the session reports it */
		goto out;
	}
	if ((rc = eager_updates(&c, &p0)) < 0 || (rc = analyse(&c, loss)) < 0)
		goto out;
	st->before_ms = st->after_ms = p0->predicted_ms;
	if (!fits_room(&c, g, p0))
		st->after_ms = HUGE_VAL; /* any choice within the room is better */
	rc = choose(&c, stash_mem(&c.po, p0), &st->after_ms, &best);
	if (rc == 0 && isinf(st->after_ms)) { /* none fits the room: the fastest, as without
					       * one (tier_room.c refuses the run) */
		c.room = 0;
		st->after_ms = st->before_ms;
		rc = choose(&c, stash_mem(&c.po, p0), &st->after_ms, &best);
	}
	if (rc == 0 && best) {
		hp_split_graph_adopt(g, best);
		count(g, st);
		if (belady) { /* it plans g as adopted: the summary need not plan it again */
			*belady = c.best_plan;
			c.best_plan = NULL;
		}
	}
	if (rc == 0 && !best && belady) { /* p0 plans g as it stays (the eager updates' when kept) */
		*belady = p0;
		p0 = NULL;
	}
out:
	st->plan_ms = now_ms() - t0;
	hp_plan_free(p0);
	hp_plan_free(c.best_plan);
	free(c.fwd);
	free(c.pers);
	free(c.need);
	free(c.item_node);
	free(c.items);
	return rc;
}

/* The local tiers' capacity when every tier names its size (0: not
 * bounded: a default spill file, an existing file's size, a remote tier). */
static uint64_t tiers_room(const struct hp_exec_opts *o)
{
	uint64_t room = 0;

	if (o->size < offsetof(struct hp_exec_opts, tiers) + sizeof o->tiers || !o->ntiers || !o->tiers)
		return 0;
	for (int i = 0; i < o->ntiers; i++) {
		const struct hs_tier_spec *t = &o->tiers[i];
		if (t->tier || t->kind == HS_TIER_REMOTE || !t->size)
			return 0;
		room += t->size;
	}
	return room;
}

int hp_remat_plan_room(struct hp_graph *g, int loss, const struct hp_plan_opts *po, uint64_t room,
		       struct hp_remat_stats *st)
{
	return plan_room(g, loss, po, room, st, NULL);
}

int hp_remat_ext(struct hp_graph *g, int loss, const struct hp_exec_opts *o, int measure, struct hp_remat_stats *st,
		 struct hp_plan **belady)
{
	struct hp_plan_opts po;
	void *model = NULL;
	int rc;

	if (st)
		memset(st, 0, sizeof *st);
	if (belady)
		*belady = NULL;
	if (!o->budget)
		return 0;
	rc = hp_plan_speed_opts(g, o, &po, &model, measure);
	if (rc == 0)
		rc = plan_room(g, loss, &po, tiers_room(o), st, belady);
	free(model);
	return rc;
}

int hp_remat(struct hp_graph *g, int loss, const struct hp_exec_opts *o, int measure, struct hp_remat_stats *st)
{
	return hp_remat_ext(g, loss, o, measure, st, NULL);
}
