/* Convolution libraries per operator class (issue 16, item 2): hpdlf's own
 * kernels (im2col/shift/direct over OpenBLAS) against oneDNN's convolution
 * primitives, and the sgemm calls of hpdlf's im2col path under OpenBLAS,
 * BLIS and libxsmm, forward, data gradient and weight gradient.
 *
 *   hpdlf-bench-conv-libs [--reps N] [--class NAME[,NAME...]] [--shift 0|1|-1] [--dot 0|1|-1] [--dwc 0|1|-1] [--dwk 0|-1] [--dwp 0|-1]
 *                         [--dwf 0|1|-1] [--dws 0|1|-1]
 *                         [--kxk 0|1|-1] [--grp 0|1|-1] [--kxk-run 0|1] [--phase 0|1] [--pw 0|1|-1]
 *                         [--stem 0|1|-1] [--pwt 0|1|2|-1] [--grp-cf 0|1|-1] [--grp-packed] [--grp-skip 0|-1] [--dw-packed] [--fwd]
 *
 * --shift, --dot, --kxk and --grp force hpdlf's shift, dot, KxK and grouped
 * (conv_grp.c) paths (1), forbid them (-1)
 * (--dwc the same for the channel-blocked depthwise 3x3 kernel, conv_dwc.c,
 * --dwf for the flat-plane stride-1 depthwise 3x3 kernel, conv_dwf.c;
 * --dwk -1 runs 5x5, 7x7 and dilated 3x3 depthwise windows on conv_dw.c's
 * generic rows instead of conv_dwk.c's channel blocks, and their dW on
 * conv_dw.c's generic loops instead of conv_dwk_grad.c's; --dw-packed
 * runs depthwise forwards from W laid out once, as inference in core does;
 * --grp-packed runs the forwards conv_grp.c's co-lane tiles take from W^T
 * packed once the same way, --grp-skip -1 without skipping the padding's
 * products in its 3x3 tiles)
 * or leave the choice to the planner (0, the default); --kxk-run 0 makes
 * the KxK path pack every block (conv_kxk_run.c's row-run blocks off);
 * --phase 1 runs a strided dX by phases (conv_grad_phase.c; off by
 * default); --fwd times the forward pass only.  The ct-* classes time ConvTranspose
 * (kernel == stride) forward, hpdlf's FMA path (convt_fma.c) in the hpdlf
 * column and its column path (an OpenBLAS sgemm and a scatter) in the
 * OpenBLAS column.  The aspp-* classes time DeepLabV3's dilated 3x3
 * convolutions (pad = dilation) forward: hpdlf's kernel for the node as
 * imported ("full"), for the node after the inference graph optimisation,
 * which cuts the taps that read only padding (exec/fuse_dil.c; the kernel
 * it leaves is named), and oneDNN's dilated convolution; their GFLOP/s
 * count the live taps only.
 * Every figure is GFLOP/s per CPU-second of one thread (the thread's CPU
 * clock, medians of --reps runs after a warm-up), so the comparison holds
 * on a machine shared with other jobs; oneDNN runs with one OpenMP thread
 * (the program re-executes itself with OMP_NUM_THREADS=1), once on the
 * NCHW / OIHW tensors hpdlf holds and once ("dnnl-blk") in the blocked
 * layouts it prefers, reorders not counted; "impl" says which kernels
 * oneDNN picked.  The gemm columns time one sgemm of the im2col path's
 * shape (M = output channels per group, N = output positions of a tile,
 * K = input channels per group x kernel volume) per library.  Libraries
 * missing at build time (meson options dnnl, blis, xsmm) print "-".
 * cblas_sgemm 2048^3 on one thread is timed first, in the same run, and
 * "%sgemm" is hpdlf's figure as a share of it (issue 16: conv layers at
 * 75% of sgemm peak and more).  "floor" is the pass's FLOP over the time
 * one thread takes to read its two operands once and write its result
 * once (AVX-512 loads and stores, repeated as the class's calls are, so
 * from wherever they leave the data): no kernel of that pass can beat it,
 * so a class whose floor is under 75% of the peak cannot meet the target
 * on this machine, and one whose floor is far above it is held back by
 * its kernel, not by memory.  Ends with one JSON line, which carries the
 * peak and, over the dense classes (not depthwise, not the stems' dX;
 * ConvTranspose and ASPP rows aside), per pass: the rows at 75% and more,
 * and the FLOP-weighted share (the classes' FLOP over the time hpdlf
 * takes for all of them, as a share of the peak). */
#include <cblas.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "hpdlf/kernels.h"
#include "kernels/blas.h"
#include "kernels/conv_grad_phase.h"
#include "kernels/conv_grad_stem.h"
#include "kernels/conv_impl.h"
#include "kernels/cpu.h"
#include "exec/fuse.h"

#ifdef HPDLF_HAVE_DNNL
#include <dnnl.h>
#endif

struct cls {
	const char *name, *why;
	int64_t n, c, m, h, w, k, s, p, g;
};

