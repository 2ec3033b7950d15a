/* NVMe tier: a file or block device driven through io_uring with O_DIRECT.
 * Submissions are batched (one io_uring_enter per submit() call).  The file
 * descriptor is registered (fixed file) and so are the store's DRAM frames
 * (fixed buffers, READ_FIXED/WRITE_FIXED: no page pinning per request).
 * Completions are reaped by whichever thread gets there first: a thread
 * waiting for its own requests (poll), or the completion thread, which
 * sleeps in io_uring_wait_cqe but stays off the ring while waiters are
 * reaping, so a waiter's completion costs no extra wake-up.  No I/O goes
 * through the page cache unless the filesystem refuses O_DIRECT and the
 * caller allowed the buffered fallback. */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/tier.h"
#include "store/tier_uring.h"

#define SPILL_DEFAULT_SIZE (64ull << 30)
#define REAP_BATCH 64
#define POLL_QUIET_NS 2000000ull        /* the CQ thread stays off the ring this long after a poll */

struct uring_tier {
	struct hs_tier base;
	int fd;
	int direct;
	struct io_uring ring;
	unsigned depth;
	unsigned inflight;
	pthread_mutex_t sq_mu;          /* SQ side, inflight, regbase */
	pthread_cond_t sq_cv;           /* inflight dropped / all done */
	pthread_mutex_t cq_mu;          /* CQ consumption */
	pthread_cond_t cq_cv;
	unsigned pollers;               /* threads inside poll (cq_mu) */
	uint64_t last_poll_ns;          /* (cq_mu) */
	int stop_seen;                  /* (cq_mu) the stop NOP was reaped */
	pthread_t cq_thread;
	int stopping;
	int sparse;                     /* a sparse fixed-buffer table exists */
	void *regbase[HS_MEM_SLOTS];    /* address each region was registered at */
	uint64_t fixed_ios;
	uint64_t requests;              /* requests queued, a merged one once (sq_mu) */
	int readonly;                   /* a file tier: writes refused, EOF ends the space */
	uint64_t fsize;                 /* readonly: the file's size */
};

/* user_data of an SQE whose request was completed at submit (see
 * fail_unconsumed); NULL is the stop NOP of uring_close. */
static const char nop_marker;

/* A queued request: its SQE and the SQ sequence number it went in at. */
struct queued {
	struct io_uring_sqe *sqe;
	struct hs_io *io;
	unsigned seq;
};

/* This thread's plug (hs_tier_uring_plug): while depth > 0, the SQEs it
 * queues on one ring wait in that ring's SQ for the outermost unplug (or
 * the next io_uring_enter on the ring, any thread's), so loads and
 * write-backs started together cost one io_uring_enter, one device
 * notify (lenet at a quarter: ~20 us of CPU each under a VM).  Only a few
 * are kept (REAP_BATCH, and the ring less than half full), so no thread
 * waits in queue_one for room that requests never submitted hold. */
static __thread struct {
	int depth;
	struct uring_tier *u;   /* the ring holding them */
	int nq;
	struct queued q[REAP_BATCH];
} plug;

static void submit_round(struct uring_tier *u, const struct queued *q, int nq);

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void finish(struct uring_tier *u, struct hs_io *io, int res)
{
	/* a file tier's last block ends at the end of the file, not at HS_IO_ALIGN */
	if (res >= 0 && ((size_t)res == io->len || (u->readonly && io->addr + (uint64_t)res == u->fsize)))
		io->res = 0;
	else if (res >= 0)
		io->res = io->op == HS_IO_READ ? -ENODATA : -ENOSPC;
	else
		io->res = res;
	if (!u->direct && io->op == HS_IO_READ)
		posix_fadvise(u->fd, io->addr, io->len, POSIX_FADV_DONTNEED);
	io->done(io);
}

/* Consume the CQEs ready now and complete their requests (cq_mu held). */
static int reap(struct uring_tier *u)
{
	struct io_uring_cqe *cqes[REAP_BATCH];
	struct hs_io *ios[REAP_BATCH];
	int res[REAP_BATCH], k = 0;
	unsigned n = io_uring_peek_batch_cqe(&u->ring, cqes, REAP_BATCH);

	for (unsigned i = 0; i < n; i++) {
		struct hs_io *io = io_uring_cqe_get_data(cqes[i]);
		if (io == (void *)&nop_marker)
			continue; /* a request fail_unconsumed completed already */
		if (!io) {
			u->stop_seen = 1;
			continue;
		}
		ios[k] = io;
		res[k++] = cqes[i]->res;
	}
	io_uring_cq_advance(&u->ring, n);
	for (int i = 0; i < k; i++)
		finish(u, ios[i], res[i]);
	if (k) {
		pthread_mutex_lock(&u->sq_mu);
		u->inflight -= (unsigned)k;
		pthread_cond_broadcast(&u->sq_cv);
		pthread_mutex_unlock(&u->sq_mu);
	}
	return k;
}

