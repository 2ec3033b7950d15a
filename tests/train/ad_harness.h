/* Test helpers of the autodiff tests (ad_harness.c): graphs built value by
 * value, run in node order by a small executor, gradients checked against
 * central differences of the loss. */
#ifndef HPDLF_TESTS_AD_HARNESS_H
#define HPDLF_TESTS_AD_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"

struct mini {
	struct hp_graph *g;
	void **buf;
};

struct hp_shape shp(int rank, ...);
int value(struct hp_graph *g, const char *name, enum hp_value_kind kind, enum hp_dtype dt, struct hp_shape s);
/* Float initializer filled from a fixed LCG, trainable. */
int param(struct hp_graph *g, const char *name, struct hp_shape s, unsigned seed, float lo, float hi);
int const_i64(struct hp_graph *g, const char *name, int n, const int64_t *vals);
int const_f32(struct hp_graph *g, const char *name, int n, const float *vals);
int act(struct hp_graph *g, const char *name);
int node(struct hp_graph *g, const char *op, int nin, const int *in, int out, int nattrs, const struct hp_attr *a);
void set_output(struct hp_graph *g, int v);
struct hp_attr str_attr(const char *name, const char *s);

void mini_init(struct mini *m, struct hp_graph *g);
void *mini_data(struct mini *m, int v);
void mini_run(struct mini *m);
void mini_carry(struct mini *m);
void mini_free(struct mini *m);
float loss_of(struct mini *m);
/* The update node of parameter p (input 0), or NULL. */
const struct hp_node *update_of(const struct hp_graph *g, int p);
/* Each trainable parameter's gradient against central differences. */
void check_gradients(struct mini *m, int nparams);
void fill_inputs(struct mini *m, const char *name, unsigned seed, float lo, float hi);

#endif
