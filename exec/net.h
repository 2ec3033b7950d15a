/* The task net (internal to exec/): a Petri net compiled from the plan.
 *
 * Places: resident(v) and on_tier(v) for every value the store manages,
 * and one budget place whose tokens are free DRAM bytes.  Transitions:
 * kernels (consume resident inputs and budget for outputs and workspace,
 * produce resident outputs), loads (on_tier -> resident, take budget),
 * write-backs and evictions (resident -> on_tier, give budget back), drops
 * (a value's last use passed: give its budget back) and, at the start of a
 * run, the reconciliation that brings residency to the plan's steady state.
 *
 * Arcs are computed once: a kernel waits for whatever last made each input
 * resident; a write-back, eviction or drop waits for that and for every
 * kernel that read the value since; a load waits for the value's previous
 * eviction.  The budget place hands out its tokens in plan order (a FIFO
 * place): because the planner checked that every prefix of that order fits
 * the budget, a transition granted its tokens never waits for a later one,
 * so the net cannot deadlock and resident bytes never exceed the budget,
 * whatever the order in which enabled transitions actually fire.
 *
 * Kernels fire on the compute workers (each with its own kernel thread
 * pool), loads and write-backs on the I/O threads, drops on whichever is
 * free first. */
#ifndef HPDLF_EXEC_NET_H
#define HPDLF_EXEC_NET_H

#include <stdint.h>

struct hp_session;
struct hp_net;

enum hp_tr_kind { HP_TR_KERNEL = 0, HP_TR_LOAD, HP_TR_WRITEBACK, HP_TR_EVICT, HP_TR_DROP };

struct hp_net_stats {
	uint64_t fired[5];      /* transitions fired, per kind (last run) */
	double stall_ms;        /* compute workers idle waiting for loads or budget (last run) */
	double busy_ms;         /* kernel time summed over workers (last run) */
	uint64_t bytes_loaded;  /* budget taken by loads that read (last run) */
};

/* Compile s->plan into a net and start its workers (compute workers beyond
 * the calling thread and I/O threads). */
int hp_net_create(struct hp_session *s, int workers, int io_threads, struct hp_net **out);
/* One run: fire transitions until all have fired; the calling thread is
 * compute worker 0.  The first failure stops granting; its message is
 * returned. */
int hp_net_run(struct hp_net *n);
/* A value became resident outside a run (an input written by the user). */
void hp_net_note_resident(struct hp_net *n, int v);
void hp_net_stats(const struct hp_net *n, struct hp_net_stats *out);
int hp_net_transitions(const struct hp_net *n);
void hp_net_destroy(struct hp_net *n);

#endif
