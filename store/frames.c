/* DRAM frame pool: an anonymous huge-page pool populated in slabs, a buddy
 * allocator over its pages, pages moved into tensor ranges and home again,
 * emptied ranges reserved again in batches (design: frames.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/mman.h>

#include "hpdlf/error.h"
#include "store/frames.h"

#define NIL UINT32_MAX
#define MAX_ORDER 31
#define SLAB_MIN (64ull << 20)
#define HUGE (2ull << 20)
#define ZQ_MAX 256
/* runs are searched page by page: pools of at most 32 MiB (frames.h) */
#define RUN_POOL_PAGES 8192u
#define MOVE (MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP)

struct zap {
	unsigned char *va;
	uint64_t len;
	uint32_t *ref;
};

struct hs_frames {
	unsigned char *pool;    /* home of page p: pool + p * HS_PAGE */
	uint64_t pool_len;
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
	struct zap zq[ZQ_MAX];  /* emptied tensor ranges to reserve again */
	unsigned nzq;
	uint64_t moves;         /* mremaps done (hs_frames_moves) */
	uint64_t *freemap;      /* bit p: page p lies in a free block (runs search words) */
};

/* Bits [p, p + n) of the free map set (on) or cleared. */
static void mark(struct hs_frames *f, uint64_t p, uint64_t n, int on)
{
	while (n) {
		uint64_t b = p & 63, m = n < 64 - b ? n : 64 - b;
		uint64_t bits = (m == 64 ? ~0ull : ((1ull << m) - 1)) << b;
		if (on)
			f->freemap[p >> 6] |= bits;
		else
			f->freemap[p >> 6] &= ~bits;
		p += m;
		n -= m;
	}
}