static void *cq_main(void *arg)
{
	struct uring_tier *u = arg;
	struct io_uring_cqe *cqe;

	for (;;) {
		pthread_mutex_lock(&u->cq_mu);
		while (!u->stop_seen && (u->pollers || mono_ns() - u->last_poll_ns < POLL_QUIET_NS)) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&u->cq_cv, &u->cq_mu, &ts);
			if (!u->pollers)
				reap(u); /* completions nobody polls for */
		}
		int n = reap(u);
		int stop = u->stop_seen;
		pthread_mutex_unlock(&u->cq_mu);
		if (stop)
			break;
		if (n == 0 && io_uring_wait_cqe(&u->ring, &cqe) < 0)
			usleep(100); /* -EINTR or a broken ring: look again */
	}
	return NULL;
}

static int uring_poll(struct hs_tier *t, int wait)
{
	struct uring_tier *u = (struct uring_tier *)t;
	struct io_uring_cqe *cqe;
	int n;

	if (plug.u == u) { /* this thread's own requests may be among those waited for */
		pthread_mutex_lock(&u->sq_mu);
		submit_round(u, NULL, 0);
		pthread_mutex_unlock(&u->sq_mu);
	}
	pthread_mutex_lock(&u->cq_mu);
	u->pollers++;
	n = reap(u);
	pthread_mutex_unlock(&u->cq_mu);
	if (n == 0 && wait) {
		struct __kernel_timespec ts = { 0, 10000000 };
		pthread_mutex_lock(&u->sq_mu);
		unsigned inflight = u->inflight;
		pthread_mutex_unlock(&u->sq_mu);
		if (inflight)
			io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts);
		pthread_mutex_lock(&u->cq_mu);
		n = reap(u);
		pthread_mutex_unlock(&u->cq_mu);
	}
	pthread_mutex_lock(&u->cq_mu);
	u->pollers--;
	u->last_poll_ns = mono_ns();
	pthread_mutex_unlock(&u->cq_mu);
	return n;
}

static void uring_close(struct hs_tier *t)
{
	struct uring_tier *u = (struct uring_tier *)t;
	struct io_uring_sqe *sqe;

	pthread_mutex_lock(&u->sq_mu);
	if (plug.u == u)
		submit_round(u, NULL, 0);
	while (u->inflight)
		pthread_cond_wait(&u->sq_cv, &u->sq_mu);
	u->stopping = 1;
	while (!(sqe = io_uring_get_sqe(&u->ring)))
		io_uring_submit(&u->ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	io_uring_submit(&u->ring);
	pthread_mutex_unlock(&u->sq_mu);
	pthread_cond_signal(&u->cq_cv);
	pthread_join(u->cq_thread, NULL);
	io_uring_queue_exit(&u->ring);
	close(u->fd);
	pthread_mutex_destroy(&u->sq_mu);
	pthread_cond_destroy(&u->sq_cv);
	pthread_mutex_destroy(&u->cq_mu);
	pthread_cond_destroy(&u->cq_cv);
	free(u);
}

/* Queue one request; the caller holds sq_mu and has room in the SQ (or
 * none of its own requests queued, so a full SQ can be pushed here). */
static struct queued queue_one(struct uring_tier *u, struct hs_io *io)
{
	struct io_uring_sqe *sqe;

	while (u->inflight >= 2 * u->depth)
		pthread_cond_wait(&u->sq_cv, &u->sq_mu);
	while (!(sqe = io_uring_get_sqe(&u->ring)))
		io_uring_submit(&u->ring);
	unsigned slot = io->mem_slot;
	u->requests++;
	if (io->niov && io->op == HS_IO_READ) {
		io_uring_prep_readv(sqe, 0, io->iov, io->niov, io->addr);
	} else if (io->niov) {
		io_uring_prep_writev(sqe, 0, io->iov, io->niov, io->addr);
	} else if (slot && slot <= HS_MEM_SLOTS && u->regbase[slot - 1]) {
		char *a = (char *)u->regbase[slot - 1] + io->mem_off;
		if (io->op == HS_IO_READ)
			io_uring_prep_read_fixed(sqe, 0, a, io->len, io->addr, (int)slot - 1);
		else
			io_uring_prep_write_fixed(sqe, 0, a, io->len, io->addr, (int)slot - 1);
		u->fixed_ios++;
	} else if (io->op == HS_IO_READ) {
		io_uring_prep_read(sqe, 0, io->buf, io->len, io->addr);
	} else {
		io_uring_prep_write(sqe, 0, io->buf, io->len, io->addr);
	}
	sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, io);
	u->inflight++;
	return (struct queued){ sqe, io, u->ring.sq.sqe_tail - 1 };
}

