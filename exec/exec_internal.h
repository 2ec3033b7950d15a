/* Internal to exec/. */
#ifndef HPDLF_EXEC_INTERNAL_H
#define HPDLF_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "hpdlf/exec.h"
#include "hpdlf/kernels.h"
#include "exec/budget.h"

struct hs_store;
struct hp_trace;
struct hp_pool;

/* An executor: in core (session.c) or out of core (runtime.c).  The
 * session's public calls check their arguments and call these; each
 * executor keeps its own state in s->state. */
struct hp_executor {
	const char *name;
	int (*create)(struct hp_session *s);   /* sets s->state, even when failing */
	int (*set_input)(struct hp_session *s, int v, const void *data);
	int (*run)(struct hp_session *s);
	int (*get_output)(struct hp_session *s, int v, void *dst);
	/* bytes [offset, offset + len) of value v, checked, to (write 0) or from mem */
	int (*copy)(struct hp_session *s, int v, uint64_t offset, uint64_t len, void *mem, int write);
	/* peak tensor bytes, and (info not NULL) the last run's figures */
	void (*stats)(const struct hp_session *s, struct hp_run_info *info, uint64_t *peak);
	void (*destroy)(struct hp_session *s); /* accepts s->state NULL */
};

extern const struct hp_executor hp_exec_incore, hp_exec_ooc;

struct hp_session {
	struct hp_graph *g;
	struct hp_exec_opts opts;
	int threads;
	struct hp_budget_layout layout; /* of g under opts (hp_compile) */
	struct hp_pool *pool;        /* the kernels' threads */
	struct hp_trace *trace;      /* --trace, or NULL */
	double flops, last_ms;
	const struct hp_executor *ex;
	void *state;                 /* the executor's */
	struct hp_prof *prof;        /* opts.profile: kernel time per node, else NULL */
};

/* Kernel time per node (opts.profile); workers add concurrently. */
struct hp_prof {
	uint64_t *ns, *calls;        /* per node */
};
/* Add one call of node i that began at t0_ns (hp_prof_now_ns). NULL: nothing. */
void hp_prof_add(struct hp_prof *p, int i, uint64_t t0_ns);
uint64_t hp_prof_now_ns(const struct hp_prof *p);

/* hp_session_create writing its kernels' spans into trace (shared,
 * hp_trace_ref; NULL: o->trace_path as usual): a pipeline stage's three
 * sessions in one file on one clock (pipe_build.c). */
int hp_session_create_traced(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_trace *trace,
			     struct hp_session **out);

/* The tensor store of an out-of-core session, else NULL. */
struct hs_store *hp_session_store(const struct hp_session *s);
/* Out of core: fn(arg, room) is called during the next run (on a
 * compute lane, while kernels run), at the first step from which on the
 * plan leaves `bytes` of the budget free to the run's end (plan.h
 * room_from), with the bytes it leaves there; if it never does, or fn
 * returns 0 (it found no room in the store after all), after the last
 * step, with UINT64_MAX (the store's free room decides).
 * For reading the next batch ahead into that room: a read then taking
 * room a planned load needs would make that load wait for it.  One run
 * only; set it again for the next.  HP_EUNSUPPORTED in core. */
typedef int (*hp_ahead_fn)(void *arg, uint64_t room);
int hp_session_set_ahead(struct hp_session *s, uint64_t bytes, hp_ahead_fn fn, void *arg);

/* In core only (HP_EUNSUPPORTED out of core): graph input v reads data in
 * place from now on instead of a copy of its own; the caller keeps data
 * alive and unchanged while the session runs (a pipeline stage's graphs
 * share the optimizer's parameters this way, exec/pipe_build.c).  v may
 * also be a graph output its node computes into bytes of its own: the
 * node then writes data (the caller keeps it alive while the session
 * runs). */
int hp_session_bind_value(struct hp_session *s, int v, void *data);
/* In core only: the bytes of value v the session holds (a weight, state,
 * input or computed output), NULL out of core or if it holds none.  Valid
 * until the next run or bind. */
const void *hp_session_value_ptr(const struct hp_session *s, int v);

/* The state node n's op prepared, freed (op->release, else free(priv));
 * priv NULL.  For a node prepared again or dropped. */
void hp_node_release(struct hp_node *n);

/* One value to place in the arena: alive over steps [start, end]. */
struct hp_arena_item {
	uint64_t size;
	int start, end;
	uint64_t offset;       /* out */
};
/* Offsets such that items alive at the same step never overlap; *total is
 * the arena size.  Sizes are rounded up to `align`. */
int hp_arena_place(struct hp_arena_item *items, int n, uint64_t align, uint64_t *total);

#endif
