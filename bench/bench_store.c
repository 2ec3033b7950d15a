/* Store benchmark: NVMe-tier streaming (write, then read back with crc32c
 * checked) against fio on the same directory in the same run; random
 * 4 KiB-chunk read IOPS against fio randread at the same depth; PMEM-tier
 * copy bandwidth against memcpy.
 *
 *   hpdlf-bench-store --dir DIR [--size 2G] [--qd 32] [--chunk 4M]
 *                     [--iops-size 256M] [--iops-ops 100000]
 *                     [--pmem-dir /dev/shm] [--pmem-size 512M] [--no-fio]
 *
 * The stream runs twice through one store: the first pass (reported as
 * *_cold_MBps) also grows the DRAM frame pool and allocates the tier file's
 * blocks; the second (read_MBps, write_MBps) is the steady state of a
 * long-running job.  Ends with one JSON line: those, and when fio runs
 * fio_read_MBps, fio_write_MBps and the ratios to the steady state. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "bench_fio.h"
#include "hpdlf/tensor.h"
#include "store/store_internal.h"
#include "store/tier.h"
#include "store/tier_pmem.h"
#include "store/tier_uring.h"

struct args {
	const char *dir, *pmem_dir;
	uint64_t size, chunk, iops_size, iops_ops, pmem_size;
	unsigned qd;
	int fio;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int die(const char *what)
{
	fprintf(stderr, "hpdlf-bench-store: %s: %s\n", what, hp_errmsg());
	exit(1);
}

static int open_nvme_store(const struct args *a, uint64_t chunk, uint64_t budget, const char *file,
			   struct hs_store **st)
{
	struct hs_store_opts o;
	static char path[1024];

	hs_store_opts_init(&o, sizeof o);
	snprintf(path, sizeof path, "%s/%s", a->dir, file);
	o.chunk_size = chunk;
	o.budget = budget;
	o.queue_depth = a->qd;
	o.reset = 1;
	o.ntiers = 1;
	o.tiers[0] = (struct hs_tier_spec){ .kind = HS_TIER_NVME, .path = path,
					    .size = a->size + a->iops_size + (64ull << 20) };
	return hs_store_open(&o, st);
}

/* Stream a->size bytes through the NVMe tier in batches of `batch` chunks:
 * write-back timed around hs_evict, read-back (prefetch one batch ahead,
 * crc32c verified) timed end to end. */
static void stream_pass(const struct args *a, struct hs_store *st, double *wMBps, double *rMBps)
{
	const uint64_t batch = 32;
	struct hs_tensor *t;
	struct hs_tensor_info ti = { .bytes = a->size, .dtype = HP_U8 };
	uint64_t nch, cs = a->chunk;
	double tw = 0, t0;
	unsigned char *p;

	if (hs_tensor_create(st, &ti, &t) < 0)
		die("creating the tensor");
	nch = hs_tensor_nchunks(t);
	for (uint64_t b = 0; b < nch; b += batch) {
		uint64_t n = nch - b < batch ? nch - b : batch;
		if (hs_pin(t, b, n, HS_PIN_OVERWRITE, (void **)&p) < 0)
			die("pin");
		for (uint64_t i = 0; i < n; i++)
			memset(p + i * cs, (int)((b + i) & 0xff), cs);
		hs_unpin(t, b, n);
		t0 = now_s();
		if (hs_evict(t, b, n, 0) < 0)
			die("write-back");
		tw += now_s() - t0;
	}
	*wMBps = (double)a->size / tw / 1e6;

	struct hs_prefetch *h[2] = { 0 };
	t0 = now_s();
	if (hs_prefetch(t, 0, nch < batch ? nch : batch, &h[0]) < 0)
		die("prefetch");
	for (uint64_t b = 0, k = 0; b < nch; b += batch, k ^= 1) {
		uint64_t n = nch - b < batch ? nch - b : batch;
		if (b + batch < nch &&
		    hs_prefetch(t, b + batch, nch - b - batch < batch ? nch - b - batch : batch, &h[k ^ 1]) < 0)
			die("prefetch");
		if (hs_prefetch_wait(h[k]) < 0 || hs_pin(t, b, n, HS_PIN_READ, (void **)&p) < 0)
			die("read-back");
		for (uint64_t i = 0; i < n; i++)
			if (p[i * cs] != (unsigned char)((b + i) & 0xff) || p[i * cs + cs - 1] != p[i * cs])
				die("read-back returned wrong data");
		hs_unpin(t, b, n);
		hs_evict(t, b, n, HS_TIER_NONE);
	}
	*rMBps = (double)a->size / (now_s() - t0) / 1e6;
	hs_tensor_drop(t);
}

/* Two passes over one store: the first (cold) grows the DRAM frame pool and
 * allocates the tier file's blocks, the second (warm) streams through both
 * as a long-running job does; w and r get {cold, warm}. */
static void stream(const struct args *a, double w[2], double r[2], struct hs_store_stats *out)
{
	struct hs_store *st;

	if (open_nvme_store(a, a->chunk, 3 * 32 * a->chunk, "hpdlf-bench-store.nvme", &st) < 0)
		die("opening the store");
	for (int pass = 0; pass < 2; pass++)
		stream_pass(a, st, &w[pass], &r[pass]);
	hs_store_stats(st, out);
	hs_store_close(st);
}