/* io_uring_enter until the kernel took every queued SQE (sq_mu held).  A
 * hard failure here means the ring itself is broken. */
static int submit_all(struct uring_tier *u)
{
	for (int tries = 0; io_uring_sq_ready(&u->ring) > 0; tries++) {
		int rc = hs_fault_check(HS_FAULT_SUBMIT);
		if (rc == 0)
			rc = io_uring_submit(&u->ring);
		if (rc >= 0 || rc == -EINTR)
			continue;
		if ((rc == -EAGAIN || rc == -EBUSY) && tries < 1000) {
			/* CQ overflow pressure: completions drain on the CQ thread */
			pthread_mutex_unlock(&u->sq_mu);
			usleep(100);
			pthread_mutex_lock(&u->sq_mu);
			continue;
		}
		return hp_error(rc, "%s: io_uring_submit: %s", u->base.path, strerror(-rc));
	}
	return 0;
}

/* io_uring_enter failed with SQEs of this batch still in the SQ (sq_mu
 * held).  The ones the kernel took (sequence before the SQ head) complete
 * through the CQ.  Each one it did not take becomes a NOP the reaper
 * ignores (the SQ tail is the kernel's already: it cannot be taken back)
 * and its request completes here with the error.  So every request of the
 * batch completes exactly once: inline before, through the CQ, or here. */
static void fail_unconsumed(struct uring_tier *u, const struct queued *q, int nq, int err)
{
	unsigned head = io_uring_smp_load_acquire(u->ring.sq.khead);
	struct hs_io *failed[REAP_BATCH];
	int k = 0;

	for (int i = 0; i < nq; i++) {
		if ((int)(q[i].seq - head) < 0)
			continue;
		failed[k++] = q[i].io;
		io_uring_prep_nop(q[i].sqe);
		io_uring_sqe_set_data(q[i].sqe, (void *)&nop_marker);
	}
	u->inflight -= (unsigned)k;
	pthread_cond_broadcast(&u->sq_cv);
	pthread_mutex_unlock(&u->sq_mu);
	for (int i = 0; i < k; i++) {
		failed[i]->res = err;
		failed[i]->done(failed[i]);
	}
	pthread_mutex_lock(&u->sq_mu);
}

/* io_uring plugs the block layer for a submission of more than two SQEs
 * only (io_submit_state_start: need_plug = max_ios > 2); below that each
 * request rings the device's doorbell alone, on this project's VM a virtio
 * notify (iowrite16, a VM exit; ~6% of LeNet's CPU trained at a quarter).
 * Two requests therefore go with a NOP that posts no completion
 * (IOSQE_CQE_SKIP_SUCCESS; were it to fail, its CQE is a marker's, which
 * reap skips): three SQEs, one plug, one doorbell.  LeNet at a quarter:
 * 27 plug flushes (doorbells) a step -> 21.  One request alone gains
 * nothing from a plug.  sq_mu held. */
static void pad_to_plug(struct uring_tier *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	if (!sqe)
		return;
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, (void *)&nop_marker);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

/* Enter the ring for this round's q[0..nq) and the plug's requests on it
 * (sq_mu held); the plug is emptied. */
static void submit_round(struct uring_tier *u, const struct queued *q, int nq)
{
	struct queued all[2 * REAP_BATCH];
	int na = 0;

	if (plug.u == u) {
		memcpy(all, plug.q, (size_t)plug.nq * sizeof *all);
		na = plug.nq;
		plug.nq = 0;
		plug.u = NULL;
	}
	memcpy(all + na, q, (size_t)nq * sizeof *all);
	na += nq;
	if (na == 2 && io_uring_sq_ready(&u->ring) == 2)
		pad_to_plug(u);
	int rc = na ? submit_all(u) : 0;
	if (rc < 0)
		fail_unconsumed(u, all, na, rc);
}

