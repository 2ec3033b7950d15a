/* Inference graph optimisation (exec/fuse*.c), after import and before
 * planning, for inference (training runs only hp_fuse_training, below):
 *   - BatchNormalization folded into the Conv or Gemm before it;
 *   - GELU as exporters write it (Div/Erf/Add/Mul/Mul, the tanh form) into
 *     one FusedGelu; LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/
 *     Div/Mul/Add into LayerNormalization;
 *   - attention (MatMul [Mul|Div scale] [Add mask|Where] Softmax MatMul),
 *     with the Transposes feeding it, into one FusedAttention;
 *   - Conv kernels cut to the taps that read input for some output
 *     (dilated ASPP convs on small maps become 1x1; fuse_dil.c);
 *   - MatMul of a transposed matrix into Gemm with transA/transB;
 *   - unless opts->splittable: Conv/MatMul/Gemm + Add + Relu/Clip/Sigmoid/
 *     HardSwish/Gelu into the product's epilogue (bitwise the unfused
 *     nodes; an out-of-core run fuses them once split, hp_fuse_after_split).
 *   - unless opts->splittable, after the epilogues: MobileNetV2's inverted
 *     residual blocks (1x1 + Clip, depthwise 3x3 + Clip, 1x1 [+ Add]) on
 *     planes of 14x14 and more into one FusedInvRes, run in bands of rows
 *     (bitwise the three nodes).
 *   - unless opts->splittable: an inference BatchNormalization (+ Relu)
 *     before a 1x1 Conv into the conv's prologue, applied as it packs X
 *     (DenseNet's layers; bitwise the unfused nodes).
 * Call after hp_graph_infer and before hp_session_create. */
#ifndef HPDLF_EXEC_FUSE_H
#define HPDLF_EXEC_FUSE_H

#include "hpdlf/graph.h"

struct hp_exec_opts;

struct hp_fuse_opts {
	int splittable; /* the run may split operators (a --budget): skip the fusions that only save
			 * time (epilogues: hp_fuse_after_split), keep those that change rounding, the
			 * same in both modes */
};

struct hp_fuse_report {
	int nfused;   /* fusions made */
	char **lines; /* one line per fusion ("BatchNormalization 'bn' into Conv 'conv'") */
	int npatterns;       /* distinct patterns fused */
	char **patterns;     /* their names ("Conv+Add+Relu") */
	int *counts;         /* how many times each */
	int nodes_removed;   /* nodes the fusions replaced, minus the nodes they added */
};

/* Rewrites g in place and infers it again; fills r (free with
 * hp_fuse_report_free).  opts NULL: every fusion.  0 or a negative error. */
int hp_fuse_inference(struct hp_graph *g, const struct hp_fuse_opts *opts, struct hp_fuse_report *r);
void hp_fuse_report_free(struct hp_fuse_report *r);

/* What hp_fuse_inference left out with opts->splittable, once the graph
 * is compiled for o->budget (hp_graph_compile: weights cut in blocks,
 * operators in bands): the epilogues (Conv/MatMul/Gemm + Add + activation)
 * of the nodes as they are now.  A band keeps its hpdlf_path in the fused
 * node, so it computes the whole fused node's bits, which are the unfused
 * nodes' (fuse_epi.c): outputs stay bitwise the in-core ones.  The fused
 * node holds the addend beside the product's inputs and output, so a match
 * is fused only where its step needs no more than the graph's largest step
 * already does, or than the split pass's target for the budget (three
 * quarters of it, beside the workers' reserved scratch): the graph still
 * fits the budget, and the smallest budget named (the graph compiled for
 * one byte, exec/split.c) is unchanged.  Not the inverted residuals nor
 * weight packing (in memory, beside the budget).  o->budget 0 (a tier, in
 * core): every epilogue.  Appends to r; 0 or a negative error. */
int hp_fuse_after_split(struct hp_graph *g, const struct hp_exec_opts *o, struct hp_fuse_report *r);

/* Training's rewrites, before autodiff, in core and under a budget
 * alike: GELU as exporters write it into FusedGelu, whose backward is one
 * UnaryGrad (kernels/eltwise_grad.c's vectorized gelu_grad) instead of
 * five element-wise nodes and their gradients, and LayerNorm as exporters
 * write it below opset 17 into LayerNormalization, whose backward is one
 * LayerNormGrad (kernels/norm_grad.c) instead of about twenty (GPT-2-style:
 * 4 GELUs of [256, 512], 9 LayerNorms of [256, 128]).  Both round
 * differently from the chains, as in inference.  Not for --pipeline
 * (exec/pipe_build.c): its stages lost the losses to NaN with the fused
 * transformer of tests/train/ref.  (GELU's fusion was taken out once: the
 * out-of-core budgets train-refs probes then met GemmGrad blocks that were
 * not bitwise the whole, fixed in kernels/gemm_grad.c, and the tanh form
 * with x^3 as two Muls overflowed fuse_gelu.c's match.)  Then each
 * MatMul(X, Transpose(W)) of a linear layer into Gemm(X rows, W, transB)
 * (fuse_train_linear.c).  0 or a negative error. */
int hp_fuse_training(struct hp_graph *g);

/* After autodiff (one rank, no --pipeline, not asynchronous): each Conv's
 * ConvGradFilter whose dW only its optimizer update reads, where the
 * filter gradient sums in pieces, into one ConvGradFilterUpdate with the
 * update: dW is never whole, W' and the state bitwise the two nodes'
 * (fuse_grad_update.c).  HPDLF_FUSE_GRAD_UPDATE=0 in the environment:
 * none.  The number fused, or a negative error. */
int hp_fuse_grad_update(struct hp_graph *g);

#endif
