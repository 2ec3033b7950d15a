/* Remote-tier benchmark: 4 MiB chunk write/read bandwidth through the remote
 * tier (an hpdlf-store daemon on 127.0.0.1) against a raw fi_write/fi_read
 * loop on the same provider in the same run; the cost of registering one
 * 4 MiB extent (the daemon registers each extent on its own) and the write
 * bandwidth when every chunk is allocated, written and freed (the spill
 * pattern: each extent then costs an Alloc, a registration and a Free);
 * then a control-path load test (8 clients alloc/lookup/free against one
 * daemon, RSS before and after).
 * Ends with one JSON line.
 *
 *   bench_remote [--seconds S] [--control-seconds S] [--qd N] [--store-exe PATH]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/remote/fabric.h"
#include "store/remote/remote.h"

#define CHUNK (4u << 20)
#define NCHUNKS 64              /* 256 MiB working set */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- raw libfabric loop --- */

struct raw_info {
	uint8_t addr[256];
	size_t addrlen;
	uint64_t base, key;
	char prov[64];
	double reg_us;          /* median fi_mr_reg + fi_close of one 4 MiB extent */
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* What a per-extent registration costs the daemon: register and close each
 * chunk of the region in turn, as Alloc and Free do. */
static double reg_cost_us(struct hs_fab *f, char *mem)
{
	double t[4 * NCHUNKS];

	for (int i = 0; i < 4 * NCHUNKS; i++) {
		struct fid_mr *mr;
		double t0 = now_s();
		if (hs_fab_mr_reg(f, mem + (size_t)(i % NCHUNKS) * CHUNK, CHUNK, FI_REMOTE_READ | FI_REMOTE_WRITE,
				  &mr) < 0)
			return -1;
		fi_close(&mr->fid);
		t[i] = (now_s() - t0) * 1e6;
	}
	qsort(t, 4 * NCHUNKS, sizeof *t, cmp_double);
	return t[2 * NCHUNKS];
}

static void raw_target(int wfd, int rfd)
{
	struct hs_fab f;
	struct fid_mr *mr;
	struct raw_info ri = { 0 };
	void *mem = mmap(NULL, (size_t)NCHUNKS * CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char c;

	if (mem == MAP_FAILED || hs_fab_open(&f, NULL, 1, "127.0.0.1") < 0 ||
	    hs_fab_mr_reg(&f, mem, (size_t)NCHUNKS * CHUNK, FI_REMOTE_READ | FI_REMOTE_WRITE, &mr) < 0)
		_exit(1);
	ri.reg_us = reg_cost_us(&f, mem);
	memcpy(ri.addr, f.addr, f.addrlen);
	ri.addrlen = f.addrlen;
	ri.base = (f.mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)mem : 0;
	ri.key = fi_mr_key(mr);
	snprintf(ri.prov, sizeof ri.prov, "%s", f.prov);
	if (write(wfd, &ri, sizeof ri) != (ssize_t)sizeof ri)
		_exit(1);
	fcntl(rfd, F_SETFL, O_NONBLOCK);
	while (read(rfd, &c, 1) != 1) {
		struct fi_cq_entry e[8];
		fi_cq_sread(f.cq, e, 8, NULL, 100); /* progress for the initiator's RMA */
	}
	_exit(0);
}

/* Move bytes for `secs` with qd operations in flight; GB/s. */
static double raw_loop(struct hs_fab *f, fi_addr_t fa, const struct raw_info *ri, void *buf, struct fid_mr *lmr,
		       int write_op, uint64_t flags, int qd, double secs)
{
	struct fi_context2 ctx[64];
	void *desc = lmr ? fi_mr_desc(lmr) : NULL;
	uint64_t done = 0, posted = 0;
	double t0 = now_s(), t1;

	for (;;) {
		t1 = now_s();
		int stop = t1 - t0 >= secs;
		while (!stop && posted - done < (uint64_t)qd) {
			size_t k = posted % NCHUNKS;
			struct iovec iov = { (char *)buf + k * CHUNK, CHUNK };
			struct fi_rma_iov rma = { ri->base + k * CHUNK, CHUNK, ri->key };
			struct fi_msg_rma m = { .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = fa,
						.rma_iov = &rma, .rma_iov_count = 1, .context = &ctx[posted % 64] };
			ssize_t rc = write_op ? fi_writemsg(f->ep, &m, FI_COMPLETION | flags)
					      : fi_readmsg(f->ep, &m, FI_COMPLETION);
			if (rc == -FI_EAGAIN)
				break;
			if (rc)
				return -1;
			posted++;
		}
		if (stop && done == posted)
			break;
		struct fi_cq_entry e[16];
		ssize_t n = fi_cq_read(f->cq, e, 16);
		if (n > 0)
			done += (uint64_t)n;
		else if (n == -FI_EAVAIL)
			return -1;
	}
	return (double)done * CHUNK / (now_s() - t0) / 1e9;
}

struct raw_result {
	double write, write_dc, read, reg_us;
	char prov[64];
};

static int raw_bench(int qd, double secs, struct raw_result *res)
{
	int to_parent[2], to_child[2];
	struct raw_info ri;
	struct hs_fab f;
	struct fid_mr *lmr = NULL;
	fi_addr_t fa;
	void *buf;
	pid_t pid;

	if (pipe(to_parent) || pipe(to_child))
		return -1;
	pid = fork();
	if (pid == 0)
		raw_target(to_parent[1], to_child[0]);
	if (read(to_parent[0], &ri, sizeof ri) != (ssize_t)sizeof ri)
		return -1;
	if (hs_fab_open(&f, ri.prov, 0, NULL) < 0 || hs_fab_av_insert(&f, ri.addr, ri.addrlen, &fa) < 0)
		return -1;
	if (posix_memalign(&buf, 4096, (size_t)NCHUNKS * CHUNK))
		return -1;
	memset(buf, 7, (size_t)NCHUNKS * CHUNK);
	if ((f.mr_mode & FI_MR_LOCAL) &&
	    hs_fab_mr_reg(&f, buf, (size_t)NCHUNKS * CHUNK, FI_READ | FI_WRITE, &lmr) < 0)
		return -1;
	snprintf(res->prov, sizeof res->prov, "%s", ri.prov);
	res->reg_us = ri.reg_us;
	res->write = raw_loop(&f, fa, &ri, buf, lmr, 1, 0, qd, secs);
	res->write_dc = raw_loop(&f, fa, &ri, buf, lmr, 1, FI_DELIVERY_COMPLETE, qd, secs);
	res->read = raw_loop(&f, fa, &ri, buf, lmr, 0, 0, qd, secs);
	if (lmr)
		fi_close(&lmr->fid);
	hs_fab_close(&f);
	if (write(to_child[1], "x", 1) != 1)
		kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	free(buf);
	return 0;
}

/* --- the daemon and the tier --- */

struct daemon_proc {
	pid_t pid;
	char dir[256], token[300], port_file[300], addr[64];
};

static int start_daemon(const char *exe, const char *dram, struct daemon_proc *d)
{
	const char *tmp = getenv("TMPDIR");
	uint8_t key[32];
	int fd;

	snprintf(d->dir, sizeof d->dir, "%s/bench-remote-XXXXXX", tmp ? tmp : "/tmp");
	if (!mkdtemp(d->dir))
		return -1;
	snprintf(d->token, sizeof d->token, "%s/token", d->dir);
	snprintf(d->port_file, sizeof d->port_file, "%s/port", d->dir);
	fd = open(d->token, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	for (size_t i = 0; i < sizeof key; i++)
		key[i] = (uint8_t)(rand() ^ getpid() ^ (int)i * 131);
	if (fd < 0 || write(fd, key, sizeof key) != (ssize_t)sizeof key)
		return -1;
	close(fd);
	d->pid = fork();
	if (d->pid == 0) {
		execl(exe, exe, "--listen", "127.0.0.1:0", "--dram", dram, "--token-file", d->token, "--port-file",
		      d->port_file, "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	for (int k = 0; k < 1000; k++) {
		FILE *f = fopen(d->port_file, "r");
		if (f) {
			int ok = fscanf(f, "%63s", d->addr) == 1;
			fclose(f);
			if (ok)
				return 0;
		}
		usleep(10000);
	}
	return -1;
}

static void stop_daemon(struct daemon_proc *d)
{
	char cmd[300];

	kill(d->pid, SIGTERM);
	waitpid(d->pid, NULL, 0);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", d->dir);
}

static int open_tier(const struct daemon_proc *d, struct hs_tier **t)
{
	struct hs_remote_opts o;
	struct hs_tier_config cfg = { .name = "bench" };

	hs_remote_opts_init(&o);
	o.endpoints = d->addr;
	o.token_file = d->token;
	cfg.ext = &o;
	return hs_tier_remote_open(&cfg, t);
}

struct batch {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int left, err;
};

static void batch_done(struct hs_io *io)
{
	struct batch *b = io->arg;

	pthread_mutex_lock(&b->mu);
	if (io->res)
		b->err = io->res;
	if (--b->left == 0)
		pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

/* Rounds of NCHUNKS transfers submitted together, for `secs`; GB/s. */
static double tier_loop(struct hs_tier *t, const uint64_t *addr, void *buf, enum hs_io_op op, double secs)
{
	struct hs_io io[NCHUNKS], *p[NCHUNKS];
	uint64_t bytes = 0;
	double t0 = now_s();

	do { /* at least one round */
		struct batch b = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NCHUNKS, 0 };
		for (int i = 0; i < NCHUNKS; i++) {
			io[i] = (struct hs_io){ .op = op, .addr = addr[i], .buf = (char *)buf + (size_t)i * CHUNK,
						.len = CHUNK, .done = batch_done, .arg = &b };
			p[i] = &io[i];
		}
		if (t->ops->submit(t, p, NCHUNKS) != NCHUNKS)
			return -1;
		pthread_mutex_lock(&b.mu);
		while (b.left)
			pthread_cond_wait(&b.cv, &b.mu);
		pthread_mutex_unlock(&b.mu);
		if (b.err)
			return -1;
		bytes += (uint64_t)NCHUNKS * CHUNK;
	} while (now_s() - t0 < secs);
	return (double)bytes / (now_s() - t0) / 1e9;
}

/* Rounds of NCHUNKS fresh extents allocated, written together and freed,
 * for `secs`; GB/s of data written. */
static double churn_loop(struct hs_tier *t, void *buf, double secs)
{
	uint64_t addr[NCHUNKS], bytes = 0;
	double t0 = now_s();

	while (now_s() - t0 < secs) {
		for (int i = 0; i < NCHUNKS; i++)
			if (t->ops->place(t, CHUNK, &addr[i]) < 0)
				return -1;
		if (tier_loop(t, addr, buf, HS_IO_WRITE, 0) < 0)
			return -1;
		for (int i = 0; i < NCHUNKS; i++)
			if (t->ops->release(t, addr[i], CHUNK) < 0)
				return -1;
		bytes += (uint64_t)NCHUNKS * CHUNK;
	}
	return (double)bytes / (now_s() - t0) / 1e9;
}

static int tier_bench(const struct daemon_proc *d, double secs, double *wr, double *rd, double *churn,
		      int *verified)
{
	struct hs_tier *t;
	uint64_t addr[NCHUNKS];
	void *buf, *back;

	if (open_tier(d, &t) < 0)
		return -1;
	if (posix_memalign(&buf, 4096, (size_t)NCHUNKS * CHUNK) || posix_memalign(&back, 4096, (size_t)NCHUNKS * CHUNK))
		return -1;
	for (size_t i = 0; i < (size_t)NCHUNKS * CHUNK / 8; i++)
		((uint64_t *)buf)[i] = i * 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < NCHUNKS; i++)
		if (t->ops->place(t, CHUNK, &addr[i]) < 0)
			return -1;
	*wr = tier_loop(t, addr, buf, HS_IO_WRITE, secs);
	*rd = tier_loop(t, addr, back, HS_IO_READ, secs);
	*verified = memcmp(buf, back, (size_t)NCHUNKS * CHUNK) == 0;
	for (int i = 0; i < NCHUNKS; i++)
		t->ops->release(t, addr[i], CHUNK);
	*churn = churn_loop(t, buf, secs);
	t->ops->close(t);
	free(buf);
	free(back);
	return 0;
}

/* --- control-path load --- */

static pthread_barrier_t ctl_ready;

struct ctl_worker {
	const struct daemon_proc *d;
	double secs;
	uint64_t ops, errors;
	pthread_t th;
};

static void *ctl_main(void *arg)
{
	struct ctl_worker *w = arg;
	struct hs_tier *t;
	struct hs_remote_named n;
	int ok = open_tier(w->d, &t) == 0;
	double t0;

	pthread_barrier_wait(&ctl_ready); /* all connected: the load starts together */
	if (!ok) {
		w->errors++;
		return NULL;
	}
	t0 = now_s();
	while (now_s() - t0 < w->secs) {
		uint64_t a;
		if (t->ops->place(t, CHUNK, &a) < 0)
			w->errors++;
		else if (t->ops->release(t, a, CHUNK) < 0)
			w->errors++;
		if (hs_remote_lookup(t, "bench-probe", &n) < 0)
			w->errors++;
		w->ops += 3;
	}
	t->ops->close(t);
	return NULL;
}

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static int ctl_bench(const struct daemon_proc *d, double secs, uint64_t *ops, uint64_t *errors, long *rss0, long *rss1)
{
	struct ctl_worker w[8];
	struct hs_tier *t;
	void *buf;

	/* One named extent to look up. */
	if (open_tier(d, &t) < 0 || posix_memalign(&buf, 4096, 4096))
		return -1;
	memset(buf, 0, 4096);
	if (hs_remote_put(t, "bench-probe", buf, 4096, NULL, 0) < 0)
		return -1;
	free(buf);
	pthread_barrier_init(&ctl_ready, NULL, 9);
	for (int i = 0; i < 8; i++) {
		w[i] = (struct ctl_worker){ .d = d, .secs = secs };
		pthread_create(&w[i].th, NULL, ctl_main, &w[i]);
	}
	pthread_barrier_wait(&ctl_ready);
	usleep((useconds_t)(secs * 0.1 * 1e6)); /* after warm-up */
	*rss0 = rss_kb(d->pid);
	*ops = *errors = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(w[i].th, NULL);
		*ops += w[i].ops;
		*errors += w[i].errors;
	}
	*rss1 = rss_kb(d->pid);
	t->ops->close(t);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "seconds", required_argument, NULL, 's' }, { "control-seconds", required_argument, NULL, 'c' },
		{ "qd", required_argument, NULL, 'q' },      { "store-exe", required_argument, NULL, 'e' },
		{ 0, 0, 0, 0 },
	};
	double secs = 2, csecs = 60, twr = 0, trd = 0, churn = 0;
	int qd = 8, c, verified = 0;
	const char *exe = HPDLF_STORE_EXE;
	struct raw_result raw = { 0 };
	struct daemon_proc d;
	uint64_t ops = 0, errors = 0;
	long rss0 = 0, rss1 = 0;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == 's')
			secs = atof(optarg);
		else if (c == 'c')
			csecs = atof(optarg);
		else if (c == 'q')
			qd = atoi(optarg) < 1 ? 1 : atoi(optarg) > 64 ? 64 : atoi(optarg);
		else if (c == 'e')
			exe = optarg;
		else
			return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (raw_bench(qd, secs, &raw) < 0) {
		fprintf(stderr, "bench_remote: raw libfabric loop failed\n");
		return 1;
	}
	if (start_daemon(exe, "512M", &d) < 0) {
		fprintf(stderr, "bench_remote: cannot start %s\n", exe);
		return 1;
	}
	int rc = tier_bench(&d, secs, &twr, &trd, &churn, &verified);
	if (rc == 0 && csecs > 0)
		rc = ctl_bench(&d, csecs, &ops, &errors, &rss0, &rss1);
	stop_daemon(&d);
	if (rc < 0) {
		fprintf(stderr, "bench_remote: %s\n", hp_errmsg());
		return 1;
	}
	fprintf(stderr, "raw %s: write %.2f GB/s (delivery-complete %.2f), read %.2f GB/s\n", raw.prov, raw.write,
		raw.write_dc, raw.read);
	fprintf(stderr, "remote tier: write %.2f GB/s, read %.2f GB/s (data %s); allocate-write-free %.2f GB/s\n",
		twr, trd, verified ? "verified" : "WRONG", churn);
	fprintf(stderr, "registration of one 4 MiB extent: %.1f us (%.1f%% of its write time)\n", raw.reg_us,
		raw.write_dc > 0 ? 100 * raw.reg_us / (CHUNK / raw.write_dc / 1e3) : 0);
	fprintf(stderr, "control: %" PRIu64 " ops in %.0f s by 8 clients, %" PRIu64 " errors, daemon RSS %ld -> %ld kB\n",
		ops, csecs, errors, rss0, rss1);
	printf("{\"bench\":\"remote\",\"provider\":\"%s\",\"chunk\":%u,\"qd\":%d,"
	       "\"raw_write_gbs\":%.3f,\"raw_write_dc_gbs\":%.3f,\"raw_read_gbs\":%.3f,"
	       "\"tier_write_gbs\":%.3f,\"tier_read_gbs\":%.3f,\"write_ratio\":%.3f,\"read_ratio\":%.3f,"
	       "\"reg_us\":%.2f,\"churn_write_gbs\":%.3f,\"churn_ratio\":%.3f,"
	       "\"verified\":%s,\"ctl_seconds\":%.0f,\"ctl_ops\":%" PRIu64 ",\"ctl_errors\":%" PRIu64
	       ",\"rss_kb_start\":%ld,\"rss_kb_end\":%ld}\n",
	       raw.prov, CHUNK, qd, raw.write, raw.write_dc, raw.read, twr, trd, raw.write > 0 ? twr / raw.write : 0,
	       raw.read > 0 ? trd / raw.read : 0, raw.reg_us, churn, twr > 0 ? churn / twr : 0, verified ? "true" : "false", csecs, ops, errors, rss0, rss1);
	return verified && errors == 0 ? 0 : 1;
}
