/* DRAM frame pool: memfd slabs, a buddy allocator over their pages, mapping
 * into tensor ranges and batched unmapping (design: frames.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/frames.h"

#define NIL UINT32_MAX
#define MAX_ORDER 31
#define SLAB_MIN (64ull << 20)
#define ZQ_MAX 256

struct zap {
	unsigned char *va;
	uint64_t len;
	uint32_t *ref;
};

struct hs_frames {
	int fd, pidfd;
	uint64_t pages, grown, slab_pages;
	unsigned maxord;
	uint32_t *next, *prev;
	uint8_t *ord;           /* order + 1 at the head page of a free block, else 0 */
	uint32_t head[MAX_ORDER + 1];
	uint64_t nfree;
	hs_frames_grow_fn grow;
	void *arg;
	struct hs_piece *scratch;
	size_t scratch_cap;
	struct zap zq[ZQ_MAX];
	unsigned nzq;
	uint64_t zq_bytes, zq_cap;
};

static void push(struct hs_frames *f, uint32_t p, unsigned k)
{
	f->ord[p] = (uint8_t)(k + 1);
	f->prev[p] = NIL;
	f->next[p] = f->head[k];
	if (f->head[k] != NIL)
		f->prev[f->head[k]] = p;
	f->head[k] = p;
	f->nfree += 1ull << k;
}

static void unlink_block(struct hs_frames *f, uint32_t p)
{
	unsigned k = f->ord[p] - 1u;

	if (f->prev[p] != NIL)
		f->next[f->prev[p]] = f->next[p];
	else
		f->head[k] = f->next[p];
	if (f->next[p] != NIL)
		f->prev[f->next[p]] = f->prev[p];
	f->ord[p] = 0;
	f->nfree -= 1ull << k;
}

/* Free block (p, k), merging with its free buddies. */
static void free_block(struct hs_frames *f, uint32_t p, unsigned k)
{
	while (k < f->maxord) {
		uint64_t b = p ^ (1ull << k);
		if (b >= f->grown || f->ord[b] != k + 1)
			break;
		unlink_block(f, (uint32_t)b);
		p &= ~(uint32_t)(1ull << k);
		k++;
	}
	push(f, p, k);
}

/* Free pages [p, p + n) as the aligned blocks they decompose into. */
static void free_range(struct hs_frames *f, uint64_t p, uint64_t n)
{
	while (n) {
		unsigned k = 0;
		while (k < f->maxord && !(p & (1ull << k)) && (2ull << k) <= n)
			k++;
		free_block(f, (uint32_t)p, k);
		p += 1ull << k;
		n -= 1ull << k;
	}
}

/* A block of order exactly k, split from the smallest larger one; NIL if none. */
static uint32_t alloc_block(struct hs_frames *f, unsigned k)
{
	unsigned j = k;
	uint32_t p;

	while (j <= f->maxord && f->head[j] == NIL)
		j++;
	if (j > f->maxord)
		return NIL;
	p = f->head[j];
	unlink_block(f, p);
	while (j > k) {
		j--;
		push(f, p + (uint32_t)(1ull << j), j);
	}
	return p;
}

/* Allocate, populate and offer the next slab. */
static int grow(struct hs_frames *f)
{
	uint64_t n = f->pages - f->grown < f->slab_pages ? f->pages - f->grown : f->slab_pages;
	size_t len = n * HS_PAGE;
	unsigned slot = (unsigned)(f->grown / f->slab_pages);
	void *va;

	if (n == 0)
		return -ENOMEM;
	va = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, (off_t)(f->grown * HS_PAGE));
	if (va == MAP_FAILED)
		return hp_error(-ENOMEM, "store: cannot map %zu bytes of the frame pool: %s", len, strerror(errno));
	if (madvise(va, len, MADV_POPULATE_WRITE) < 0) {
		int e = errno;
		munmap(va, len);
		return hp_error(-e, "store: cannot allocate %zu bytes of DRAM for the frame pool: %s", len, strerror(e));
	}
	if (f->grow && f->slab_pages * HS_PAGE <= (1ull << 30))
		f->grow(f->arg, slot, va, len);
	munmap(va, len);
	uint64_t p = f->grown;
	f->grown += n;
	free_range(f, p, n);
	return 0;
}