static void push(struct hs_frames *f, uint32_t p, unsigned k)
{
	f->ord[p] = (uint8_t)(k + 1);
	f->prev[p] = NIL;
	f->next[p] = f->head[k];
	if (f->head[k] != NIL)
		f->prev[f->head[k]] = p;
	f->head[k] = p;
	f->nfree += 1ull << k;
	mark(f, p, 1ull << k, 1);
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
	mark(f, p, 1ull << k, 0);
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

/* Populate and offer the next slab.  Huge pages are asked for while it is
 * populated only: afterwards nothing may fault memory in behind the
 * budget's back (khugepaged filling emptied ranges, a stray touch of an
 * emptied range taking 2 MiB), and fork() leaves the pool to the parent
 * (pinned pages would otherwise be copied for the child). */
static int grow(struct hs_frames *f)
{
	uint64_t n = f->pages - f->grown < f->slab_pages ? f->pages - f->grown : f->slab_pages;
	size_t len = n * HS_PAGE;
	unsigned slot = (unsigned)(f->grown / f->slab_pages);
	unsigned char *va = f->pool + f->grown * HS_PAGE;

	if (n == 0)
		return -ENOMEM;
	madvise(va, len, MADV_HUGEPAGE); /* advice only: 4 KiB pages work too */
	if (madvise(va, len, MADV_POPULATE_WRITE) < 0) {
		int e = errno;
		madvise(va, len, MADV_DONTNEED);
		madvise(va, len, MADV_NOHUGEPAGE);
		return hp_error(-e, "store: cannot allocate %zu bytes of DRAM for the frame pool: %s", len, strerror(e));
	}
	madvise(va, len, MADV_NOHUGEPAGE);
	if (f->grow && f->slab_pages * HS_PAGE <= (1ull << 30))
		f->grow(f->arg, slot, va, len);
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

static int move(struct hs_frames *f, unsigned char *from, unsigned char *to, size_t len)
{
	f->moves++;
	return mremap(from, len, len, MOVE, to) == to ? 0 : -errno;
}

uint64_t hs_frames_moves(const struct hs_frames *f)
{
	return f->moves;
}

int hs_frames_map(struct hs_frames *f, unsigned char *va, const struct hs_piece *p, uint32_t n)
{
	unsigned char *at = va;
	uint32_t i;
	int rc = 0;

	for (i = 0; i < n && rc == 0; i++) {
		size_t len = (size_t)p[i].n * HS_PAGE;
		rc = move(f, f->pool + (size_t)p[i].page * HS_PAGE, at, len);
		at += len;
	}
	if (rc == 0)
		return 0;
	for (uint32_t k = 0, done = i - 1; k < done; k++) { /* undo the pieces moved */
		size_t len = (size_t)p[k].n * HS_PAGE;
		move(f, va, f->pool + (size_t)p[k].page * HS_PAGE, len);
		va += len;
	}
	return hp_error(rc, "store: cannot move %zu bytes of frames into a tensor: %s "
			"(vm.max_map_count too low for this chunk size?)", (size_t)p[i - 1].n * HS_PAGE, strerror(-rc));
}

static void queue_range(struct hs_frames *f, unsigned char *va, uint64_t len, uint32_t *ref)
{
	if (f->nzq == ZQ_MAX)
		hs_frames_flush(f);
	f->zq[f->nzq] = (struct zap){ va, len, ref };
	*ref = ++f->nzq;
}

int hs_frames_unmap(struct hs_frames *f, unsigned char *va, const struct hs_piece *p, uint32_t n, uint32_t *ref)
{
	unsigned char *at = va;
	int rc = 0;

	for (uint32_t i = 0; i < n; i++) {
		size_t len = (size_t)p[i].n * HS_PAGE;
		int e = move(f, at, f->pool + (size_t)p[i].page * HS_PAGE, len);
		if (e < 0 && rc == 0)
			rc = hp_error(e, "store: cannot move %zu bytes of frames home from a tensor: %s; "
				      "they stay out of the pool", len, strerror(-e));
		at += len;
	}
	if (rc == 0)
		queue_range(f, va, (uint64_t)(at - va), ref);
	return rc;
}

int hs_frames_home_span(struct hs_frames *f, unsigned char *va, uint64_t page, uint64_t n)
{
	int rc = move(f, va, f->pool + (size_t)page * HS_PAGE, (size_t)n * HS_PAGE);

	if (rc < 0)
		return hp_error(rc, "store: cannot move %llu bytes of frames home from a tensor: %s",
				(unsigned long long)n * HS_PAGE, strerror(-rc));
	return 0;
}

void hs_frames_queue(struct hs_frames *f, unsigned char *va, uint64_t len, uint32_t *ref)
{
	queue_range(f, va, len, ref);
}

int hs_frames_move(struct hs_frames *f, unsigned char *from, unsigned char *to, uint64_t len, uint32_t *ref)
{
	int rc = move(f, from, to, len);

	if (rc < 0)
		return hp_error(rc, "store: cannot move %llu bytes of frames between tensors: %s",
				(unsigned long long)len, strerror(-rc));
	queue_range(f, from, len, ref);
	return 0;
}

/* The flags of a tensor's reservation, so an emptied range merges back. */
static void *reserve_at(void *va, uint64_t len, int flags)
{
	return mmap(va, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags, -1, 0);
}

void hs_frames_flush(struct hs_frames *f)
{
	for (unsigned i = 0; i < f->nzq; i++) {
		reserve_at(f->zq[i].va, f->zq[i].len, MAP_FIXED); /* replaces the empty range in place */
		*f->zq[i].ref = 0;
	}
	f->nzq = 0;
}

void hs_frames_unqueue(struct hs_frames *f, uint32_t *ref)
{
	unsigned i = *ref - 1;

	if (!*ref)
		return;
	f->zq[i] = f->zq[--f->nzq];
	if (i < f->nzq)
		*f->zq[i].ref = i + 1;
	*ref = 0;
}

/* len bytes at an address aligned to `align` (a power of two), or NULL. */
static unsigned char *reserve_aligned(uint64_t len, uint64_t align)
{
	unsigned char *raw = reserve_at(NULL, len + align, 0), *p;

	if (raw == MAP_FAILED)
		return NULL;
	p = (unsigned char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
	if (p > raw)
		munmap(raw, (size_t)(p - raw));
	munmap(p + len, (size_t)(raw + len + align - (p + len)));
	return p;
}

unsigned char *hs_frames_home(const struct hs_frames *f, const struct hs_piece *p)
{
	return f->pool + (size_t)p->page * HS_PAGE;
}

void *hs_frames_reserve(uint64_t len)
{
	return reserve_aligned(len, len >= HUGE ? HUGE : HS_PAGE);
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

/* The free block holding page p: its head in *head, its order in *k.
 * Blocks are naturally aligned, so only one head per order can hold p. */
static int free_block_of(const struct hs_frames *f, uint64_t p, uint64_t *head, unsigned *k)
{
	if (p >= f->grown)
		return 0;
	for (unsigned j = 0; j <= f->maxord; j++) {
		uint64_t q = p & ~((1ull << j) - 1);
		if (f->ord[q] == j + 1) {
			*head = q;
			*k = j;
			return 1;
		}
	}
	return 0;
}

int hs_frames_is_free(const struct hs_frames *f, uint64_t page)
{
	return page < f->grown && (f->freemap[page >> 6] >> (page & 63) & 1);
}

int hs_frames_runs(struct hs_frames *f)
{
	if (f->pages > RUN_POOL_PAGES || f->pages > f->slab_pages)
		return 0;
	while (f->grown < f->pages)
		if (grow(f) < 0)
			return 0;
	return 1;
}

int hs_frames_take(struct hs_frames *f, uint64_t page, uint64_t n)
{
	uint64_t h;
	unsigned k;

	for (uint64_t p = page; p < page + n; p = h + (1ull << k))
		if (!free_block_of(f, p, &h, &k))
			return -ENOMEM;
	/* carve: the parts of each block outside the range go back (a part
	 * merging with a block still to carve is found again by its page) */
	for (uint64_t p = page; p < page + n;) {
		free_block_of(f, p, &h, &k);
		uint64_t end = h + (1ull << k);
		unlink_block(f, (uint32_t)h);
		if (h < p)
			free_range(f, h, p - h);
		if (end > page + n)
			free_range(f, page + n, end - (page + n));
		p = end;
	}
	return 0;
}

int hs_frames_find_run(const struct hs_frames *f, uint64_t n, uint64_t *page)
{
	uint64_t start = 0, len = 0;

	/* first fit, a word of the free map at a time: all free, none free,
	 * or bit by bit */
	for (uint64_t w = 0; w < (f->grown + 63) / 64 && n; w++) {
		uint64_t bits = f->freemap[w], base = w * 64;
		if (bits == ~0ull || bits == 0) {
			if (!bits) {
				len = 0;
				continue;
			}
			if (!len)
				start = base;
			len += 64;
		} else {
			for (uint64_t b = 0; b < 64; b++) {
				if (!(bits >> b & 1)) {
					len = 0;
					continue;
				}
				if (!len)
					start = base + b;
				if (++len >= n)
					break;
			}
		}
		if (len >= n && start + n <= f->grown) {
			*page = start;
			return 0;
		}
	}
	return -ENOMEM;
}

/* Stretch [s, e) from its first page aligned to `align`: better than the
 * best so far (*got pages at *page)?  One that holds `want` whole beats
 * any that does not, and among those the shorter wins (best fit: long
 * stretches stay whole for runs); among those that do not, the longer. */
static void consider(uint64_t s, uint64_t e, uint64_t want, uint64_t align, uint64_t *page, uint64_t *got)
{
	uint64_t a = (s + align - 1) / align * align, n = e > a ? e - a : 0;

	if (n < align)
		return;
	if (*got >= want ? n >= want && n < *got : n > *got) {
		*page = a;
		*got = n;
	}
}

uint64_t hs_frames_stretch(const struct hs_frames *f, uint64_t want, uint64_t align, uint64_t *page)
{
	uint64_t got = 0, start = 0;
	int in = 0;

	for (uint64_t p = 0; p <= f->grown; p++) {
		int free = p < f->grown && (f->freemap[p >> 6] >> (p & 63) & 1);
		if (free && !in)
			start = p;
		else if (!free && in)
			consider(start, p, want, align, page, &got);
		in = free;
	}
	return got;
}

uint64_t hs_frames_grown(const struct hs_frames *f)
{
	return f->grown * HS_PAGE;
}

uint64_t hs_frames_free_bytes(const struct hs_frames *f)
{
	return f->nfree * HS_PAGE;
}

uint64_t hs_frames_avail_bytes(const struct hs_frames *f)
{
	return (f->nfree + f->pages - f->grown) * HS_PAGE;
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
	f->pages = bytes / HS_PAGE;
	if (f->pages >= NIL)
		f->pages = NIL - 1;
	f->maxord = log2_floor(cp ? cp : 1);
	f->slab_pages = slab_pages(f->pages, 1ull << f->maxord);
	f->grow = growfn;
	f->arg = arg;
	for (unsigned k = 0; k <= MAX_ORDER; k++)
		f->head[k] = NIL;
	f->next = malloc(f->pages * sizeof *f->next);
	f->prev = malloc(f->pages * sizeof *f->prev);
	f->ord = calloc(f->pages, 1);
	f->freemap = calloc((f->pages + 63) / 64 + 1, sizeof *f->freemap);
	f->pool_len = (f->pages * HS_PAGE + HUGE - 1) & ~(HUGE - 1);
	f->pool = reserve_aligned(f->pool_len, HUGE);
	if (!f->next || !f->prev || !f->ord || !f->freemap || !f->pool)
		goto fail;
	madvise(f->pool, f->pool_len, MADV_DONTFORK);
	madvise(f->pool, f->pool_len, MADV_NOHUGEPAGE);
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
	if (f->pool)
		munmap(f->pool, f->pool_len);
	free(f->next);
	free(f->prev);
	free(f->ord);
	free(f->freemap);
	free(f->scratch);
	free(f);
}
