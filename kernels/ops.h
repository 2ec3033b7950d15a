/* Internal to kernels/: each operator family exports a NULL-terminated
 * table of its ops; registry.c gathers them. */
#ifndef HPDLF_KERNELS_OPS_H
#define HPDLF_KERNELS_OPS_H

#include "hpdlf/kernels.h"

extern const struct hp_op *const hp_ops_conv[];    /* conv.c: Conv, ConvTranspose */
extern const struct hp_op *const hp_ops_gemm[];    /* gemm.c: Gemm, MatMul */
extern const struct hp_op *const hp_ops_pool[];    /* pooling.c: MaxPool, AveragePool, Global* */
extern const struct hp_op *const hp_ops_eltwise[]; /* eltwise.c: unary, binary, Clip, Where, ... */
extern const struct hp_op *const hp_ops_norm[];    /* norm.c: BatchNormalization, LayerNormalization */
extern const struct hp_op *const hp_ops_softmax[]; /* softmax.c: Softmax, LogSoftmax */
extern const struct hp_op *const hp_ops_shape[];   /* shape_ops.c: Reshape, Concat, Gather, ... */
extern const struct hp_op *const hp_ops_reduce[];  /* reduce.c: ReduceMean, ReduceSum, ... */
extern const struct hp_op *const hp_ops_resize[];  /* resize.c: Resize */
extern const struct hp_op *const hp_ops_mask[];    /* mask.c: Trilu, NonZero */
extern const struct hp_op *const hp_ops_loss[];    /* loss.c: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss */
extern const struct hp_op *const hp_ops_index[];   /* index_ops.c: Scatter*, GatherND, OneHot, TopK, ... */
extern const struct hp_op *const hp_ops_rnn[];     /* rnn.c: RNN, GRU, LSTM */
extern const struct hp_op *const hp_ops_norm_extra[]; /* norm_extra.c: LRN, GroupNormalization, MVN */
extern const struct hp_op *const hp_ops_nms[];     /* nms.c: NonMaxSuppression (folds) */
extern const struct hp_op *const hp_ops_einsum[];  /* einsum.c: Einsum */
extern const struct hp_op *const hp_ops_misc[];    /* misc_ops.c: windows, CastLike, Det, BitShift */
extern const struct hp_op *const hp_ops_quant[];   /* quant.c: QuantizeLinear, QLinearMatMul, ConvInteger, ... */
extern const struct hp_op *const hp_ops_grid_sample[]; /* grid_sample.c: GridSample */
extern const struct hp_op *const hp_ops_unique[];  /* unique.c: Unique (folds) */
extern const struct hp_op *const hp_ops_spectral[]; /* spectral.c: DFT, STFT, MaxUnpool */
extern const struct hp_op *const hp_ops_tfidf[];   /* tfidf.c: TfIdfVectorizer (integer pools) */
extern const struct hp_op *const hp_ops_roi_align[]; /* roi_align.c: RoiAlign */
extern const struct hp_op *const hp_ops_fused[];   /* fused.c: FusedConv/MatMul/Gemm/Gelu/Attention (ai.hpdlf, inference) */
extern const struct hp_op *const hp_ops_train[];   /* train ops (ai.hpdlf): backward, losses, optimizers */

#endif