/* Random single-chunk reads of 4 KiB chunks, a->qd in flight: batches of
 * qd/4 chunks through hs_prefetch_many (fio submits as it reaps, which is
 * what the batches approximate), each batch evicted once waited for.
 * *fixed: share of the reads the nvme tier served from registered buffers. */
static double iops(const struct args *a, double *fixed)
{
	struct hs_store *st;
	struct hs_tensor *t;
	struct hs_tensor_info ti = { .bytes = a->iops_size, .dtype = HP_U8 };
	unsigned bsz = a->qd >= 4 ? a->qd / 4 : 1, nb = (a->qd + bsz - 1) / bsz;
	struct hs_prefetch **win = calloc(nb, sizeof *win);
	struct hs_range *rg = calloc((size_t)nb * bsz, sizeof *rg);
	uint64_t nch, x = 88172645463325252ull, f0;
	unsigned char *p;
	double t0;

	if (open_nvme_store(a, 4096, 64ull << 20, "hpdlf-bench-iops.nvme", &st) < 0 ||
	    hs_tensor_create(st, &ti, &t) < 0)
		die("opening the store");
	nch = hs_tensor_nchunks(t);
	for (uint64_t b = 0; b < nch; b += 4096) {
		uint64_t n = nch - b < 4096 ? nch - b : 4096;
		if (hs_pin(t, b, n, HS_PIN_OVERWRITE, (void **)&p) < 0)
			die("pin");
		memset(p, 0x5a, n * 4096);
		hs_unpin(t, b, n);
		if (hs_evict(t, b, n, 0) < 0)
			die("write-back");
	}
	f0 = hs_tier_nvme_fixed_ios(st->tiers[0]);
	t0 = now_s();
	for (uint64_t i = 0, b = 0; i < a->iops_ops + (uint64_t)nb * bsz; i += bsz, b = (b + 1) % nb) {
		struct hs_range *r = &rg[b * bsz];
		if (win[b]) {
			if (hs_prefetch_wait(win[b]) < 0)
				die("random read");
			for (unsigned j = 0; j < bsz; j++)
				hs_evict(t, r[j].first, 1, HS_TIER_NONE);
			win[b] = NULL;
		}
		if (i >= a->iops_ops)
			continue;
		for (unsigned j = 0; j < bsz; j++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift */
			r[j] = (struct hs_range){ t, x % nch, 1 };
		}
		if (hs_prefetch_many(r, bsz, &win[b]) < 0)
			die("random read");
	}
	double rate = (double)a->iops_ops / (now_s() - t0);
	*fixed = (double)(hs_tier_nvme_fixed_ios(st->tiers[0]) - f0) / (double)a->iops_ops;
	hs_store_close(st);
	free(win);
	free(rg);
	return rate;
}

/* PMEM tier: write and read bandwidth of 4 MiB transfers through the tier,
 * and memcpy between DRAM buffers of the same size for reference. */
static void pmem_bw(const struct args *a, double *wGBps, double *rGBps, double *memcpyGBps)
{
	char path[1024];
	struct hs_tier_config cfg = { .name = "pmem", .path = path, .capacity = a->pmem_size + 8192,
				      .reserved = 8192, .flags = HS_TIER_F_CREATE };
	struct hs_tier *t;
	const size_t bl = 4u << 20;
	uint64_t n = a->pmem_size / bl;
	unsigned char *buf = aligned_alloc(4096, bl), *big = aligned_alloc(4096, a->pmem_size);
	double t0;

	snprintf(path, sizeof path, "%s/hpdlf-bench-store.pmem", a->pmem_dir);
	unlink(path);
	if (hs_tier_pmem_open(&cfg, &t) < 0)
		die("opening the pmem tier");
	memset(buf, 1, bl);
	memset(big, 2, a->pmem_size);
	for (int pass = 0; pass < 2; pass++) { /* the first pass allocates the pool's pages */
		t0 = now_s();
		for (uint64_t i = 0; i < n; i++)
			if (hs_tier_rw(t, HS_IO_WRITE, 8192 + i * bl, buf, bl) < 0)
				die("pmem write");
		*wGBps = (double)(n * bl) / (now_s() - t0) / 1e9;
	}
	t0 = now_s();
	for (uint64_t i = 0; i < n; i++)
		if (hs_tier_rw(t, HS_IO_READ, 8192 + i * bl, buf, bl) < 0)
			die("pmem read");
	*rGBps = (double)(n * bl) / (now_s() - t0) / 1e9;
	t0 = now_s();
	for (uint64_t i = 0; i < n; i++)
		memcpy(big + i * bl, buf, bl);
	*memcpyGBps = (double)(n * bl) / (now_s() - t0) / 1e9;
	t->ops->close(t);
	unlink(path);
	free(buf);
	free(big);
}

