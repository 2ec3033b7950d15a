/* The normalization table's rule type and the rules that live in their own
 * files (normalize_legacy.c: rewrites that add helper nodes; half.c). */
#ifndef HPDLF_ONNX_NORMALIZE_H
#define HPDLF_ONNX_NORMALIZE_H

#include "onnx/import.h"

/* The ai.onnx opsets the importer reads (every version change between them
 * is normalized, normalize.c). */
#define IMP_OPSET_MIN 1
#define IMP_OPSET_MAX 21

struct imp_rule {
	const char *op;   /* operator type; "*": every operator; NULL ends the table */
	int lo, hi;       /* opsets it applies to */
	int (*fn)(struct imp *im, struct imp_node *n, const struct imp_rule *r);
	const char *attr; /* the attribute it reads */
	int arg;          /* an input slot or an integer default */
	const char *to;   /* a new name */
	float f;          /* a float default */
};

int imp_legacy_broadcast(struct imp *im, struct imp_node *n, const struct imp_rule *r);
int imp_legacy_slope(struct imp *im, struct imp_node *n, const struct imp_rule *r);
int imp_split_num_outputs(struct imp *im, struct imp_node *n, const struct imp_rule *r);
int imp_tile_v1(struct imp *im, struct imp_node *n, const struct imp_rule *r);
int imp_groupnorm_per_group(struct imp *im, struct imp_node *n, const struct imp_rule *r);
int imp_cast_half(struct imp *im, struct imp_node *n, const struct imp_rule *r);
int imp_const_of_shape_half(struct imp *im, struct imp_node *n, const struct imp_rule *r);

#endif