static const struct cls classes[] = {
	{ "3x3-small", "ResNet stage 4 at 224", 1, 256, 256, 7, 7, 3, 1, 1, 1 },
	{ "3x3-tiny", "ResNet-18 64x64 stage 4, batch 4", 4, 512, 512, 2, 2, 3, 1, 1, 1 },
	{ "3x3-s2", "ResNet-18 64x64 downsampling, batch 4", 4, 64, 128, 16, 16, 3, 2, 1, 1 },
	{ "1x1", "MobileNetV2 projection", 1, 96, 24, 28, 28, 1, 1, 0, 1 },
	{ "1x1-s2", "ResNet shortcut, batch 4", 4, 64, 128, 16, 16, 1, 2, 0, 1 },
	{ "dw3x3", "MobileNetV2 depthwise 56x56", 1, 144, 144, 56, 56, 3, 1, 1, 144 },
	{ "dw3x3-s2", "MobileNetV2 depthwise stride 2", 1, 96, 96, 112, 112, 3, 2, 1, 96 },
	{ "dw3x3-7", "MobileNetV2 depthwise 7x7", 1, 960, 960, 7, 7, 3, 1, 1, 960 },
	{ "dw3x3-14", "MobileNetV2 depthwise 14x14", 1, 576, 576, 14, 14, 3, 1, 1, 576 },
	{ "dw3x3-s2-56", "MobileNetV2 depthwise stride 2, 56 -> 28", 1, 144, 144, 56, 56, 3, 2, 1, 144 },
	{ "dw3x3-s2-14", "MobileNetV2 depthwise stride 2, 14 -> 7", 1, 576, 576, 14, 14, 3, 2, 1, 576 },
	{ "dw5x5", "MnasNet depthwise 5x5 8x8, batch 2", 2, 72, 72, 8, 8, 5, 1, 2, 72 },
	{ "dw5x5-3", "EfficientNet-B0 depthwise 5x5 3x3 (96x96 input)", 1, 1152, 1152, 3, 3, 5, 1, 2, 1152 },
	{ "dw5x5-6", "MobileNetV3-small depthwise 5x5 6x6, batch 2", 2, 240, 240, 6, 6, 5, 1, 2, 240 },
	{ "dw5x5-14", "EfficientNet-B0 depthwise 5x5 14x14 (224 input)", 1, 480, 480, 14, 14, 5, 1, 2, 480 },
	{ "dw5x5-s2", "EfficientNet-B0 depthwise 5x5 stride 2, 24 -> 12", 1, 144, 144, 24, 24, 5, 2, 2, 144 },
	{ "dw5x5-s2-12", "MobileNetV3-small depthwise 5x5 stride 2, 12 -> 6, batch 2", 2, 96, 96, 12, 12, 5, 2, 2, 96 },
	{ "dw5x5-s2-56", "EfficientNet-B0 depthwise 5x5 stride 2, 56 -> 28 (224 input)", 1, 144, 144, 56, 56, 5, 2, 2, 144 },
	{ "dw7x7", "ConvNeXt-T depthwise 7x7 14x14", 1, 384, 384, 14, 14, 7, 1, 3, 384 },
	{ "dw7x7-56", "ConvNeXt-T depthwise 7x7 56x56", 1, 96, 96, 56, 56, 7, 1, 3, 96 },
	{ "dw7x7-7", "ConvNeXt-T depthwise 7x7 7x7", 1, 768, 768, 7, 7, 7, 1, 3, 768 },
	/* batches of several: dW units of an item (batch 1: of a row) */
	{ "dw3x3-b4", "MobileNetV2 depthwise 56x56, batch 4", 4, 144, 144, 56, 56, 3, 1, 1, 144 },
	{ "dw3x3-s2-b4", "MobileNetV2 depthwise stride 2, 112 -> 56, batch 4", 4, 96, 96, 112, 112, 3, 2, 1, 96 },
	{ "dw5x5-s2-b4", "MnasNet-style depthwise 5x5 stride 2, 48 -> 24, batch 4", 4, 40, 40, 48, 48, 5, 2, 2, 40 },
	{ "grouped", "ResNeXt 32 groups", 1, 128, 128, 28, 28, 3, 1, 1, 32 },
	{ "grouped-b8", "ResNeXt 32 groups, batch 8 (training)", 8, 128, 128, 28, 28, 3, 1, 1, 32 },
	{ "grouped-s2", "ResNeXt 32 groups, stride 2", 1, 256, 256, 56, 56, 3, 2, 1, 32 },
	{ "grouped-s2-16", "ResNeXt stage 4 entry, 16 per group, stride 2", 1, 512, 512, 28, 28, 3, 2, 1, 32 },
	{ "grouped-s2-32", "ResNeXt stage 5 entry, 32 per group, stride 2", 1, 1024, 1024, 14, 14, 3, 2, 1, 32 },
	{ "grouped-w8", "RegNet groups of 8", 1, 64, 64, 28, 28, 3, 1, 1, 8 },
	{ "lenet-c1", "LeNet's first conv, batch 64", 64, 1, 6, 28, 28, 5, 1, 0, 1 },
	{ "grouped-16", "ResNeXt stage 3, 16 per group", 1, 512, 512, 14, 14, 3, 1, 1, 32 },
	{ "grouped-32", "ResNeXt stage 4, 32 per group", 1, 1024, 1024, 7, 7, 3, 1, 1, 32 },
	{ "grouped-t2", "ResNeXt-50 64x64 stage 4, 32 per group at 2x2", 1, 1024, 1024, 2, 2, 3, 1, 1, 32 },
	{ "grouped-t2s2", "ResNeXt-50 64x64 stage 4 entry, 32 per group, stride 2, 4x4 -> 2x2", 1, 1024, 1024, 4, 4, 3, 2, 1, 32 },
	{ "grouped-t4", "ResNeXt-50 64x64 stage 3, 16 per group at 4x4", 1, 512, 512, 4, 4, 3, 1, 1, 32 },
	{ "grouped-r6", "ResNeXt-50 96x96 stage 3, 16 per group at 6x6", 1, 512, 512, 6, 6, 3, 1, 1, 32 },
	{ "grouped-r3", "ResNeXt-50 96x96 stage 4, 32 per group at 3x3", 1, 1024, 1024, 3, 3, 3, 1, 1, 32 },
	{ "grouped-w8-12", "RegNetY-400MF 96x96 stage 2, groups of 8 at 12x12", 1, 104, 104, 12, 12, 3, 1, 1, 13 },
	{ "grouped-w8-6", "RegNetY-400MF 96x96 stage 3, groups of 8 at 6x6", 1, 208, 208, 6, 6, 3, 1, 1, 26 },
	{ "grouped-w8-3", "RegNetY-400MF 96x96 stage 4, groups of 8 at 3x3", 1, 440, 440, 3, 3, 3, 1, 1, 55 },
	{ "1x1-t2s2", "ResNeXt-50 64x64 stage 4 shortcut, stride 2, 4x4 -> 2x2", 1, 1024, 2048, 4, 4, 1, 2, 0, 1 },
	{ "1x1-t2r", "ResNeXt-50 64x64 stage 4 reduction at 2x2", 1, 2048, 1024, 2, 2, 1, 1, 0, 1 },
	{ "1x1-t4r", "ResNeXt-50 64x64 stage 3 reduction at 4x4", 1, 1024, 512, 4, 4, 1, 1, 0, 1 },
	{ "1x1-t4e", "ResNeXt-50 64x64 stage 3 expansion at 4x4", 1, 512, 1024, 4, 4, 1, 1, 0, 1 },
	{ "3x3-g5b", "GoogLeNet 64x64 inception5b 3x3 at 2x2", 1, 192, 384, 2, 2, 3, 1, 1, 1 },
	{ "3x3-g5b-b2", "GoogLeNet 64x64 inception5b 3x3 at 2x2, batch 2", 2, 192, 384, 2, 2, 3, 1, 1, 1 },
	{ "3x3-t3", "3x3 at 3x3, 256 channels", 1, 256, 256, 3, 3, 3, 1, 1, 1 },
	{ "3x3-g4e", "GoogLeNet 64x64 inception4e 3x3 at 4x4", 1, 160, 320, 4, 4, 3, 1, 1, 1 },
	{ "3x3-r4", "ResNet-18 64x64 stage 3, batch 4", 4, 256, 256, 4, 4, 3, 1, 1, 1 },
	{ "3x3-r8", "ResNet-18 64x64 stage 2, batch 4", 4, 128, 128, 8, 8, 3, 1, 1, 1 },
	{ "3x3-r16", "ResNet-18 64x64 stage 1, batch 4", 4, 64, 64, 16, 16, 3, 1, 1, 1 },
	{ "3x3-s2-r4", "ResNet-18 64x64 stage 4 entry, batch 4", 4, 256, 512, 4, 4, 3, 2, 1, 1 },
	{ "7x7-s2", "ResNet-18 64x64 stem, batch 4", 4, 3, 64, 64, 64, 7, 2, 3, 1 },
	{ "1x1-mb7", "MobileNetV2 expansion 7x7", 1, 160, 960, 7, 7, 1, 1, 0, 1 },
	{ "1x1-mb7p", "MobileNetV2 projection 7x7", 1, 960, 160, 7, 7, 1, 1, 0, 1 },
	{ "1x1-mb14", "MobileNetV2 expansion 14x14", 1, 64, 384, 14, 14, 1, 1, 0, 1 },
	{ "1x1-mb28", "MobileNetV2 expansion 28x28", 1, 32, 192, 28, 28, 1, 1, 0, 1 },
	{ "1x1-mb56", "MobileNetV2 expansion 56x56", 1, 24, 144, 56, 56, 1, 1, 0, 1 },
	{ "1x1-r50e7", "ResNet-50 bottleneck expansion 7x7, batch 4", 4, 512, 2048, 7, 7, 1, 1, 0, 1 },
	{ "1x1-r50r7", "ResNet-50 bottleneck reduction 7x7, batch 4", 4, 2048, 512, 7, 7, 1, 1, 0, 1 },
	{ "1x1-b2-8", "1x1 at 8x8, batch 2", 2, 64, 256, 8, 8, 1, 1, 0, 1 },
	{ "1x1-t2", "MNASNet's last 1x1 at 2x2, batch 2", 2, 320, 1280, 2, 2, 1, 1, 0, 1 },
	{ "1x1-t4", "MNASNet's last 1x1 at 4x4, batch 2", 2, 320, 1280, 4, 4, 1, 1, 0, 1 },
	{ "1x1-t3", "MobileNetV3-Small expansion at 3x3, batch 2", 2, 96, 576, 3, 3, 1, 1, 0, 1 },
	{ "1x1-t3p", "EfficientNet-B0 projection at 3x3", 1, 1152, 320, 3, 3, 1, 1, 0, 1 },
	{ "1x1-t6", "EfficientNet-B0 expansion at 6x6", 1, 112, 672, 6, 6, 1, 1, 0, 1 },
	{ "1x1-se", "EfficientNet-B0 squeeze-excitation 1x1, batch 2", 2, 48, 1152, 1, 1, 1, 1, 0, 1 },
	{ "3x3-s2-mb", "MobileNetV2 stem 224", 1, 3, 32, 224, 224, 3, 2, 1, 1 },
	{ "3x3-u128", "2-D U-Net level 1, batch 2", 2, 16, 16, 128, 128, 3, 1, 1, 1 },
	{ "3x3-u64", "2-D U-Net level 2, batch 2", 2, 32, 32, 64, 64, 3, 1, 1, 1 },
	{ "3x3-u32", "2-D U-Net level 3, batch 2", 2, 64, 64, 32, 32, 3, 1, 1, 1 },
	{ "3x3-s2-r8", "ResNet-18 64x64 stage 3 entry, batch 4", 4, 128, 256, 8, 8, 3, 2, 1, 1 },
	{ "3x3-s2-224", "ResNet-18 224x224 stage 2 entry, batch 2", 2, 64, 128, 56, 56, 3, 2, 1, 1 },
	{ "3x3-s2-224r4", "ResNet-18 224x224 stage 4 entry, batch 2", 2, 256, 512, 14, 14, 3, 2, 1, 1 },
	{ "1x1-s2-224", "ResNet shortcut at 224x224, batch 2", 2, 64, 128, 56, 56, 1, 2, 0, 1 },
	{ "sq-stem", "SqueezeNet 1.1 stem 96x96, stride 2", 1, 3, 64, 96, 96, 3, 2, 0, 1 },
	{ "sq-s23", "SqueezeNet 1.1 fire3 squeeze at 23x23", 1, 64, 16, 23, 23, 1, 1, 0, 1 },
	{ "sq-e1-23", "SqueezeNet 1.1 fire3 expand1x1 at 23x23", 1, 16, 64, 23, 23, 1, 1, 0, 1 },
	{ "sq-e3-23", "SqueezeNet 1.1 fire3 expand3x3 at 23x23", 1, 16, 64, 23, 23, 3, 1, 1, 1 },
	{ "sq-s11", "SqueezeNet 1.1 fire6 squeeze at 11x11", 1, 128, 32, 11, 11, 1, 1, 0, 1 },
	{ "sq-e1-11", "SqueezeNet 1.1 fire6 expand1x1 at 11x11", 1, 32, 128, 11, 11, 1, 1, 0, 1 },
	{ "sq-e3-11", "SqueezeNet 1.1 fire6 expand3x3 at 11x11", 1, 32, 128, 11, 11, 3, 1, 1, 1 },
	{ "sq-s5", "SqueezeNet 1.1 fire12 squeeze at 5x5", 1, 512, 64, 5, 5, 1, 1, 0, 1 },
	{ "sq-e1-5", "SqueezeNet 1.1 fire12 expand1x1 at 5x5", 1, 64, 256, 5, 5, 1, 1, 0, 1 },
	{ "sq-e3-5", "SqueezeNet 1.1 fire12 expand3x3 at 5x5", 1, 64, 256, 5, 5, 3, 1, 1, 1 },
	{ "sq-s23b", "SqueezeNet 1.1 fire4 squeeze at 23x23", 1, 128, 16, 23, 23, 1, 1, 0, 1 },
	{ "sq-s11b", "SqueezeNet 1.1 fire7 squeeze at 11x11", 1, 256, 32, 11, 11, 1, 1, 0, 1 },
	{ "g-3a-b1", "GoogLeNet 96x96 inception3a 1x1 at 12x12", 1, 192, 64, 12, 12, 1, 1, 0, 1 },
	{ "g-3a-b3", "GoogLeNet 96x96 inception3a reduce to 16 at 12x12", 1, 192, 16, 12, 12, 1, 1, 0, 1 },
	{ "g-3a-b4", "GoogLeNet 96x96 inception3a pool projection at 12x12", 1, 192, 32, 12, 12, 1, 1, 0, 1 },
	{ "g-3b-b1", "GoogLeNet 96x96 inception3b 1x1 at 12x12", 1, 256, 128, 12, 12, 1, 1, 0, 1 },
	{ "g-2", "GoogLeNet 96x96 conv2 1x1 at 24x24", 1, 64, 64, 24, 24, 1, 1, 0, 1 },
	{ "g-4a-b1", "GoogLeNet 96x96 inception4a 1x1 at 6x6", 1, 480, 192, 6, 6, 1, 1, 0, 1 },
	{ "g-4a-b2", "GoogLeNet 96x96 inception4a reduce 1x1 at 6x6", 1, 480, 96, 6, 6, 1, 1, 0, 1 },
	{ "g-4e-b1", "GoogLeNet 96x96 inception4e 1x1 at 6x6", 1, 528, 256, 6, 6, 1, 1, 0, 1 },
	{ "g-5b-b1", "GoogLeNet 96x96 inception5b 1x1 at 3x3", 1, 832, 384, 3, 3, 1, 1, 0, 1 },
	{ "g-4c-3", "GoogLeNet 96x96 inception4c 3x3 at 6x6", 1, 128, 256, 6, 6, 3, 1, 1, 1 },
	{ "g-5b-3", "GoogLeNet 96x96 inception5b 3x3 at 3x3", 1, 192, 384, 3, 3, 3, 1, 1, 1 },
	{ "g-3b-3", "GoogLeNet 96x96 inception3b 3x3 at 12x12", 1, 128, 192, 12, 12, 3, 1, 1, 1 },
	{ "g-2-3", "GoogLeNet 96x96 conv3 3x3 at 24x24", 1, 64, 192, 24, 24, 3, 1, 1, 1 },
	{ "dn-3-24", "DenseNet-121 96x96 block 1 3x3 (128 -> 32) at 24x24", 1, 128, 32, 24, 24, 3, 1, 1, 1 },
	{ "dn-3-12", "DenseNet-121 96x96 block 2 3x3 (128 -> 32) at 12x12", 1, 128, 32, 12, 12, 3, 1, 1, 1 },
	{ "dn-3-6", "DenseNet-121 96x96 block 3 3x3 (128 -> 32) at 6x6", 1, 128, 32, 6, 6, 3, 1, 1, 1 },
	{ "u-128", "2-D U-Net 128x128, batch 2", 2, 16, 16, 128, 128, 3, 1, 1, 1 },
	{ "u-128c3", "2-D U-Net stem, batch 2", 2, 3, 16, 128, 128, 3, 1, 1, 1 },
	{ "u-64", "2-D U-Net 64x64, batch 2", 2, 32, 32, 64, 64, 3, 1, 1, 1 },
	{ "u-32", "2-D U-Net 32x32, batch 2", 2, 64, 64, 32, 32, 3, 1, 1, 1 },
	{ "u-16", "2-D U-Net 16x16, batch 2", 2, 128, 128, 16, 16, 3, 1, 1, 1 },
	{ "u-dec32", "2-D U-Net decoder 32x32, batch 2", 2, 128, 64, 32, 32, 3, 1, 1, 1 },
	{ "u-dec128", "2-D U-Net decoder 128x128, batch 2", 2, 32, 16, 128, 128, 3, 1, 1, 1 },
};