static void usage(void)
{
	fprintf(stderr, "usage: hpdlf-bench-store --dir DIR [--size 2G] [--qd 32] [--chunk 4M] [--iops-size 256M]\n"
			"                         [--iops-ops N] [--pmem-dir /dev/shm] [--pmem-size 512M] [--no-fio]\n");
	exit(2);
}

static void parse(int argc, char **argv, struct args *a)
{
	static const struct option lo[] = {
		{ "dir", 1, 0, 'd' }, { "size", 1, 0, 's' }, { "qd", 1, 0, 'q' }, { "chunk", 1, 0, 'c' },
		{ "iops-size", 1, 0, 'i' }, { "iops-ops", 1, 0, 'n' }, { "pmem-dir", 1, 0, 'p' },
		{ "pmem-size", 1, 0, 'P' }, { "no-fio", 0, 0, 'F' }, { 0, 0, 0, 0 },
	};
	int c;

	*a = (struct args){ .pmem_dir = "/dev/shm", .size = 2ull << 30, .chunk = 4u << 20, .iops_size = 256u << 20,
			    .iops_ops = 100000, .pmem_size = 512u << 20, .qd = 32, .fio = 1 };
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		uint64_t v = 0;
		if (optarg && c != 'd' && c != 'p' && hp_parse_size(optarg, &v) < 0)
			usage();
		switch (c) {
		case 'd': a->dir = optarg; break;
		case 'p': a->pmem_dir = optarg; break;
		case 's': a->size = v; break;
		case 'q': a->qd = (unsigned)v; break;
		case 'c': a->chunk = v; break;
		case 'i': a->iops_size = v; break;
		case 'n': a->iops_ops = v; break;
		case 'P': a->pmem_size = v; break;
		case 'F': a->fio = 0; break;
		default: usage();
		}
	}
	if (!a->dir || a->size < a->chunk || a->qd == 0)
		usage();
	if (a->fio && system("fio --version >/dev/null 2>&1") != 0)
		a->fio = 0;
}

int main(int argc, char **argv)
{
	struct args a;
	struct hs_store_stats s;
	double ws[2], rs[2], w, r, io, fixed, pw, pr, mc, fw = -1, fr = -1, fio_iops = -1;
	char path[1024];

	parse(argc, argv, &a);
	stream(&a, ws, rs, &s);
	w = ws[1];
	r = rs[1];
	fprintf(stderr, "store nvme: write %.0f MB/s, read %.0f MB/s (crc32c on, qd %u, chunk %" PRIu64
			" KiB; first pass: write %.0f, read %.0f); latency p50 %.0f us p99 %.0f us p999 %.0f us\n",
		w, r, a.qd, a.chunk >> 10, ws[0], rs[0],
		hs_lat_percentile(&s.tier[1], 0.5), hs_lat_percentile(&s.tier[1], 0.99),
		hs_lat_percentile(&s.tier[1], 0.999));
	io = iops(&a, &fixed);
	fprintf(stderr, "store nvme: random 4 KiB-chunk reads %.0f IOPS (%.0f%% through registered buffers)\n", io,
		100 * fixed);
	snprintf(path, sizeof path, "%s/hpdlf-bench-store.nvme", a.dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/hpdlf-bench-iops.nvme", a.dir);
	unlink(path);
	pmem_bw(&a, &pw, &pr, &mc);
	fprintf(stderr, "store pmem: write %.2f GB/s, read %.2f GB/s, memcpy %.2f GB/s\n", pw, pr, mc);
	if (a.fio) {
		fw = hp_bench_fio(a.dir, "write", "1M", a.size, a.qd, 0);
		fr = hp_bench_fio(a.dir, "read", "1M", a.size, a.qd, 0);
		fio_iops = hp_bench_fio(a.dir, "randread", "4k", a.size, a.qd, 1);
		hp_bench_fio_cleanup(a.dir);
		fprintf(stderr, "fio: write %.0f MB/s, read %.0f MB/s, randread 4k %.0f IOPS\n", fw, fr, fio_iops);
	}
	printf("{\"size\":%" PRIu64 ",\"chunk\":%" PRIu64 ",\"qd\":%u,\"write_MBps\":%.1f,\"read_MBps\":%.1f,"
	       "\"write_cold_MBps\":%.1f,\"read_cold_MBps\":%.1f,"
	       "\"randread_4k_iops\":%.0f,\"pmem_write_GBps\":%.3f,\"pmem_read_GBps\":%.3f,\"memcpy_GBps\":%.3f,"
	       "\"pmem_vs_memcpy\":%.3f,\"randread_fixed_share\":%.3f",
	       a.size, a.chunk, a.qd, w, r, ws[0], rs[0], io, pw, pr, mc, (pw < pr ? pw : pr) / mc, fixed);
	if (fw > 0 && fr > 0)
		printf(",\"fio_write_MBps\":%.1f,\"fio_read_MBps\":%.1f,\"fio_randread_4k_iops\":%.0f,"
		       "\"write_vs_fio\":%.3f,\"read_vs_fio\":%.3f,\"iops_vs_fio\":%.3f",
		       fw, fr, fio_iops, w / fw, r / fr, fio_iops > 0 ? io / fio_iops : 0);
	printf("}\n");
	return 0;
}