static int scratch_add(struct hs_frames *f, size_t *n, uint32_t p, uint32_t len)
{
	if (*n && f->scratch[*n - 1].page + f->scratch[*n - 1].n == p &&
	    p % f->slab_pages != 0) { /* contiguous, same slab */
		f->scratch[*n - 1].n += len;
		return 0;
	}
	if (*n == f->scratch_cap) {
		size_t cap = f->scratch_cap ? 2 * f->scratch_cap : 16;
		void *q = realloc(f->scratch, cap * sizeof *f->scratch);
		if (!q)
			return -ENOMEM;
		f->scratch = q;
		f->scratch_cap = cap;
	}
	f->scratch[(*n)++] = (struct hs_piece){ p, len };
	return 0;
}

static unsigned log2_floor(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}

/* Largest free block of order < k, NIL if none (order in *got). */
static uint32_t alloc_smaller(struct hs_frames *f, unsigned k, unsigned *got)
{
	while (k-- > 0) {
		if (f->head[k] != NIL) {
			*got = k;
			return alloc_block(f, k);
		}
	}
	return NIL;
}

static int gather(struct hs_frames *f, uint64_t npages, size_t *n)
{
	uint64_t need = npages;
	int rc = 0;

	*n = 0;
	while (need && rc == 0) {
		unsigned k = log2_floor(need), got = 0;
		if (k > f->maxord)
			k = f->maxord;
		uint32_t p = alloc_block(f, k);
		got = k;
		while (p == NIL && f->grown < f->pages && (rc = grow(f)) == 0)
			p = alloc_block(f, k);
		if (p == NIL && rc == 0)
			p = alloc_smaller(f, k, &got);
		if (p == NIL) {
			if (rc == 0)
				rc = hp_error(-ENOMEM, "store: frame pool exhausted (%llu pages wanted, %llu free)",
					      (unsigned long long)npages, (unsigned long long)f->nfree);
			break;
		}
		rc = scratch_add(f, n, p, (uint32_t)(1u << got));
		if (rc < 0)
			free_block(f, p, got);
		need -= 1ull << got;
	}
	return rc;
}

int hs_frames_alloc(struct hs_frames *f, uint64_t npages, struct hs_piece *one, struct hs_piece **many,
		    uint32_t *n)
{
	size_t k = 0;
	int rc = gather(f, npages, &k);

	if (rc == 0 && k > 1) {
		*many = malloc(k * sizeof **many);
		if (*many)
			memcpy(*many, f->scratch, k * sizeof **many);
		else
			rc = -ENOMEM;
	}
	if (rc < 0) {
		for (size_t i = 0; i < k; i++)
			free_range(f, f->scratch[i].page, f->scratch[i].n);
		return rc;
	}
	if (k == 1) {
		*one = f->scratch[0];
		*many = NULL;
	}
	*n = (uint32_t)k;
	return 0;
}

void hs_frames_free(struct hs_frames *f, struct hs_piece *one, struct hs_piece *many, uint32_t n)
{
	const struct hs_piece *p = n > 1 ? many : one;

	for (uint32_t i = 0; i < n; i++)
		free_range(f, p[i].page, p[i].n);
	free(many);
}

int hs_frames_map(struct hs_frames *f, unsigned char *va, const struct hs_piece *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		size_t len = (size_t)p[i].n * HS_PAGE;
		void *r = mmap(va, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, f->fd,
			       (off_t)p[i].page * HS_PAGE);
		if (r == MAP_FAILED)
			return hp_error(-errno, "store: cannot map %zu bytes of frames into a tensor: %s "
					"(vm.max_map_count too low for this chunk size?)", len, strerror(errno));
		va += len;
	}
	return 0;
}

