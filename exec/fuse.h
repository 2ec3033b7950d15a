/* Inference graph optimisation (exec/fuse.c): BatchNormalization folded
 * into the Conv before it.  Call after hp_graph_infer and before
 * hp_session_create, for inference only. */
#ifndef HPDLF_EXEC_FUSE_H
#define HPDLF_EXEC_FUSE_H

#include "hpdlf/graph.h"

struct hp_fuse_report {
	int nfused;   /* fusions made */
	char **lines; /* one line per fusion ("BatchNormalization 'bn' into Conv 'conv'") */
};

/* Rewrites g in place and infers it again; fills r (free with
 * hp_fuse_report_free).  0 or a negative error. */
int hp_fuse_inference(struct hp_graph *g, struct hp_fuse_report *r);
void hp_fuse_report_free(struct hp_fuse_report *r);

#endif