enum pass { FWD, BWD_DATA, BWD_FILTER };
static const char *pass_name[] = { "fwd", "dX", "dW" };

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *filled(size_t n, unsigned seed)
{
	float *p = aligned_alloc(64, (n * 4 + 63) / 64 * 64);
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (float)(x >> 8) / (float)(1u << 24) - 0.5f;
	}
	return p;
}

/* Output size of an input size i along one axis, dilation d. */
static int64_t out_dim_d(const struct cls *c, int64_t i, int64_t d)
{
	return (i + 2 * c->p - (c->k - 1) * d - 1) / c->s + 1;
}

static int64_t out_dim(const struct cls *c, int64_t i)
{
	return out_dim_d(c, i, 1);
}

static double flops(const struct cls *c)
{
	return 2.0 * (double)(c->n * c->m * (c->c / c->g) * c->k * c->k * out_dim(c, c->h) * out_dim(c, c->w));
}

/* ---- hpdlf: a one-node graph run as the executor runs it ---------------- */

static void attr(struct hp_graph *g, int node, char *name, int n, int64_t *v)
{
	struct hp_attr a = { .name = name, .type = n ? HP_ATTR_INTS : HP_ATTR_INT, .n = n, .ints = v };

	if (!n)
		a.i = v[0];
	hp_graph_add_attr(g, node, &a);
}

