/* Training data: .npy files and uncompressed .npz members read in place.
 * In core the files are mapped; out of core each array is a store tensor
 * backed by its file, so a dataset larger than the budget is paged from the
 * disk a chunk at a time (unhinted chunks are the store's first victims,
 * so data pages never push out the planned tensors for long). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "exec/exec_internal.h"
#include "exec/train_internal.h"

#define DATA_ALIGN 4096 /* O_DIRECT's block (the store's HS_IO_ALIGN) */

static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t r = pread(fd, p, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : HP_EDATA;
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ---- .npz: the zip's central directory --------------------------------- */

struct zip_dir {
	uint64_t off, size, count;
};

static int zip_find_dir(int fd, uint64_t fsize, const char *path, struct zip_dir *zd)
{
	unsigned char buf[65536 + 22], z[56];
	uint64_t tail = fsize < sizeof buf ? fsize : sizeof buf, base = fsize - tail;
	int64_t e = -1;

	if (read_at(fd, buf, tail, base) < 0)
		return hp_error(HP_EDATA, "%s: cannot read the zip directory", path);
	for (int64_t i = (int64_t)tail - 22; i >= 0 && e < 0; i--)
		if (le(buf + i, 4) == 0x06054b50)
			e = i;
	if (e < 0)
		return hp_error(HP_EDATA, "%s: not a .npz (zip) file", path);
	zd->count = le(buf + e + 10, 2);
	zd->size = le(buf + e + 12, 4);
	zd->off = le(buf + e + 16, 4);
	if (zd->count != 0xffff && zd->off != 0xffffffffu)
		return 0;
	/* zip64: the locator sits right before the end record */
	if (e < 20 || le(buf + e - 20, 4) != 0x07064b50)
		return hp_error(HP_EDATA, "%s: malformed zip64 directory", path);
	if (read_at(fd, z, sizeof z, le(buf + e - 20 + 8, 8)) < 0 || le(z, 4) != 0x06064b50)
		return hp_error(HP_EDATA, "%s: malformed zip64 directory", path);
	zd->count = le(z + 32, 8);
	zd->size = le(z + 40, 8);
	zd->off = le(z + 48, 8);
	return 0;
}

/* Sizes and offset of a central-directory entry, zip64 extra applied. */
static void zip64_fix(const unsigned char *extra, size_t elen, uint64_t *usize, uint64_t *csize, uint64_t *lho)
{
	for (size_t i = 0; i + 4 <= elen;) {
		uint64_t id = le(extra + i, 2), n = le(extra + i + 2, 2);
		const unsigned char *p = extra + i + 4, *end = p + n;
		if (i + 4 + n > elen)
			return;
		if (id == 1) {
			uint64_t *f[3] = { usize, csize, lho };
			for (int k = 0; k < 3; k++)
				if (*f[k] == 0xffffffffu && p + 8 <= end) {
					*f[k] = le(p, 8);
					p += 8;
				}
			return;
		}
		i += 4 + n;
	}
}

/* Offset in the zip of member `name`'s bytes (stored, not compressed). */
static int zip_member(int fd, uint64_t fsize, const char *path, const char *name, uint64_t *off, uint64_t *len)
{
	struct zip_dir zd;
	unsigned char *dir, lh[30];
	int rc = zip_find_dir(fd, fsize, path, &zd);

	if (rc < 0)
		return rc;
	if (zd.size > (64u << 20) || zd.off + zd.size > fsize)
		return hp_error(HP_EDATA, "%s: malformed zip directory", path);
	if (!(dir = malloc(zd.size + 1)))
		return hp_error(-ENOMEM, "out of memory");
	rc = read_at(fd, dir, zd.size, zd.off);
	for (uint64_t p = 0, k = 0; rc == 0 && k < zd.count && p + 46 <= zd.size; k++) {
		uint64_t method = le(dir + p + 10, 2), csize = le(dir + p + 20, 4), usize = le(dir + p + 24, 4);
		uint64_t nlen = le(dir + p + 28, 2), elen = le(dir + p + 30, 2), clen = le(dir + p + 32, 2);
		uint64_t lho = le(dir + p + 42, 4);
		if (le(dir + p, 4) != 0x02014b50 || p + 46 + nlen + elen > zd.size)
			break;
		if (nlen == strlen(name) && !memcmp(dir + p + 46, name, nlen)) {
			zip64_fix(dir + p + 46 + nlen, elen, &usize, &csize, &lho);
			free(dir);
			if (method != 0)
				return hp_error(HP_EDATA, "%s: member '%s' is compressed; save the data with np.savez, "
						"not np.savez_compressed", path, name);
			if (read_at(fd, lh, sizeof lh, lho) < 0 || le(lh, 4) != 0x04034b50)
				return hp_error(HP_EDATA, "%s: malformed zip member '%s'", path, name);
			*off = lho + 30 + le(lh + 26, 2) + le(lh + 28, 2);
			*len = usize;
			return *off + usize <= fsize ? 0 : hp_error(HP_EDATA, "%s: member '%s' truncated", path, name);
		}
		p += 46 + nlen + elen + clen;
	}
	free(dir);
	return rc < 0 ? hp_error(HP_EDATA, "%s: cannot read the zip directory", path)
		      : hp_error(HP_EDATA, "%s: no member '%s' (an .npz for training holds x and y)", path, name);
}

/* ---- .npy headers (of a member) --------------------------------------- */

static const struct {
	const char *descr;
	enum hp_dtype dt;
} npy_types[] = {
	{ "f4", HP_F32 }, { "f8", HP_F64 }, { "f2", HP_F16 }, { "u1", HP_U8 }, { "i1", HP_I8 }, { "u2", HP_U16 },
	{ "i2", HP_I16 }, { "i4", HP_I32 }, { "i8", HP_I64 }, { "b1", HP_BOOL }, { "u4", HP_U32 }, { "u8", HP_U64 },
};

static const char *dict_at(const char *h, const char *key)
{
	const char *p = strstr(h, key);

	if (!p)
		return NULL;
	p += strlen(key);
	while (*p == ' ' || *p == ':')
		p++;
	return p;
}

static int parse_dict(const char *what, const char *h, enum hp_dtype *dt, struct hp_shape *s)
{
	const char *d = dict_at(h, "'descr'"), *f = dict_at(h, "'fortran_order'"), *sh = dict_at(h, "'shape'");
	char *end;

	if (!d || !f || !sh || *d != '\'' || *sh != '(' || strlen(d) < 5)
		return hp_error(HP_EDATA, "%s: malformed .npy header", what);
	if (!strncmp(f, "True", 4))
		return hp_error(HP_EDATA, "%s: Fortran-order arrays are not supported", what);
	*dt = HP_UNDEFINED;
	for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
		if (strchr("<|=", d[1]) && !strncmp(d + 2, npy_types[i].descr, 2) && d[4] == '\'')
			*dt = npy_types[i].dt;
	if (*dt == HP_UNDEFINED)
		return hp_error(HP_EDATA, "%s: unsupported .npy dtype %.8s", what, d);
	memset(s, 0, sizeof *s);
	for (sh++;;) {
		while (*sh == ' ' || *sh == ',')
			sh++;
		if (*sh == ')')
			return 0;
		long long v = strtoll(sh, &end, 10);
		if (end == sh || v < 0 || s->rank == HP_MAX_RANK)
			return hp_error(HP_EDATA, "%s: malformed shape in .npy header", what);
		s->dims[s->rank++] = v;
		sh = end;
	}
}

static int npy_member(int fd, uint64_t off, uint64_t len, struct hp_darray *a)
{
	unsigned char pre[12];
	uint64_t hl, ho;
	char *h;
	int rc;

	if (len < 12 || read_at(fd, pre, 12, off) < 0 || memcmp(pre, "\x93NUMPY", 6))
		return hp_error(HP_EDATA, "%s: not a .npy array", a->what);
	ho = pre[6] == 1 ? 10 : 12;
	hl = pre[6] == 1 ? le(pre + 8, 2) : le(pre + 8, 4);
	if (hl > (1u << 20) || ho + hl > len)
		return hp_error(HP_EDATA, "%s: truncated .npy header", a->what);
	if (!(h = calloc(1, hl + 1)))
		return hp_error(-ENOMEM, "out of memory");
	rc = read_at(fd, h, hl, off + ho);
	if (rc == 0)
		rc = parse_dict(a->what, h, &a->dtype, &a->shape);
	free(h);
	a->offset = off + ho + hl;
	return rc;
}

static int open_array(struct hp_darray *a, const char *path, const char *member)
{
	char what[4096];
	struct stat st;
	uint64_t off = 0, len = 0;
	int fd, rc;

	snprintf(what, sizeof what, member ? "%s:%.1s" : "%s", path, member);
	a->path = strdup(path);
	a->what = strdup(what);
	if (!a->path || !a->what)
		return hp_error(-ENOMEM, "out of memory");
	if (!member) {
		rc = hp_npy_header(path, &a->dtype, &a->shape, &a->offset);
		if (rc < 0)
			return rc;
	} else {
		if ((rc = hp_open_regular(path, NULL, &fd, &st)) < 0)
			return rc;
		rc = zip_member(fd, (uint64_t)st.st_size, path, member, &off, &len);
		if (rc == 0)
			rc = npy_member(fd, off, len, a);
		close(fd);
		struct hp_tensor t = { .dtype = a->dtype, .shape = a->shape };
		if (rc == 0 && a->offset + hp_tensor_bytes(&t) > off + len)
			rc = hp_error(HP_EDATA, "%s: truncated array", a->what);
		if (rc < 0)
			return rc;
	}
	if (a->shape.rank < 1 || a->shape.dims[0] < 1)
		return hp_error(HP_EDATA, "%s: needs at least one sample along dim 0", a->what);
	struct hp_tensor row = { .dtype = a->dtype, .shape = a->shape };
	row.shape.dims[0] = 1;
	a->row_bytes = hp_tensor_bytes(&row);
	return 0;
}

int hp_dataset_open(struct hp_dataset *d, const char *data, const char *labels)
{
	int rc;

	memset(d, 0, sizeof *d);
	if (!data)
		return hp_error(HP_EUSAGE, "training needs data (--data)");
	if (!labels && !(strlen(data) > 4 && !strcmp(data + strlen(data) - 4, ".npz")))
		return hp_error(HP_EUSAGE, "%s: labels missing (--labels FILE.npy, or --data FILE.npz holding x and y)",
				data);
	rc = open_array(&d->x, data, labels ? NULL : "x.npy");
	if (rc == 0)
		rc = open_array(&d->y, labels ? labels : data, labels ? NULL : "y.npy");
	if (rc < 0)
		return rc;
	if (d->x.shape.dims[0] != d->y.shape.dims[0])
		return hp_error(HP_EDATA, "%s has %lld samples but %s has %lld", d->x.what, (long long)d->x.shape.dims[0],
				d->y.what, (long long)d->y.shape.dims[0]);
	d->n = d->x.shape.dims[0];
	return 0;
}

static int attach_array(struct hp_darray *a, struct hs_store *st)
{
	uint64_t bytes = a->row_bytes * (uint64_t)a->shape.dims[0];
	int fd, rc;

	/* a file shared by the parent of trials is mapped, one copy of its
	 * pages for them all, instead of each store reading its own */
	if (st && hp_file_shared(a->path) < 0) {
		/* the tensor starts at the block before the first row (an .npy
		 * header is 128 bytes or so): its chunks are block-aligned in the
		 * file, read with O_DIRECT straight into their frames, all of a
		 * batch in one submission (hp_dataset_prefetch), where unaligned
		 * ones went one at a time through a bounce window */
		a->skip = a->offset % DATA_ALIGN;
		struct hs_tensor_info ti = { .bytes = a->skip + bytes, .dtype = a->dtype, .shape = a->shape };
		rc = hs_tensor_create_backed(st, &ti, a->path, a->offset - a->skip, &a->ten);
		const char *base = strrchr(a->what, '/');
		if (rc == 0) /* --tensors lists it under its file's name, not as #N */
			hs_tensor_set_label(a->ten, base ? base + 1 : a->what);
		a->chunk = hs_chunk_size(st);
		return rc < 0 ? hp_error_prefix(rc, "%s", a->what) : 0;
	}
	struct stat sb;
	if ((rc = hp_open_regular(a->path, NULL, &fd, &sb)) < 0)
		return rc;
	a->map_len = a->offset + bytes;
	a->map = mmap(NULL, a->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
	rc = errno;
	close(fd);
	if (a->map == MAP_FAILED) {
		a->map = NULL;
		return hp_error(-rc, "%s: cannot map: %s", a->path, strerror(rc));
	}
	return 0;
}

int hp_dataset_attach(struct hp_dataset *d, struct hs_store *st)
{
	int rc = attach_array(&d->x, st);

	return rc < 0 ? rc : attach_array(&d->y, st);
}

/* A piece of a gather: bytes [in, in + len) of chunk `chunk` go to dst. */
struct piece {
	uint64_t chunk, in, len;
	unsigned char *dst;
};

static int cmp_piece(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;

	if (x->chunk != y->chunk)
		return x->chunk < y->chunk ? -1 : 1;
	return x->in < y->in ? -1 : x->in > y->in;
}

/* Bytes [off, off + len) of a store-backed array cut at its chunks into
 * p[*np...]. */
static void cut_pieces(const struct hp_darray *a, uint64_t off, uint64_t len, unsigned char *dst, struct piece *p,
		       size_t *np)
{
	while (len) {
		uint64_t c = off / a->chunk, in = off - c * a->chunk, n = a->chunk - in < len ? a->chunk - in : len;
		p[(*np)++] = (struct piece){ c, in, n, dst };
		dst += n;
		off += n;
		len -= n;
	}
}

/* The pieces p[0..np) (sorted by chunk): each chunk pinned once, its
 * pieces copied, dropped.  In the rows' order, a chunk holding rows of
 * the batch far apart (shuffled) was read again for each of them, and
 * each read took frames the read-ahead had filled (hs_readahead), lost
 * to be read again too (LeNet with --shuffle at half its peak: three
 * quarters of what it read ahead). */
static int store_read(struct hp_darray *a, const struct piece *p, size_t np)
{
	for (size_t i = 0, j; i < np; i = j) {
		unsigned char *b;
		int rc = hs_pin(a->ten, p[i].chunk, 1, HS_PIN_READ, (void **)&b);
		if (rc < 0)
			return hp_error_prefix(rc, "%s", a->what);
		for (j = i; j < np && p[j].chunk == p[i].chunk; j++)
			memcpy(p[j].dst, b + p[j].in, p[j].len);
		hs_unpin(a->ten, p[i].chunk, 1);
		hs_evict(a->ten, p[i].chunk, 1, HS_TIER_NONE); /* clean: dropping it is free */
	}
	return 0;
}

static int store_gather(struct hp_darray *a, const int64_t *rows, int64_t n, unsigned char *out)
{
	size_t np = 0, cap = (size_t)n * (size_t)(a->row_bytes / a->chunk + 2);
	struct piece *p = malloc(cap * sizeof *p);
	int sorted = 1, rc;

	if (!p)
		return hp_error(-ENOMEM, "out of memory");
	for (int64_t i = 0; i < n;) {
		int64_t k = 1;
		while (i + k < n && rows[i + k] == rows[i] + k)
			k++;
		uint64_t off = a->skip + (uint64_t)rows[i] * a->row_bytes, len = (uint64_t)k * a->row_bytes;
		sorted = sorted && (!np || off / a->chunk >= p[np - 1].chunk);
		cut_pieces(a, off, len, out, p, &np);
		out += len;
		i += k;
	}
	if (!sorted)
		qsort(p, np, sizeof *p, cmp_piece);
	rc = store_read(a, p, np);
	free(p);
	return rc;
}

/* The chunks rows[0..n) of a store-backed array lie in, appended to r[*nr]
 * as ranges (adjacent ones merged), at most *left chunks in all. */
static void batch_ranges(const struct hp_darray *a, const int64_t *rows, int64_t n, struct hs_range *r, size_t *nr,
			 uint64_t *left)
{
	size_t first = *nr;

	for (int64_t i = 0; i < n && *left;) {
		int64_t k = 1;
		while (i + k < n && rows[i + k] == rows[i] + k)
			k++;
		uint64_t off = a->skip + (uint64_t)rows[i] * a->row_bytes, len = (uint64_t)k * a->row_bytes;
		uint64_t c0 = off / a->chunk, c1 = (off + len - 1) / a->chunk + 1;
		i += k;
		if (*nr > first && c0 >= r[*nr - 1].first && c0 <= r[*nr - 1].first + r[*nr - 1].n) {
			struct hs_range *p = &r[*nr - 1];
			if (c0 < p->first + p->n) /* the tail already there */
				c0 = p->first + p->n;
			if (c1 <= c0)
				continue;
			uint64_t m = c1 - c0 < *left ? c1 - c0 : *left;
			p->n += m;
			*left -= m;
			continue;
		}
		uint64_t m = c1 - c0 < *left ? c1 - c0 : *left;
		r[(*nr)++] = (struct hs_range){ a->ten, c0, m };
		*left -= m;
	}
}

/* A store-backed dataset: read the chunks a batch's rows lie in (data and
 * labels) with one submission and one wait, where the gathers that follow
 * pinned a chunk at a time, each a read and a wait of its own (LeNet's batch
 * at a quarter of its peak: 4 such round trips a step, 0.3-0.45 ms of a
 * 3 ms step).  At most an eighth of the store's budget is read ahead, and
 * never more than is free: nothing resident is evicted for it.  The
 * gathers pin the rest (and anything dropped meanwhile) as before, so this
 * only saves time. */
void hp_dataset_prefetch(struct hp_dataset *d, struct hs_store *st, const int64_t *rows, int64_t n)
{
	struct hs_store_stats ss;
	struct hs_prefetch *h = NULL;
	struct hs_range *r;
	size_t nr = 0;
	uint64_t left;

	if (!st || !d->x.ten || n <= 0)
		return;
	if (hs_store_stats(st, &ss) < 0 || !ss.budget || !d->x.chunk)
		return;
	left = ss.budget > ss.resident ? ss.budget - ss.resident : 0;
	left = (left < ss.budget / 8 ? left : ss.budget / 8) / d->x.chunk;
	if (left < 2)
		return; /* no room worth a batch */
	if (!(r = calloc(2 * (size_t)n, sizeof *r)))
		return;
	batch_ranges(&d->x, rows, n, r, &nr, &left);
	if (d->y.ten)
		batch_ranges(&d->y, rows, n, r, &nr, &left);
	if (nr && hs_prefetch_many(r, nr, &h) == 0)
		hs_prefetch_wait(h); /* a failed read is the gather's to report: its pin reads again */
	free(r);
}

/* 1 once every chunk is in DRAM or being read; 0: the store had no room
 * for some, the runtime calls again at the run's end for them (the
 * gathers read what neither covers).  LeNet on 2 threads at a quarter of
 * its peak found room for half its batch where the plan said there was. */
static int ahead_fire(void *arg, uint64_t room)
{
	struct hp_dataset *d = arg;
	int k = d->ahead_h[0] != NULL, rc;

	if (!d->nahead || d->ahead_h[1])
		return 1;
	rc = hs_readahead(d->ahead, d->nahead, room, &d->ahead_h[k]);
	return rc == 0 || rc < 0; /* (a failure: the gathers read and report) */
}

/* The next batch's chunks are read during this run, where the plan has
 * room for them, instead of between the runs with the compute waiting:
 * LeNet trained at a quarter of its peak, whose 458 KB data set is larger
 * than its budget, waited 170-400 us a step there for one round trip. */
int hp_dataset_ahead(struct hp_dataset *d, struct hp_session *s, const int64_t *rows, int64_t n)
{
	uint64_t left = UINT64_MAX, bytes = 0;

	if (!d->x.ten || n <= 0)
		return 0;
	if (!d->ahead && !(d->ahead = calloc(2 * (size_t)n, sizeof *d->ahead)))
		return hp_error(-ENOMEM, "out of memory");
	d->nahead = 0;
	batch_ranges(&d->x, rows, n, d->ahead, &d->nahead, &left);
	if (d->y.ten)
		batch_ranges(&d->y, rows, n, d->ahead, &d->nahead, &left);
	for (size_t k = 0; k < d->nahead; k++)
		bytes += d->ahead[k].n * d->x.chunk;
	return d->nahead ? hp_session_set_ahead(s, bytes, ahead_fire, d) : 0;
}

void hp_dataset_ahead_wait(struct hp_dataset *d)
{
	for (int k = 0; k < 2; k++) {
		if (d->ahead_h[k])
			hs_prefetch_wait(d->ahead_h[k]); /* a failed read is the gather's to report: its pin reads again */
		d->ahead_h[k] = NULL;
	}
}

int hp_darray_gather(struct hp_darray *a, const int64_t *rows, int64_t n, void *dst)
{
	unsigned char *out = dst;

	if (a->ten)
		return store_gather(a, rows, n, out);
	for (int64_t i = 0; i < n;) {
		int64_t k = 1;
		while (i + k < n && rows[i + k] == rows[i] + k)
			k++;
		uint64_t off = (uint64_t)rows[i] * a->row_bytes, len = (uint64_t)k * a->row_bytes;
		memcpy(out, (const unsigned char *)a->map + a->offset + off, len);
		out += len;
		i += k;
	}
	return 0;
}

static void close_array(struct hp_darray *a)
{
	if (a->ten)
		hs_tensor_drop(a->ten);
	if (a->map)
		munmap(a->map, a->map_len);
	free(a->path);
	free(a->what);
	memset(a, 0, sizeof *a);
}

void hp_dataset_close(struct hp_dataset *d)
{
	hp_dataset_ahead_wait(d);
	free(d->ahead);
	free(d->ahead_rows);
	close_array(&d->x);
	close_array(&d->y);
}

/* s without its dim 0 (the sample), as hp_shape_str writes it. */
static char *sample_dims(const struct hp_shape *s, char *buf, size_t len)
{
	struct hp_shape t = { 0 };

	for (int i = 1; i < s->rank; i++)
		t.dims[t.rank++] = s->dims[i];
	return hp_shape_str(&t, buf, len);
}

/* Labels input lv (the loss's, read by output `on`) takes the label
 * file's samples: its dtype (int32 widened to int64) and its sample dims;
 * sets t->widen_labels.  The trainer's (train.c) and --pipeline's last
 * stage's (pipe_build.c). */
int hp_train_fit_labels(struct hp_trainer *t, const struct hp_graph *g, const struct hp_value *lv, const char *on)
{
	const struct hp_darray *y = &t->data.y;
	char a[128], b[128], c[128] = "";
	int ok = lv->shape.rank == y->shape.rank, x = hp_graph_find_value(g, on);

	t->widen_labels = lv->dtype == HP_I64 && y->dtype == HP_I32;
	if (lv->dtype != y->dtype && !t->widen_labels)
		return hp_error(HP_EDATA, "%s is %s but the loss wants %s labels", y->what, hp_dtype_name(y->dtype),
				hp_dtype_name(lv->dtype));
	for (int i = 1; ok && i < y->shape.rank; i++)
		ok = lv->shape.dims[i] == y->shape.dims[i];
	if (ok)
		return 0;
	/* a sequence model's logits: say what labels with the classes last would be */
	if (t->o.spec.loss == HP_LOSS_CROSS_ENTROPY && x >= 0 && g->values[x].shape.rank >= 3) {
		struct hp_shape s = g->values[x].shape;
		s.rank--;
		snprintf(c, sizeof c, ", classes on axis 1; or %s with the classes on its last axis",
			 sample_dims(&s, (char[96]){ 0 }, 96));
	}
	return hp_error(HP_EDATA, "%s samples are %s but the loss wants labels of %s per sample (from output '%s'%s)",
			y->what, sample_dims(&y->shape, a, sizeof a), sample_dims(&lv->shape, b, sizeof b), on, c);
}
