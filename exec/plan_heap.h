/* A max-heap of eviction candidates for the planner (plan.c): entries
 * (nu, v), the largest nu first, equal nu the smallest v first, which is
 * the order Belady's choice ties in.  Entries are never updated in place:
 * the planner pushes a value again when its next use or state changes and
 * drops entries found stale at the top (lazy deletion).
 *
 *   struct hp_vheap h = { 0 };
 *   hp_vheap_push(&h, next_use, v);
 *   while (h.n && stale(h.e[0]))  hp_vheap_pop(&h);
 *   hp_vheap_free(&h);
 */
#ifndef HPDLF_EXEC_PLAN_HEAP_H
#define HPDLF_EXEC_PLAN_HEAP_H

struct hp_vent {
	int nu, v;
};

struct hp_vheap {
	struct hp_vent *e; /* e[0] the top */
	int n, cap;
};

/* 0, or -ENOMEM (the heap is as it was). */
int hp_vheap_push(struct hp_vheap *h, int nu, int v);
void hp_vheap_pop(struct hp_vheap *h);
void hp_vheap_free(struct hp_vheap *h);

#endif