static struct hp_graph *conv_graph(const struct cls *c, enum pass pass)
{
	struct hp_graph *g = hp_graph_new("bench");
	struct hp_shape xs = { 4, { c->n, c->c, c->h, c->w } };
	struct hp_shape ys = { 4, { c->n, c->m, out_dim(c, c->h), out_dim(c, c->w) } };
	struct hp_shape ws = { 4, { c->m, c->c / c->g, c->k, c->k } }, sh[2] = { xs, ws };
	int64_t ks[2] = { c->k, c->k }, st[2] = { c->s, c->s }, pads[4] = { c->p, c->p, c->p, c->p }, grp = c->g;
	const char *op = pass == FWD ? "Conv" : pass == BWD_DATA ? "ConvGradData" : "ConvGradFilter";
	int in[2], out, node;

	if (pass == BWD_DATA)
		sh[0] = ys;
	else if (pass == BWD_FILTER)
		sh[0] = ys, sh[1] = xs;
	for (int i = 0; i < 2; i++) {
		char name[8] = { 'i', (char)('0' + i), 0 };
		in[i] = hp_graph_add_value(g, name, HP_VALUE_INPUT, HP_F32, &sh[i]);
	}
	out = hp_graph_add_value(g, "y", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	g->inputs = calloc(2, sizeof(int));
	g->outputs = calloc(1, sizeof(int));
	g->inputs[g->ninputs++] = in[0];
	g->inputs[g->ninputs++] = in[1];
	g->outputs[g->noutputs++] = out;
	node = hp_graph_add_node(g, c->name, op, 2, in, 1, &out);
	if (pass != FWD) {
		free(g->nodes[node].domain);
		g->nodes[node].domain = strdup("ai.hpdlf");
	}
	attr(g, node, "kernel_shape", 2, ks);
	attr(g, node, "strides", 2, st);
	attr(g, node, "pads", 4, pads);
	attr(g, node, "group", 0, &grp);
	if (pass == BWD_DATA)
		attr(g, node, "x_shape", 4, xs.dims);
	if (hp_graph_finalize(g) < 0 || hp_graph_infer(g) < 0) {
		fprintf(stderr, "bench: %s: %s\n", c->name, hp_errmsg());
		exit(1);
	}
	return g;
}

/* --pwt 2: 1x1 forwards on conv_pwt.c's tiles from W^T packed once, as
 * inference in core runs them (exec/fuse_pack.c), the packing not timed. */
static int pwt_packed;
/* --dw-packed: depthwise forwards from W laid out once in blocks of
 * sixteen channels where inference packs it (hp_dw_packs: conv_dwkz.c,
 * conv_dwc.c's flat 3x3), the packing not timed. */
static int dw_packed;
/* --grp-packed: forwards that conv_grp.c's co-lane tiles take from W^T
 * packed once (hp_grp_packs: dense Convs at small planes, grouped ones at
 * tiny planes), as inference in core runs them, the packing not timed. */
static int grp_packed;

static double time_hpdlf(const struct cls *c, enum pass pass, int reps)
{
	struct hp_graph *g = conv_graph(c, pass);
	const struct hp_node *n = &g->nodes[0];
	struct hp_tensor t[3];
	struct hp_kargs a = { .nin = 2, .in = t, .nout = 1, .out = &t[2] };
	double ms[64];

	for (int i = 0; i < 3; i++) {
		const struct hp_value *v = &g->values[i < 2 ? n->inputs[i] : n->outputs[0]];
		hp_tensor_alloc(&t[i], HP_F32, &v->shape);
		free(t[i].data);
		t[i].data = filled((size_t)hp_shape_numel(&v->shape), (unsigned)i + 3);
	}
	a.ws_size = n->workspace;
	a.ws = n->workspace ? aligned_alloc(64, (n->workspace + 63) / 64 * 64) : NULL;
	hp_blas_threads(1);
	const struct hp_conv *cv = n->priv;
	float *wt = NULL;
	if (pwt_packed && pass == FWD && c->k == 1 && c->g == 1 && c->s == 1) {
		wt = malloc((size_t)hp_pwt_packed_floats(c->m, c->c) * sizeof *wt);
		hp_pwt_pack(t[1].data, c->m, c->c, wt);
	}
	float *wg = NULL;
	if (grp_packed && pass == FWD && hp_grp_packs(cv)) {
		wg = malloc((size_t)c->m * (size_t)(c->c / c->g) * (size_t)(c->k * c->k) * sizeof *wg);
		hp_grp_pack(t[1].data, c->g, c->m / c->g, c->c / c->g * c->k * c->k, wg);
	}
	float *wd = NULL;
	if (dw_packed && pass == FWD && hp_dw_packs(cv)) {
		wd = malloc((size_t)hp_dwkz_packed_floats(c->m, c->k * c->k) * sizeof *wd);
		hp_dwkz_pack(t[1].data, c->m, c->k * c->k, wd);
	}
	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		if (wg)
			hp_grp_forward_packed(cv, t[0].data, wg, NULL, t[2].data, a.ws, NULL, NULL, NULL);
		else if (wd)
			hp_dw_forward_packed(cv, t[0].data, t[1].data, wd, NULL, t[2].data, NULL, NULL, NULL);
		else if (!wt || !hp_pwt_forward_packed(cv, t[0].data, wt, NULL, t[2].data, NULL, NULL, NULL))
			n->op->run(n, &a);
		if (r > 0)
			ms[r - 1] = now_ms() - t0;
	}
	free(a.ws);
	free(wt);
	free(wd);
	free(wg);
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&t[i]);
	hp_graph_free(g);
	return median(ms, reps);
}

/* ---- the memory floor: a pass's bytes each touched once ------------------ */

/* Sums na floats of a and nb of b and stores the sum's vector over nc
 * floats of c: the least memory traffic any kernel of the pass has (its
 * two operands read once, its result written once), at the rate one
 * thread streams them from where a class's repeated calls leave them. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static float stream_z(const float *a, size_t na, const float *b, size_t nb,
							  float *c, size_t nc)
{
	__m512 s[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
	const float *src[2] = { a, b };
	size_t len[2] = { na, nb }, i;
	float t = 0;

	for (int k = 0; k < 2; k++) {
		for (i = 0; i + 64 <= len[k]; i += 64)
			for (int j = 0; j < 4; j++)
				s[j] = _mm512_add_ps(s[j], _mm512_loadu_ps(src[k] + i + 16 * j));
		for (; i < len[k]; i++)
			t += src[k][i];
	}
	s[0] = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]));
	for (i = 0; i + 16 <= nc; i += 16)
		_mm512_storeu_ps(c + i, s[0]);
	for (; i < nc; i++)
		c[i] = t;
	return t + _mm512_reduce_add_ps(s[0]);
}
#endif

static float stream_once(const float *a, size_t na, const float *b, size_t nb, float *c, size_t nc)
{
	float t = 0;

#if defined(__x86_64__) && defined(__GNUC__)
	if (hp_cpu_avx512_fma())
		return stream_z(a, na, b, nb, c, nc);
#endif
	for (size_t i = 0; i < na; i++)
		t += a[i];
	for (size_t i = 0; i < nb; i++)
		t += b[i];
	for (size_t i = 0; i < nc; i++)
		c[i] = t;
	return t;
}

/* ms of one pass's memory floor (medians of reps samples of about 20 MB
 * streamed each, after a warm-up): fwd reads X and W and writes Y, dX
 * reads dY and W and writes dX, dW reads X and dY and writes dW. */