void hs_tier_uring_plug(int on)
{
	if (on) {
		plug.depth++;
		return;
	}
	if (plug.depth > 0 && --plug.depth == 0 && plug.u) {
		struct uring_tier *u = plug.u;
		pthread_mutex_lock(&u->sq_mu);
		submit_round(u, NULL, 0);
		pthread_mutex_unlock(&u->sq_mu);
	}
}

/* Accepts all n and completes each exactly once: requests refused or hit
 * by a fault complete inline, the rest through the CQ or, if the ring
 * breaks, fail_unconsumed.  Requests go in rounds that fit the SQ, so a
 * failed io_uring_enter leaves only this round's SQEs to account for. */
static int uring_submit(struct hs_tier *t, struct hs_io **ios, int n)
{
	struct uring_tier *u = (struct uring_tier *)t;
	struct queued q[REAP_BATCH];
	int i = 0;

	pthread_mutex_lock(&u->sq_mu);
	while (i < n) {
		int nq = 0;
		for (; i < n && nq < REAP_BATCH; i++) {
			struct hs_io *io = ios[i];
			if (nq && (io_uring_sq_space_left(&u->ring) == 0 || u->inflight >= 2 * u->depth))
				break;
			int inj = hs_fault_io(io);
			if (inj || io->addr + io->len > t->capacity || (u->readonly && io->op == HS_IO_WRITE)) {
				pthread_mutex_unlock(&u->sq_mu);
				io->res = inj ? inj : io->op == HS_IO_WRITE && u->readonly ? -EROFS : -EINVAL;
				io->done(io);
				pthread_mutex_lock(&u->sq_mu);
				continue;
			}
			q[nq++] = queue_one(u, io);
		}
		if (nq && plug.depth && (!plug.u || plug.u == u) && plug.nq + nq <= REAP_BATCH &&
		    u->inflight < u->depth / 2) {
			memcpy(plug.q + plug.nq, q, (size_t)nq * sizeof *q);
			plug.nq += nq;
			plug.u = u;
			continue; /* entered at the unplug */
		}
		if (nq)
			submit_round(u, q, nq);
	}
	pthread_mutex_unlock(&u->sq_mu);
	return n;
}

static int uring_flush(struct hs_tier *t)
{
	struct uring_tier *u = (struct uring_tier *)t;

	if (fdatasync(u->fd) < 0)
		return hp_error(-errno, "%s: fdatasync: %s", t->path, strerror(errno));
	return 0;
}

static int uring_stats(struct hs_tier *t, struct hs_tier_stats *st)
{
	st->capacity = t->capacity - t->reserved;
	return 0;
}

static int uring_register_mem(struct hs_tier *t, unsigned slot, void *addr, size_t len)
{
	struct uring_tier *u = (struct uring_tier *)t;
	struct iovec iov = { addr, len };
	int rc;

	if (!u->sparse || slot >= HS_MEM_SLOTS)
		return -ENOTSUP;
	pthread_mutex_lock(&u->sq_mu);
	rc = io_uring_register_buffers_update_tag(&u->ring, slot, &iov, NULL, 1);
	if (rc >= 0)
		u->regbase[slot] = addr;
	pthread_mutex_unlock(&u->sq_mu);
	return rc < 0 ? rc : 0;
}

int hs_tier_file_open(const char *path, struct hs_tier **out)
{
	struct hs_tier_config cfg = { .name = "file", .path = path, .queue_depth = 32, .flags = HS_TIER_F_READONLY };

	return hs_tier_nvme_open(&cfg, out);
}

uint64_t hs_tier_file_size(struct hs_tier *t)
{
	return t->ops->submit == uring_submit ? ((struct uring_tier *)t)->fsize : 0;
}

int hs_tier_file_direct(struct hs_tier *t)
{
	return t->ops->submit == uring_submit && ((struct uring_tier *)t)->direct;
}

uint64_t hs_tier_nvme_fixed_ios(struct hs_tier *t)
{
	struct uring_tier *u = (struct uring_tier *)t;
	uint64_t n;

	if (t->ops->submit != uring_submit)
		return 0;
	pthread_mutex_lock(&u->sq_mu);
	n = u->fixed_ios;
	pthread_mutex_unlock(&u->sq_mu);
	return n;
}

