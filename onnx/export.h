/* ONNX writing (internal): a copy of a model with some initializers
 * re-encoded from the caller's current values.
 *
 *   struct onnx_export x = { .g = g, .model = "m.onnx", .whole = whole,
 *                            .read = read_value, .arg = session };
 *   onnx_export_model("trained.onnx", &x);
 *
 * The caller says which values changed and gives their bytes; this file
 * knows only the wire format.  exec/train_export.c is the caller for
 * training (the trained weights and running statistics of a session).
 */
#ifndef HPDLF_ONNX_EXPORT_H
#define HPDLF_ONNX_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "hpdlf/graph.h"

/* Bytes [at, at + len) of value v's current contents into dst: 0 or a
 * negative error (with its message set). */
typedef int (*onnx_read_fn)(void *arg, int v, uint64_t at, size_t len, void *dst);

struct onnx_export {
	const struct hp_graph *g;   /* g->files[0] is the model copied */
	const char *model;          /* the model's name in errors */
	/* Per value of g: nonzero if read() gives its bytes whole (a
	 * partitioned weight: the whole, not its blocks).  Of these, the
	 * initializers with stored bytes are re-encoded; those the model does
	 * not hold and that change from run to run (value.next) are appended. */
	const char *whole;
	onnx_read_fn read;
	void *arg;
	int external;               /* weights in PATH.data (forced above 1 GiB) */
};

/* Write the model to path (and PATH.data), each under a temporary name
 * renamed when complete.  Errors name path ("--export-onnx PATH: ..."). */
int onnx_export_model(const char *path, const struct onnx_export *x);

#endif
