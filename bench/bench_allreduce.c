/* Gradient reduction benchmark: the bus bandwidth of hpdlf's bucketed
 * reduction (AllReduce nodes run by exec/comm_reduce.c and comm_shard.c:
 * pack into the staging buffer by rank blocks, MPI_Reduce_scatter, scale by
 * 1/ranks, MPI_Allgatherv, unpack; the blocks of --shard) against one bare
 * MPI_Allreduce of the same bytes, in the same run, alternating rounds so
 * that load on a shared machine hits both alike.
 *
 *   mpirun -np N hpdlf-bench-allreduce [--bytes SIZE] [--bucket SIZE]
 *                                      [--tensor SIZE] [--rounds N]
 *
 * The gradients are float32 tensors of --tensor bytes (default 1M) adding
 * up to --bytes (default 64M), grouped into buckets of --bucket bytes
 * (default 4M) as the trainer groups them.  Bus bandwidth is
 * 2 (N-1)/N * bytes / time (the traffic of a ring allreduce per rank).
 * Rank 0 prints one line per method and ends with one JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "exec/comm.h"

struct bench {
	uint64_t bytes, bucket, tensor;
	int rounds, ranks;
	int ntensors;
	float **grad, **out;
	float *flat;
};

static int arg_size(const char *s, uint64_t *v)
{
	return hp_parse_size(s, v) < 0 || !*v ? -1 : 0;
}

static int parse(int argc, char **argv, struct bench *b)
{
	b->bytes = 64u << 20;
	b->bucket = 4u << 20;
	b->tensor = 1u << 20;
	b->rounds = 10;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = !v;
		if (!bad && !strcmp(argv[i], "--bytes"))
			bad = arg_size(v, &b->bytes);
		else if (!bad && !strcmp(argv[i], "--bucket"))
			bad = arg_size(v, &b->bucket);
		else if (!bad && !strcmp(argv[i], "--tensor"))
			bad = arg_size(v, &b->tensor);
		else if (!bad && !strcmp(argv[i], "--rounds"))
			bad = (b->rounds = atoi(v)) < 1;
		else
			bad = 1;
		if (bad) {
			fprintf(stderr, "usage: mpirun -np N hpdlf-bench-allreduce [--bytes SIZE] [--bucket SIZE] "
					"[--tensor SIZE] [--rounds N]\n");
			return 2;
		}
		i++;
	}
	b->tensor = (b->tensor + 3) / 4 * 4;
	b->ntensors = (int)((b->bytes + b->tensor - 1) / b->tensor);
	b->bytes = (uint64_t)b->ntensors * b->tensor;
	return 0;
}

static int alloc(struct bench *b)
{
	size_t k = b->tensor / 4;

	b->grad = calloc((size_t)b->ntensors, sizeof *b->grad);
	b->out = calloc((size_t)b->ntensors, sizeof *b->out);
	b->flat = malloc(b->bytes);
	if (!b->grad || !b->out || !b->flat)
		return -1;
	for (int i = 0; i < b->ntensors; i++) {
		if (!(b->grad[i] = malloc(b->tensor)) || !(b->out[i] = malloc(b->tensor)))
			return -1;
		for (size_t j = 0; j < k; j++)
			b->grad[i][j] = (float)((j + (size_t)i) % 97) * 0.01f;
	}
	for (uint64_t j = 0; j < b->bytes / 4; j++)
		b->flat[j] = (float)(j % 97) * 0.01f;
	return 0;
}

/* Every bucket as the runtime runs it: one AllReduce node over its tensors. */
static int hpdlf_round(struct bench *b)
{
	struct hp_attr at = { .name = (char *)"ranks", .type = HP_ATTR_INT, .i = b->ranks };
	struct hp_node n = { .name = (char *)"bench", .op_type = (char *)"AllReduce", .domain = (char *)"ai.hpdlf",
			     .nattrs = 1, .attrs = &at };
	int per = (int)(b->bucket / b->tensor) > 0 ? (int)(b->bucket / b->tensor) : 1;
	struct hp_tensor in[per + 1], out[per + 1];
	float tok;

	for (int first = 0; first < b->ntensors; first += per) {
		int k = b->ntensors - first < per ? b->ntensors - first : per;
		struct hp_kargs a = { .nin = k + 1, .in = in, .nout = k + 1, .out = out };
		memset(in, 0, sizeof in);
		memset(out, 0, sizeof out);
		out[0].data = &tok;
		for (int i = 0; i < k; i++) {
			struct hp_shape s = { 1, { (int64_t)(b->tensor / 4) } };
			in[1 + i] = (struct hp_tensor){ .dtype = HP_F32, .shape = s, .data = b->grad[first + i] };
			out[1 + i] = (struct hp_tensor){ .dtype = HP_F32, .shape = s, .data = b->out[first + i] };
		}
		int rc = hp_comm_run_allreduce(&n, &a);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static double timed(struct bench *b, int hpdlf)
{
	double t0;

	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	if (hpdlf)
		hpdlf_round(b);
	else
		MPI_Allreduce(MPI_IN_PLACE, b->flat, (int)(b->bytes / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
	double t = MPI_Wtime() - t0, worst;
	MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return worst;
}

static int cmp(const void *x, const void *y)
{
	double a = *(const double *)x, c = *(const double *)y;

	return (a > c) - (a < c);
}

int main(int argc, char **argv)
{
	struct bench b = { 0 };
	int rc = parse(argc, argv, &b);

	if (rc)
		return rc;
	if (!hp_comm_env(&(int){ 0 }, &(int){ 0 })) {
		fprintf(stderr, "hpdlf-bench-allreduce: start it under mpirun or srun (2 ranks or more)\n");
		return 77;
	}
	if (hp_comm_init() < 0) {
		fprintf(stderr, "hpdlf-bench-allreduce: %s\n", hp_errmsg());
		return 1;
	}
	b.ranks = hp_comm_size();
	if (alloc(&b) < 0) {
		fprintf(stderr, "hpdlf-bench-allreduce: out of memory\n");
		return 1;
	}
	double th[b.rounds], tm[b.rounds];
	timed(&b, 1); /* warm-up: connections, staging buffer */
	timed(&b, 0);
	for (int r = 0; r < b.rounds; r++) {
		th[r] = timed(&b, 1);
		tm[r] = timed(&b, 0);
	}
	qsort(th, (size_t)b.rounds, sizeof th[0], cmp);
	qsort(tm, (size_t)b.rounds, sizeof tm[0], cmp);
	double f = 2.0 * (b.ranks - 1) / b.ranks * (double)b.bytes / 1e9;
	double bh = f / th[b.rounds / 2], bm = f / tm[b.rounds / 2];
	if (hp_comm_rank() == 0) {
		printf("hpdlf bucketed (%llu B buckets): median %.2f ms, bus %.3f GB/s\n",
		       (unsigned long long)b.bucket, th[b.rounds / 2] * 1e3, bh);
		printf("bare MPI_Allreduce:               median %.2f ms, bus %.3f GB/s\n", tm[b.rounds / 2] * 1e3, bm);
		printf("{\"bench\":\"allreduce\",\"ranks\":%d,\"bytes\":%llu,\"bucket\":%llu,\"tensor\":%llu,\"rounds\":%d,"
		       "\"hpdlf_ms\":%.3f,\"mpi_ms\":%.3f,\"hpdlf_busbw_gbs\":%.4f,\"mpi_busbw_gbs\":%.4f,"
		       "\"ratio\":%.3f}\n", b.ranks, (unsigned long long)b.bytes, (unsigned long long)b.bucket,
		       (unsigned long long)b.tensor, b.rounds, th[b.rounds / 2] * 1e3, tm[b.rounds / 2] * 1e3, bh, bm,
		       bh / bm);
	}
	hp_comm_finalize();
	return 0;
}