static double time_floor(const struct cls *c, enum pass p, int reps)
{
	size_t x = (size_t)(c->n * c->c * c->h * c->w), w = (size_t)(c->m * (c->c / c->g) * c->k * c->k);
	size_t y = (size_t)(c->n * c->m * out_dim(c, c->h) * out_dim(c, c->w));
	size_t na = p == BWD_DATA ? y : x, nb = p == BWD_FILTER ? y : w, nc = p == FWD ? y : p == BWD_DATA ? x : w;
	float *a = filled(na, 5), *b = filled(nb, 6), *o = filled(nc, 7);
	int calls = (int)(5e6 / (double)(na + nb + nc)) + 1;
	volatile float sink = 0;
	double ms[64];

	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		for (int i = 0; i < calls; i++)
			sink += stream_once(a, na, b, nb, o, nc);
		if (r > 0)
			ms[r - 1] = (now_ms() - t0) / calls;
	}
	(void)sink;
	free(a);
	free(b);
	free(o);
	return median(ms, reps);
}

/* ---- oneDNN ------------------------------------------------------------ */

#ifdef HPDLF_HAVE_DNNL
struct dn {
	dnnl_engine_t eng;
	dnnl_stream_t st;
};

/* Memory for argument `arg` of pd in the layout the primitive chose, filled. */
static dnnl_memory_t dn_mem(struct dn *d, const_dnnl_primitive_desc_t pd, int arg, unsigned seed)
{
	const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
	dnnl_memory_t m;
	void *h = NULL;
	size_t n;

	if (!md || dnnl_memory_create(&m, md, d->eng, DNNL_MEMORY_ALLOCATE) != dnnl_success)
		return NULL;
	n = dnnl_memory_desc_get_size(md) / sizeof(float);
	dnnl_memory_get_data_handle(m, &h);
	float *f = filled(n, seed);
	memcpy(h, f, n * sizeof(float));
	free(f);
	return m;
}

/* blocked 0: oneDNN on hpdlf's NCHW / OIHW tensors; 1: in the layouts it
 * prefers (format "any", blocked; the reorders into and out of them not
 * counted: an upper bound for a graph kept in its layout). */
static double time_dnnl(struct dn *d, const struct cls *c, enum pass pass, int reps, int blocked, char *impl,
			size_t impl_len, int64_t dil)
{
	dnnl_dims_t xd = { c->n, c->c, c->h, c->w }, yd = { c->n, c->m, out_dim_d(c, c->h, dil), out_dim_d(c, c->w, dil) };
	dnnl_dims_t dd = { dil - 1, dil - 1 }; /* oneDNN counts the gaps: 0 is undilated */
	dnnl_dims_t wd = { c->g, c->m / c->g, c->c / c->g, c->k, c->k }, sd = { c->s, c->s }, pd = { c->p, c->p };
	dnnl_memory_desc_t x, y, w;
	dnnl_convolution_desc_t fd, bd;
	dnnl_primitive_desc_t fpd = NULL, ppd = NULL;
	dnnl_primitive_t prim = NULL;
	const char *info = "?";
	double ms[64], out = -1;
	int args[3] = { pass == BWD_DATA ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC, pass == FWD ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST,
			pass == BWD_FILTER ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS };
	dnnl_exec_arg_t ea[3];

	dnnl_memory_desc_init_by_tag(&x, 4, xd, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_nchw);
	dnnl_memory_desc_init_by_tag(&y, 4, yd, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_nchw);
	dnnl_memory_desc_init_by_tag(&w, 5, wd, dnnl_f32, blocked ? dnnl_format_tag_any : dnnl_goihw);
	if (dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &x, &w,
						       NULL, &y, sd, dd, pd, pd) != dnnl_success ||
	    dnnl_primitive_desc_create(&fpd, &fd, NULL, d->eng, NULL) != dnnl_success)
		goto done;
	if (pass == FWD) {
		ppd = fpd, fpd = NULL;
	} else if (pass == BWD_DATA) {
		if (dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &x, &w, &y, sd, pd, pd) !=
			    dnnl_success ||
		    dnnl_primitive_desc_create(&ppd, &bd, NULL, d->eng, fpd) != dnnl_success)
			goto done;
	} else if (dnnl_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &x, &w, NULL, &y, sd, pd,
							       pd) != dnnl_success ||
		   dnnl_primitive_desc_create(&ppd, &bd, NULL, d->eng, fpd) != dnnl_success) {
		goto done;
	}
	dnnl_primitive_desc_query(ppd, dnnl_query_impl_info_str, 0, &info);
	snprintf(impl, impl_len, "%s", info);
	if (dnnl_primitive_create(&prim, ppd) != dnnl_success)
		goto done;
	for (int i = 0; i < 3; i++)
		if (!(ea[i].memory = dn_mem(d, ppd, ea[i].arg = args[i], (unsigned)i + 3)))
			goto done;
	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		dnnl_primitive_execute(prim, d->st, 3, ea);
		dnnl_stream_wait(d->st);
		if (r > 0)
			ms[r - 1] = now_ms() - t0;
	}
	out = median(ms, reps);
	for (int i = 0; i < 3; i++)
		dnnl_memory_destroy(ea[i].memory);
done:
	dnnl_primitive_destroy(prim);
	dnnl_primitive_desc_destroy(ppd);
	dnnl_primitive_desc_destroy(fpd);
	return out;
}
#endif

/* ---- the im2col path's sgemm under each BLAS ---------------------------- */

typedef void (*bli_sgemm_fn)(int transa, int transb, long m, long n, long k, const float *alpha, const float *a,
			     long rsa, long csa, const float *b, long rsb, long csb, const float *beta, float *c,
			     long rsc, long csc);
static bli_sgemm_fn bli_sgemm_p;

#ifdef HPDLF_HAVE_XSMM
#include <libxsmm.h>
#endif

/* Row-major C[M][N] = A[M][K] B[K][N]; lib 0 OpenBLAS, 1 BLIS, 2 libxsmm. */
static int gemm(int lib, int m, int n, int k, const float *a, const float *b, float *c)
{
	const float one = 1, zero = 0;

	if (lib == 0)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1, a, k, b, n, 0, c, n);
	else if (lib == 1 && bli_sgemm_p)
		bli_sgemm_p(0, 0, m, n, k, &one, a, k, 1, b, n, 1, &zero, c, n, 1); /* BLIS_NO_TRANSPOSE = 0 */
#ifdef HPDLF_HAVE_XSMM
	else if (lib == 2) /* column-major C^T = B^T A^T */
		libxsmm_sgemm(NULL, NULL, &n, &m, &k, &one, b, &n, a, &k, &zero, c, &n);
#endif
	else
		return -1;
	return 0;
}

static double time_gemm(int lib, int m, int n, int k, int reps)
{
	float *a = filled((size_t)m * k, 1), *b = filled((size_t)k * n, 2), *c = filled((size_t)m * n, 3);
	double ms[64];
	int calls = (int)(2e7 / (2.0 * m * n * k)) + 1; /* ~20 MFLOP per sample */

	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		for (int i = 0; i < calls; i++)
			if (gemm(lib, m, n, k, a, b, c) < 0)
				return -1;
		if (r > 0)
			ms[r - 1] = (now_ms() - t0) / calls;
	}
	free(a);
	free(b);
	free(c);
	return median(ms, reps);
}

/* n floats of mmap'd memory, filled as filled() fills: freeing 16 MiB
 * from malloc would raise glibc's mmap threshold, and the classes' tensors
 * timed after it would come from the heap rather than from fresh
 * mappings, as they did before the peak was timed here. */
static float *mapped(size_t n, unsigned seed)
{
	float *p = mmap(NULL, n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t x = seed * 2654435761u + 1;

	if (p == MAP_FAILED) {
		fprintf(stderr, "bench: mmap of %zu floats failed\n", n);
		exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (float)(x >> 8) / (float)(1u << 24) - 0.5f;
	}
	return p;
}

/* cblas_sgemm 2048^3 on one thread, GFLOP/s per CPU-second (as
 * bench_kernels.c measures it): the peak the classes are held to. */
static double sgemm_peak(int reps)
{
	const int n = 2048;
	float *a = mapped((size_t)n * n, 1), *b = mapped((size_t)n * n, 2), *c = mapped((size_t)n * n, 3);
	double ms[64];

	hp_blas_threads(1);
	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
		if (r > 0) /* the first call warms up */
			ms[r - 1] = now_ms() - t0;
	}
	munmap(a, (size_t)n * n * sizeof(float));
	munmap(b, (size_t)n * n * sizeof(float));
	munmap(c, (size_t)n * n * sizeof(float));
	return 2.0 * n * n * n / (median(ms, reps) * 1e6);
}