static void reserve(unsigned char *va, uint64_t len)
{
	/* Same flags as the tensor's reservation, so the mapping merges back. */
	mmap(va, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

void hs_frames_flush(struct hs_frames *f)
{
	struct iovec iov[ZQ_MAX];
	int zapped = 0;

	if (!f->nzq)
		return;
	for (unsigned i = 0; i < f->nzq; i++)
		iov[i] = (struct iovec){ f->zq[i].va, f->zq[i].len };
#ifdef SYS_process_madvise
	/* One TLB flush for the batch (Linux >= 6.13 allows it on oneself). */
	if (f->pidfd >= 0)
		zapped = syscall(SYS_process_madvise, f->pidfd, iov, (size_t)f->nzq, MADV_DONTNEED, 0u) >= 0;
#endif
	(void)zapped; /* without it, each reserve() below flushes on its own */
	for (unsigned i = 0; i < f->nzq; i++) {
		reserve(f->zq[i].va, f->zq[i].len);
		*f->zq[i].ref = 0;
	}
	f->nzq = 0;
	f->zq_bytes = 0;
}

void hs_frames_queue_unmap(struct hs_frames *f, unsigned char *va, uint64_t len, uint32_t *ref)
{
	if (f->nzq == ZQ_MAX || f->zq_bytes + len > f->zq_cap)
		hs_frames_flush(f);
	f->zq[f->nzq] = (struct zap){ va, len, ref };
	*ref = ++f->nzq;
	f->zq_bytes += len;
}

void hs_frames_unqueue(struct hs_frames *f, uint32_t *ref)
{
	unsigned i = *ref - 1;

	if (!*ref)
		return;
	f->zq_bytes -= f->zq[i].len;
	f->zq[i] = f->zq[--f->nzq];
	if (i < f->nzq)
		*f->zq[i].ref = i + 1;
	*ref = 0;
}

uint32_t hs_frames_slot(const struct hs_frames *f, const struct hs_piece *p, uint32_t n, uint64_t *off)
{
	uint64_t slot;

	if (n != 1)
		return 0;
	slot = p->page / f->slab_pages;
	if (slot >= HS_MEM_SLOTS || f->slab_pages * HS_PAGE > (1ull << 30))
		return 0;
	*off = (p->page - slot * f->slab_pages) * HS_PAGE;
	return (uint32_t)slot + 1;
}

uint64_t hs_frames_grown(const struct hs_frames *f)
{
	return f->grown * HS_PAGE;
}

uint64_t hs_frames_free_bytes(const struct hs_frames *f)
{
	return f->nfree * HS_PAGE;
}

static uint64_t slab_pages(uint64_t pages, uint64_t chunk_pages)
{
	uint64_t s = SLAB_MIN / HS_PAGE;

	while (s < chunk_pages || (pages + s - 1) / s > HS_MEM_SLOTS)
		s *= 2;
	return s;
}

int hs_frames_create(uint64_t bytes, uint64_t chunk_size, hs_frames_grow_fn growfn, void *arg,
		     struct hs_frames **out)
{
	struct hs_frames *f = calloc(1, sizeof *f);
	uint64_t cp = chunk_size / HS_PAGE;

	if (!f)
		return -ENOMEM;
	f->fd = f->pidfd = -1;
	f->pages = bytes / HS_PAGE;
	if (f->pages >= NIL)
		f->pages = NIL - 1;
	f->maxord = log2_floor(cp ? cp : 1);
	f->slab_pages = slab_pages(f->pages, 1ull << f->maxord);
	f->grow = growfn;
	f->arg = arg;
	f->zq_cap = bytes / 8 > chunk_size ? bytes / 8 : chunk_size;
	for (unsigned k = 0; k <= MAX_ORDER; k++)
		f->head[k] = NIL;
	f->next = malloc(f->pages * sizeof *f->next);
	f->prev = malloc(f->pages * sizeof *f->prev);
	f->ord = calloc(f->pages, 1);
	f->fd = memfd_create("hpdlf-frames", MFD_CLOEXEC);
	if (!f->next || !f->prev || !f->ord || f->fd < 0)
		goto fail;
	if (ftruncate(f->fd, (off_t)(f->pages * HS_PAGE)) < 0)
		goto fail;
	f->pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0u);
	*out = f;
	return 0;
fail:
	hs_frames_destroy(f);
	return hp_error(-ENOMEM, "store: cannot create the frame pool of %llu bytes", (unsigned long long)bytes);
}

void hs_frames_destroy(struct hs_frames *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	if (f->pidfd >= 0)
		close(f->pidfd);
	free(f->next);
	free(f->prev);
	free(f->ord);
	free(f->scratch);
	free(f);
}
