/* The per-kernel speed model: what one node costs from the measured
 * coefficients (speed_calib.c measures them).  Pure: no session, no store,
 * no I/O; the planner calls only this.  See speed.h. */
#include <math.h>
#include <string.h>

#include "hpdlf/kernels.h"
#include "exec/speed.h"

double hp_speed_gemm_gflops(const struct hp_speed_compute *sp, double flops)
{
	const int n = HP_SPEED_NPTS;

	if (flops <= sp->flops[0])
		return sp->gflops[0];
	if (flops >= sp->flops[n - 1])
		return sp->gflops[n - 1];
	for (int i = 1; i < n; i++)
		if (flops <= sp->flops[i]) {
			double f = log(flops / sp->flops[i - 1]) / log(sp->flops[i] / sp->flops[i - 1]);
			return sp->gflops[i - 1] + f * (sp->gflops[i] - sp->gflops[i - 1]);
		}
	return sp->gflops[n - 1];
}

double hp_speed_kernel_bytes(const struct hp_graph *g, const struct hp_node *n)
{
	double b = 0;

	for (int pass = 0; pass < 2; pass++)
		for (int j = 0; j < (pass ? n->noutputs : n->ninputs); j++) {
			int v = pass ? n->outputs[j] : n->inputs[j];
			if (v < 0)
				continue;
			struct hp_tensor t = { .dtype = g->values[v].dtype, .shape = g->values[v].shape };
			b += (double)hp_tensor_bytes(&t);
		}
	return b;
}

static int gemm_bound(const char *op)
{
	static const char *const ops[] = { "Conv", "ConvTranspose", "Gemm", "MatMul", "ConvGradData",
					   "ConvGradFilter", "ConvGradFilterUpdate", "ConvTransposeGradData", "GemmGrad", "MatMulGrad",
					   "FusedConv", "FusedMatMul", "FusedGemm", "FusedAttention", "FusedInvRes" };

	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (!strcmp(op, ops[i]))
			return 1;
	return 0;
}

double hp_speed_kernel_ms(const struct hp_speed_compute *sp, const struct hp_graph *g, const struct hp_node *n,
			  enum hp_kclass *cls)
{
	double f = n->op && n->op->flops ? n->op->flops(g, n) : 0, ms = sp->dispatch_us / 1e3;
	double bytes = n->op && (n->op->flags & HP_OP_ALIAS) ? 0 : hp_speed_kernel_bytes(g, n);
	double mem = bytes / sp->mem_GBps / 1e6;

	*cls = gemm_bound(n->op_type) ? HP_KC_GEMM : HP_KC_MEM;
	if (*cls == HP_KC_GEMM) {
		double c = f / hp_speed_gemm_gflops(sp, f) / 1e6;
		return ms + (c > mem ? c : mem);
	}
	return ms + mem;
}