static void load_blis(void)
{
#ifdef HPDLF_HAVE_BLIS
	void *h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);

	if (h) /* single-threaded: BLIS_NUM_THREADS is set before the re-exec */
		bli_sgemm_p = (bli_sgemm_fn)dlsym(h, "bli_sgemm");
#endif
}

static double gf(double f, double ms)
{
	return ms > 0 ? f / (ms * 1e6) : -1;
}

static FILE *js; /* the JSON line's rows */
static double peak; /* sgemm_peak's GFLOP/s */

/* Per pass over the dense classes: rows, rows at 75% of peak and more,
 * FLOP and hpdlf's ms (for the FLOP-weighted share). */
static struct {
	int rows, good, floored, floored_good;
	double gflop, ms;
} tally[3];

static double pct(double gfs)
{
	return gfs > 0 && peak > 0 ? 100 * gfs / peak : -1;
}

static void row(const struct cls *c, enum pass p, int reps, void *dn, int first)
{
	double f = flops(c), th = time_hpdlf(c, p, reps), tf = time_floor(c, p, reps), td = -1, tb = -1, tg[3];
	int64_t oh = out_dim(c, c->h), ow = out_dim(c, c->w), m = c->m / c->g, k = c->c / c->g * c->k * c->k;
	int64_t cols = oh * ow;
	char impl[128] = "-", implb[128] = "-";

	(void)dn;
#ifdef HPDLF_HAVE_DNNL
	td = time_dnnl(dn, c, p, reps, 0, impl, sizeof impl, 1);
	tb = time_dnnl(dn, c, p, reps, 1, implb, sizeof implb, 1);
#endif
	/* one sgemm per (item, group) over the whole output plane: fwd M x N x K,
	 * dX K x N x M, dW M x K x N (hpdlf's tiles split N further) */
	for (int lib = 0; lib < 3; lib++) {
		int gm = (int)(p == BWD_DATA ? k : m), gn = (int)(p == BWD_FILTER ? k : cols);
		int gk = (int)(p == BWD_DATA ? m : p == BWD_FILTER ? cols : k);
		tg[lib] = time_gemm(lib, gm, gn, gk, reps);
		tg[lib] = tg[lib] > 0 ? tg[lib] * (double)(c->n * c->g) : -1;
	}
	/* dense: not depthwise; and not a stem's dX (3 or fewer input
	 * channels: a net's first layer, whose input gradient training never
	 * computes) */
	if ((c->g == 1 || c->g != c->c) && !(p == BWD_DATA && c->c <= 3)) {
		tally[p].rows++;
		tally[p].good += pct(gf(f, th)) >= 75;
		tally[p].floored += pct(gf(f, tf)) < 75;
		tally[p].floored_good += pct(gf(f, tf)) < 75 && pct(gf(f, th)) < 75 && gf(f, th) >= 0.75 * gf(f, tf);
		tally[p].gflop += f * 1e-9;
		tally[p].ms += th;
	}
	printf("%-10s %-3s %8.4f %8.1f %6.0f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f  %s / %s\n", c->name, pass_name[p],
	       f * 1e-9, gf(f, th), pct(gf(f, th)), gf(f, td), gf(f, tb), gf(f, tg[0]), gf(f, tg[1]), gf(f, tg[2]),
	       gf(f, tf), impl, implb);
	fprintf(js, "%s{\"class\":\"%s\",\"pass\":\"%s\",\"gflop\":%.5f,\"hpdlf\":%.2f,\"pct_sgemm\":%.1f,"
		"\"dnnl\":%.2f,\"dnnl_blocked\":%.2f,\"gemm_openblas\":%.2f,\"gemm_blis\":%.2f,\"gemm_xsmm\":%.2f,"
		"\"floor\":%.2f,\"dnnl_impl\":\"%s\",\"dnnl_blocked_impl\":\"%s\"}",
		first ? "" : ",", c->name, pass_name[p], f * 1e-9, gf(f, th), pct(gf(f, th)), gf(f, td), gf(f, tb),
		gf(f, tg[0]), gf(f, tg[1]), gf(f, tg[2]), gf(f, tf), impl, implb);
}

/* ---- ConvTranspose (kernel == stride, no pad): hpdlf alone ------------- */

struct ctcls {
	const char *name, *why;
	int64_t n, c, m, h, w, k;
};

static const struct ctcls ct_classes[] = {
	{ "ct-u16", "2-D U-Net up.0 (16x16 -> 32x32), batch 2", 2, 128, 64, 16, 16, 2 },
	{ "ct-u32", "2-D U-Net up.1 (32x32 -> 64x64), batch 2", 2, 64, 32, 32, 32, 2 },
	{ "ct-u64", "2-D U-Net up.2 (64x64 -> 128x128), batch 2", 2, 32, 16, 64, 64, 2 },
};

static struct hp_graph *convt_graph(const struct ctcls *c)
{
	struct hp_graph *g = hp_graph_new("bench");
	struct hp_shape sh[2] = { { 4, { c->n, c->c, c->h, c->w } }, { 4, { c->c, c->m, c->k, c->k } } };
	int64_t ks[2] = { c->k, c->k };
	int in[2], out, node;

	for (int i = 0; i < 2; i++) {
		char name[8] = { 'i', (char)('0' + i), 0 };
		in[i] = hp_graph_add_value(g, name, HP_VALUE_INPUT, HP_F32, &sh[i]);
	}
	out = hp_graph_add_value(g, "y", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	g->inputs = calloc(2, sizeof(int));
	g->outputs = calloc(1, sizeof(int));
	g->inputs[g->ninputs++] = in[0];
	g->inputs[g->ninputs++] = in[1];
	g->outputs[g->noutputs++] = out;
	node = hp_graph_add_node(g, c->name, "ConvTranspose", 2, in, 1, &out);
	attr(g, node, "kernel_shape", 2, ks);
	attr(g, node, "strides", 2, ks);
	if (hp_graph_finalize(g) < 0 || hp_graph_infer(g) < 0) {
		fprintf(stderr, "bench: %s: %s\n", c->name, hp_errmsg());
		exit(1);
	}
	return g;
}

/* Median ms of one ConvTranspose node, the FMA path (fma 0) or the column
 * path (-1). */
static double time_convt(const struct ctcls *c, int fma, int reps)
{
	struct hp_graph *g = convt_graph(c);
	const struct hp_node *n = &g->nodes[0];
	struct hp_tensor t[3];
	struct hp_kargs a = { .nin = 2, .in = t, .nout = 1, .out = &t[2] };
	double ms[64];

	for (int i = 0; i < 3; i++) {
		const struct hp_value *v = &g->values[i < 2 ? n->inputs[i] : n->outputs[0]];
		hp_tensor_alloc(&t[i], HP_F32, &v->shape);
		free(t[i].data);
		t[i].data = filled((size_t)hp_shape_numel(&v->shape), (unsigned)i + 3);
	}
	a.ws_size = n->workspace;
	a.ws = n->workspace ? aligned_alloc(64, (n->workspace + 63) / 64 * 64) : NULL;
	hp_convt_set_fma(fma);
	hp_blas_threads(1);
	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		n->op->run(n, &a);
		if (r > 0)
			ms[r - 1] = now_ms() - t0;
	}
	hp_convt_set_fma(0);
	free(a.ws);
	for (int i = 0; i < 3; i++)
		hp_tensor_free(&t[i]);
	hp_graph_free(g);
	return median(ms, reps);
}

/* hpdlf column: the FMA path (convt_fma.c); OpenBLAS column: the column
 * path it replaces (an sgemm and the scatter), both hpdlf's. */