uint64_t hs_tier_nvme_requests(struct hs_tier *t)
{
	struct uring_tier *u = (struct uring_tier *)t;
	uint64_t n;

	if (t->ops->submit != uring_submit)
		return 0;
	pthread_mutex_lock(&u->sq_mu);
	n = u->requests;
	pthread_mutex_unlock(&u->sq_mu);
	return n;
}

uint32_t hs_tier_nvme_sq_head(struct hs_tier *t)
{
	struct uring_tier *u = (struct uring_tier *)t;
	uint32_t head;

	if (t->ops->submit != uring_submit)
		return 0;
	pthread_mutex_lock(&u->sq_mu);
	head = io_uring_smp_load_acquire(u->ring.sq.khead);
	pthread_mutex_unlock(&u->sq_mu);
	return head;
}

static const struct hs_tier_ops uring_ops = {
	.kind = "nvme",
	.close = uring_close,
	.submit = uring_submit,
	.flush = uring_flush,
	.stats = uring_stats,
	.register_mem = uring_register_mem,
	.poll = uring_poll,
};

static int open_spill(struct uring_tier *u, const struct hs_tier_config *cfg)
{
	const char *dir = getenv("TMPDIR");
	char tmpl[512];

	if (!dir || !dir[0])
		dir = "/tmp";
	snprintf(tmpl, sizeof tmpl, "%s/hpdlf-spill-XXXXXX", dir);
	u->fd = mkstemp(tmpl);
	if (u->fd < 0)
		return hp_error(-errno, "%s: cannot create the spill file: %s", tmpl, strerror(errno));
	unlink(tmpl);
	snprintf(u->base.path, sizeof u->base.path, "%s", tmpl);
	(void)cfg;
	return 0;
}

/* A file on tmpfs/ramfs is memory, whatever O_DIRECT says (recent kernels
 * accept O_DIRECT on tmpfs): it is not a tier below DRAM. */
static int memory_backed(int fd)
{
	struct statfs sf;

	return fstatfs(fd, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC);
}

/* Switch fd to O_DIRECT, or fall back (warned) when allowed. */
static int set_direct(struct uring_tier *u, const struct hs_tier_config *cfg)
{
	int fl = fcntl(u->fd, F_GETFL), mem = memory_backed(u->fd);

	if (!mem && fl >= 0 && fcntl(u->fd, F_SETFL, fl | O_DIRECT) == 0) {
		u->direct = 1;
		return 0;
	}
	if (!(cfg->flags & HS_TIER_F_BUFFERED_OK))
		return hp_error(-EINVAL, "%s: %s: put the nvme tier on a disk-backed directory, or use a pmem= tier "
				"for memory-backed files", u->base.path,
				mem ? "a memory-backed filesystem (tmpfs) is not a tier below DRAM"
				    : "the filesystem refuses O_DIRECT");
	hp_log(HP_LOG_WARN, "%s: %s; spilling through the page cache, which is memory outside the budget "
	       "(set TMPDIR to a disk-backed directory)", u->base.path,
	       mem ? "memory-backed filesystem" : "the filesystem refuses O_DIRECT");
	return 0;
}

static int open_file(struct uring_tier *u, const struct hs_tier_config *cfg)
{
	struct stat sb;
	int rc;

	if (!cfg->path || !cfg->path[0] || (cfg->flags & HS_TIER_F_UNLINK))
		rc = open_spill(u, cfg);
	else if ((u->fd = open(cfg->path, O_RDWR | O_CLOEXEC | ((cfg->flags & HS_TIER_F_CREATE) ? O_CREAT : 0), 0600)) < 0)
		rc = hp_error(-errno, "%s: cannot open the nvme tier file: %s", cfg->path, strerror(errno));
	else
		rc = 0;
	if (rc < 0)
		return rc;
	rc = set_direct(u, cfg);
	if (rc < 0)
		return rc;
	if (fstat(u->fd, &sb) < 0)
		return hp_error(-errno, "%s: fstat: %s", u->base.path, strerror(errno));
	uint64_t cap = cfg->capacity;
	if (S_ISBLK(sb.st_mode)) {
		off_t end = lseek(u->fd, 0, SEEK_END);
		cap = cap && cap < (uint64_t)end ? cap : (uint64_t)end;
	} else {
		if (cap == 0)
			cap = sb.st_size > 0 ? (uint64_t)sb.st_size : SPILL_DEFAULT_SIZE;
		if ((uint64_t)sb.st_size < cap && ftruncate(u->fd, cap) < 0)
			return hp_error(-errno, "%s: cannot size the tier file to %llu bytes: %s", u->base.path,
					(unsigned long long)cap, strerror(errno));
	}
	u->base.capacity = cap & ~(uint64_t)(HS_IO_ALIGN - 1);
	if (u->base.capacity <= cfg->reserved)
		return hp_error(HP_EUSAGE, "%s: nvme tier of %llu bytes is smaller than its header", u->base.path,
				(unsigned long long)u->base.capacity);
	return 0;
}