static void ct_row(const struct ctcls *c, int reps, int first)
{
	double f = 2.0 * (double)(c->n * c->c * c->m * c->k * c->k * c->h * c->w);
	double tf = time_convt(c, 0, reps), tc = time_convt(c, -1, reps);

	printf("%-10s %-3s %8.4f %8.1f %8s %8s %8.1f %8s %8s  fma / column path\n", c->name, "fwd", f * 1e-9,
	       gf(f, tf), "-", "-", gf(f, tc), "-", "-");
	fprintf(js, "%s{\"class\":\"%s\",\"pass\":\"fwd\",\"gflop\":%.5f,\"hpdlf\":%.2f,\"hpdlf_column\":%.2f}",
		first ? "" : ",", c->name, f * 1e-9, gf(f, tf), gf(f, tc));
}

/* ---- dilated 3x3 (ASPP), forward: as imported and with its dead taps cut -- */

/* DeepLabV3's ASPP: 3x3, pad = dilation, stride 1, no groups. */
struct aspp {
	struct cls c; /* its p is the dilation */
};

static const struct aspp aspp_classes[] = {
	{ { "aspp-6", "DeepLabV3-MobileNetV3 96x96, rate 12 on 6x6 (24, 36 the same)", 1, 960, 256, 6, 6, 3, 1, 12, 1 } },
	{ { "aspp-32r12", "DeepLabV3-MobileNetV3 512x512, rate 12 on 32x32", 1, 960, 256, 32, 32, 3, 1, 12, 1 } },
	{ { "aspp-32r24", "DeepLabV3-MobileNetV3 512x512, rate 24 on 32x32", 1, 960, 256, 32, 32, 3, 1, 24, 1 } },
	{ { "aspp-32r36", "DeepLabV3-MobileNetV3 512x512, rate 36 on 32x32", 1, 960, 256, 32, 32, 3, 1, 36, 1 } },
};

/* Taps of one axis that read an input position for some output (as exec/fuse_dil.c finds them). */
static int64_t live_taps(const struct cls *c, int64_t in)
{
	int64_t n = 0, out = out_dim_d(c, in, c->p);

	for (int64_t t = 0; t < c->k; t++)
		for (int64_t o = 0; o < out; o++) {
			int64_t at = o * c->s - c->p + t * c->p;
			if (at >= 0 && at < in) {
				n++;
				break;
			}
		}
	return n;
}

/* A one-node Conv graph of class c, its weight an initializer; cut: after
 * the inference graph optimisation (exec/fuse.c), which cuts its taps. */
static struct hp_graph *aspp_graph(const struct cls *c, int cut)
{
	struct hp_graph *g = hp_graph_new("bench");
	struct hp_shape xs = { 4, { c->n, c->c, c->h, c->w } }, ws = { 4, { c->m, c->c / c->g, c->k, c->k } };
	int64_t ks[2] = { c->k, c->k }, dl[2] = { c->p, c->p }, pads[4] = { c->p, c->p, c->p, c->p };
	int in[2], out, node;
	struct hp_fuse_report r;

	in[0] = hp_graph_add_value(g, "x", HP_VALUE_INPUT, HP_F32, &xs);
	in[1] = hp_graph_add_value(g, "w", HP_VALUE_INITIALIZER, HP_F32, &ws);
	g->values[in[1]].data = filled((size_t)hp_shape_numel(&ws), 4);
	g->values[in[1]].src = (struct hp_blob){ .kind = HP_BLOB_MEMORY, .length = (uint64_t)hp_shape_numel(&ws) * 4 };
	out = hp_graph_add_value(g, "y", HP_VALUE_ACTIVATION, HP_UNDEFINED, NULL);
	g->inputs = calloc(1, sizeof(int));
	g->outputs = calloc(1, sizeof(int));
	g->inputs[g->ninputs++] = in[0];
	g->outputs[g->noutputs++] = out;
	node = hp_graph_add_node(g, c->name, "Conv", 2, in, 1, &out);
	attr(g, node, "kernel_shape", 2, ks);
	attr(g, node, "dilations", 2, dl);
	attr(g, node, "pads", 4, pads);
	if (hp_graph_finalize(g) < 0 || hp_graph_infer(g) < 0 || (cut && hp_fuse_inference(g, NULL, &r) < 0)) {
		fprintf(stderr, "bench: %s: %s\n", c->name, hp_errmsg());
		exit(1);
	}
	if (cut)
		hp_fuse_report_free(&r);
	return g;
}

/* Median ms of the graph's one node on one thread (its constant inputs as they are). */
static double time_node(struct hp_graph *g, int reps)
{
	const struct hp_node *n = &g->nodes[0];
	struct hp_tensor t[8], y;
	struct hp_kargs a = { .nin = n->ninputs, .in = t, .nout = 1, .out = &y };
	double ms[64];

	for (int i = 0; i < n->ninputs && i < 8; i++) {
		const struct hp_value *v = n->inputs[i] >= 0 ? &g->values[n->inputs[i]] : NULL;
		memset(&t[i], 0, sizeof t[i]);
		if (!v)
			continue;
		t[i].dtype = v->dtype;
		t[i].shape = v->shape;
		t[i].data = v->data ? v->data : filled((size_t)hp_shape_numel(&v->shape), (unsigned)i + 3);
	}
	hp_tensor_alloc(&y, HP_F32, &g->values[n->outputs[0]].shape);
	a.ws_size = n->workspace;
	a.ws = n->workspace ? aligned_alloc(64, (n->workspace + 63) / 64 * 64) : NULL;
	hp_blas_threads(1);
	for (int r = 0; r <= reps; r++) {
		double t0 = now_ms();
		n->op->run(n, &a);
		if (r > 0)
			ms[r - 1] = now_ms() - t0;
	}
	free(a.ws);
	for (int i = 0; i < n->ninputs && i < 8; i++)
		if (n->inputs[i] >= 0 && !g->values[n->inputs[i]].data)
			free(t[i].data);
	hp_tensor_free(&y);
	return median(ms, reps);
}

/* GFLOP/s on the live taps only (the work a cut kernel does): hpdlf as
 * imported (--no-fuse: the dilated kernel), hpdlf after the cut (the
 * inference default), oneDNN's dilated convolution (NCHW, blocked). */
static void aspp_row(const struct cls *c, int reps, void *dn, int first)
{
	double f = 2.0 * (double)(c->n * c->m * (c->c / c->g) * live_taps(c, c->h) * live_taps(c, c->w) *
				  out_dim_d(c, c->h, c->p) * out_dim_d(c, c->w, c->p));
	struct hp_graph *full = aspp_graph(c, 0), *cut = aspp_graph(c, 1);
	double tf = time_node(full, reps), tc = time_node(cut, reps), td = -1, tb = -1;
	char impl[128] = "-", implb[128] = "-", kern[32];
	const struct hp_value *w = &cut->values[cut->nodes[0].inputs[1]];

	snprintf(kern, sizeof kern, "%lldx%lld", (long long)w->shape.dims[2], (long long)w->shape.dims[3]);
	(void)dn;
#ifdef HPDLF_HAVE_DNNL
	td = time_dnnl(dn, c, FWD, reps, 0, impl, sizeof impl, c->p);
	tb = time_dnnl(dn, c, FWD, reps, 1, implb, sizeof implb, c->p);
#endif
	printf("%-10s fwd %8.4f %8.1f %8.1f %8.1f %8.1f  cut to %s (%s); %s / %s\n", c->name, f * 1e-9, gf(f, tf),
	       gf(f, tc), gf(f, td), gf(f, tb), kern, cut->nodes[0].op_type, impl, implb);
	fprintf(js, "%s{\"class\":\"%s\",\"pass\":\"fwd\",\"gflop_live\":%.5f,\"hpdlf_full\":%.2f,\"hpdlf\":%.2f,"
		"\"dnnl\":%.2f,\"dnnl_blocked\":%.2f,\"cut_kernel\":\"%s\",\"dnnl_impl\":\"%s\",\"dnnl_blocked_impl\":\"%s\"}",
		first ? "" : ",", c->name, f * 1e-9, gf(f, tf), gf(f, tc), gf(f, td), gf(f, tb), kern, impl, implb);
	hp_graph_free(full);
	hp_graph_free(cut);
}