/* A file read as it is (weights, datasets): O_DIRECT when the filesystem
 * takes it, else buffered and dropped from the page cache after each read,
 * silently (the file is the user's, not a tier the user chose); its space
 * is the file rounded up to HS_IO_ALIGN. */
static int open_readonly(struct uring_tier *u, const struct hs_tier_config *cfg)
{
	struct stat sb;
	int fl;

	u->readonly = 1;
	if ((u->fd = open(cfg->path, O_RDONLY | O_CLOEXEC)) < 0)
		return hp_error(-errno, "%s: cannot open the backing file: %s", cfg->path, strerror(errno));
	fl = fcntl(u->fd, F_GETFL);
	u->direct = fl >= 0 && fcntl(u->fd, F_SETFL, fl | O_DIRECT) == 0;
	if (fstat(u->fd, &sb) < 0)
		return hp_error(-errno, "%s: fstat: %s", cfg->path, strerror(errno));
	u->fsize = (uint64_t)sb.st_size;
	u->base.capacity = (u->fsize + HS_IO_ALIGN - 1) & ~(uint64_t)(HS_IO_ALIGN - 1);
	u->base.reserved = 0;
	return 0;
}

static int start_ring(struct uring_tier *u)
{
	int rc = io_uring_queue_init(u->depth, &u->ring, 0);

	if (rc < 0)
		return hp_error(rc, "%s: io_uring_queue_init(%u): %s", u->base.path, u->depth, strerror(-rc));
	rc = io_uring_register_files(&u->ring, &u->fd, 1);
	if (rc < 0) {
		io_uring_queue_exit(&u->ring);
		return hp_error(rc, "%s: io_uring_register_files: %s", u->base.path, strerror(-rc));
	}
	/* Room for the store's frame regions (filled by register_mem). */
	u->sparse = io_uring_register_buffers_sparse(&u->ring, HS_MEM_SLOTS) == 0;
	rc = pthread_create(&u->cq_thread, NULL, cq_main, u);
	if (rc) {
		io_uring_queue_exit(&u->ring);
		return hp_error(-rc, "%s: cannot start the completion thread", u->base.path);
	}
	return 0;
}

int hs_tier_nvme_open(const struct hs_tier_config *cfg, struct hs_tier **out)
{
	struct uring_tier *u = calloc(1, sizeof *u);
	int rc;

	if (!u)
		return -ENOMEM;
	hs_tier_init(&u->base, &uring_ops, HS_TIER_NVME, cfg);
	u->fd = -1;
	u->depth = cfg->queue_depth ? cfg->queue_depth : 32;
	pthread_mutex_init(&u->sq_mu, NULL);
	pthread_cond_init(&u->sq_cv, NULL);
	pthread_mutex_init(&u->cq_mu, NULL);
	pthread_cond_init(&u->cq_cv, NULL);
	rc = cfg->flags & HS_TIER_F_READONLY ? open_readonly(u, cfg) : open_file(u, cfg);
	if (rc < 0)
		goto fail;
	rc = start_ring(u);
	if (rc < 0)
		goto fail;
	if (cfg->path && cfg->path[0] && !(cfg->flags & (HS_TIER_F_UNLINK | HS_TIER_F_READONLY)))
		u->base.flags |= HS_TIER_F_PERSISTENT;
	u->base.flags |= HS_TIER_F_VECTORED; /* READV/WRITEV: one request for frames scattered in the pool */
	*out = &u->base;
	return 0;
fail:
	if (u->fd >= 0)
		close(u->fd);
	pthread_mutex_destroy(&u->sq_mu);
	pthread_cond_destroy(&u->sq_cv);
	pthread_mutex_destroy(&u->cq_mu);
	pthread_cond_destroy(&u->cq_cv);
	free(u);
	return rc;
}