/* --class takes a comma-separated list of names. */
static int picked(const char *only, const char *name)
{
	size_t n = strlen(name);

	if (!only)
		return 1;
	for (const char *p = only; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, name, n) && (p[n] == ',' || !p[n]))
			return 1;
	return 0;
}

/* The dense classes' FLOP over hpdlf's time for all of them, as a share of
 * the peak: what a net made of these layers in these proportions gets. */
static double tally_pct(int p)
{
	return tally[p].ms > 0 ? pct(tally[p].gflop / (tally[p].ms * 1e-3)) : -1;
}

static void print_tally(void)
{
	for (int p = 0; p < 3; p++)
		if (tally[p].rows)
			printf("dense %-3s: %d of %d rows at 75%% of sgemm peak or more; FLOP-weighted %.1f%%; "
			       "%d rows with a memory floor under 75%% of the peak, %d of them at 75%% of their floor\n",
			       pass_name[p], tally[p].good, tally[p].rows, tally_pct(p), tally[p].floored,
			       tally[p].floored_good);
}

int main(int argc, char **argv)
{
	int reps = 5, nc = (int)(sizeof classes / sizeof classes[0]), first = 1, fwd_only = 0;
	const char *only = NULL;
	void *dn = NULL;

	if (!getenv("OMP_NUM_THREADS")) { /* libgomp reads it once, at load */
		setenv("OMP_NUM_THREADS", "1", 1);
		setenv("BLIS_NUM_THREADS", "1", 1);
		execv("/proc/self/exe", argv);
	}
	hp_blas_quiet_workers(); /* as hpdlf-exec does */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--class") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--shift") && i + 1 < argc) /* hpdlf's shift path: auto, always, never */
			hp_conv_set_shift(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--dot") && i + 1 < argc) /* hpdlf's dot path: auto, always, never */
			hp_conv_set_dot(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--dwc") && i + 1 < argc) /* channel-blocked depthwise: auto, always, never */
			hp_dwc_set_mode(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--dwf") && i + 1 < argc) /* depthwise stride 1 on flat planes: auto, always, never */
			hp_dwf_set_mode(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--dwk") && i + 1 < argc) /* depthwise 5x5/7x7 by channel blocks: auto, never */
			hp_dwk_set_mode(atoi(argv[i + 1])), hp_dkg_set_mode(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--dwp") && i + 1 < argc) /* depthwise dW by positions in lanes: auto, never */
			hp_dwp_set_mode(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--dws") && i + 1 < argc) /* stride-2 depthwise, lanes along positions: auto, always, never */
			hp_dws_set_mode(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--kxk") && i + 1 < argc) /* hpdlf's KxK path: auto, always, never */
			hp_conv_set_kxk(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--phase") && i + 1 < argc) /* strided dX by phases: off, on */
			hp_cgp_set_mode(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--grp") && i + 1 < argc) /* hpdlf's grouped path: auto, always, never */
			hp_conv_set_grp(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--grp-cf") && i + 1 < argc) /* its co-lane forward tiles: auto, always, never */
			hp_grp_set_cofwd(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--kxk-run") && i + 1 < argc) /* its row-run blocks: on (1), packed (0) */
			hp_kxk_set_run(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--pw") && i + 1 < argc) /* 1x1 dW on conv_grad_pw.c: auto, always, never */
			hp_pfilt_set_mode(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--stem") && i + 1 < argc) /* dW on conv_grad_stem.c: auto, always, never */
			hp_sfilt_set_mode(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--pwt") && i + 1 < argc) { /* 1x1 on conv_pwt.c: auto, always, never, */
			pwt_packed = atoi(argv[++i]) == 2;                 /* 2: always, from W^T packed once */
			hp_pwt_set_mode(pwt_packed ? 1 : atoi(argv[i]));
		}
		else if (!strcmp(argv[i], "--grp-packed"))
			grp_packed = 1;
		else if (!strcmp(argv[i], "--grp-skip") && i + 1 < argc) /* -1: packed 3x3s multiply the padding */
			hp_grp_set_skip(atoi(argv[++i]));
		else if (!strcmp(argv[i], "--dw-packed"))
			dw_packed = 1;
		else if (!strcmp(argv[i], "--fwd"))
			fwd_only = 1;
		else {
			fprintf(stderr,
				"usage: %s [--reps N] [--class NAME[,NAME...]] [--shift 0|1|-1] [--dot 0|1|-1] [--dwc 0|1|-1] [--dwk 0|-1] [--dwp 0|-1] [--dwf 0|1|-1] [--dws 0|1|-1] [--kxk 0|1|-1] [--grp 0|1|-1] [--kxk-run 0|1] [--phase 0|1] [--pw 0|1|-1] [--stem 0|1|-1] [--pwt 0|1|2|-1] [--grp-cf 0|1|-1] [--grp-packed] [--grp-skip 0|-1] [--dw-packed] [--fwd]\n",
				argv[0]);
			return 2;
		}
	}
	reps = reps < 1 ? 1 : reps > 63 ? 63 : reps;
	load_blis();
#ifdef HPDLF_HAVE_DNNL
	static struct dn d;
	if (dnnl_engine_create(&d.eng, dnnl_cpu, 0) == dnnl_success &&
	    dnnl_stream_create(&d.st, d.eng, dnnl_stream_default_flags) == dnnl_success)
		dn = &d;
#endif
#ifdef HPDLF_HAVE_XSMM
	libxsmm_init();
#endif
	peak = sgemm_peak(reps < 7 ? reps : 7); /* ~0.17 s a call */
	printf("GFLOP/s per CPU-second, 1 thread; gemm columns: the im2col path's sgemm alone\n");
	printf("cblas_sgemm 2048^3: %.1f GFLOP/s per CPU-second on 1 thread (%%sgemm: hpdlf's share of it)\n", peak);
	printf("%-10s %-3s %8s %8s %6s %8s %8s %8s %8s %8s %8s  %s\n", "class", "op", "GFLOP", "hpdlf", "%sgemm", "oneDNN",
	       "dnnl-blk", "OpenBLAS", "BLIS", "libxsmm", "floor", "oneDNN impl (NCHW / blocked)");
	char *buf = NULL;
	size_t len = 0;
	js = open_memstream(&buf, &len);
	for (int i = 0; i < nc; i++) {
		if (!picked(only, classes[i].name))
			continue;
		for (int p = 0; p < (fwd_only ? 1 : 3); p++, first = 0)
			row(&classes[i], (enum pass)p, reps, dn, first);
	}
	for (size_t i = 0; i < sizeof ct_classes / sizeof ct_classes[0]; i++)
		if (picked(only, ct_classes[i].name))
			ct_row(&ct_classes[i], reps, first), first = 0;
	if (!only || strstr(only, "aspp"))
		printf("%-10s %-3s %8s %8s %8s %8s %8s  (GFLOP/s on live taps)\n", "class", "op", "GFLOP", "full", "hpdlf",
		       "oneDNN", "dnnl-blk");
	for (size_t i = 0; i < sizeof aspp_classes / sizeof aspp_classes[0]; i++)
		if (picked(only, aspp_classes[i].c.name))
			aspp_row(&aspp_classes[i].c, reps, dn, first), first = 0;
	fclose(js);
	print_tally();
	printf("{\"bench\":\"conv_libs\",\"reps\":%d,\"unit\":\"GFLOP/s per CPU-second, 1 thread\",\"sgemm_peak\":%.2f,"
	       "\"dense\":{",
	       reps, peak);
	for (int p = 0; p < 3; p++)
		printf("%s\"%s\":{\"rows\":%d,\"at75\":%d,\"gflop\":%.5f,\"pct_weighted\":%.1f,\"floor_under75\":%d,"
		       "\"floor_under75_at75_of_floor\":%d}",
		       p ? "," : "", pass_name[p], tally[p].rows, tally[p].good, tally[p].gflop, tally_pct(p),
		       tally[p].floored, tally[p].floored_good);
	printf("},\"rows\":[%s]}\n", buf);
	free(buf);
	return 0;
}
