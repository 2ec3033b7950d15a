/* Statistics page: hpdlf-store.<pid> in a private per-user directory
 * (/dev/shm/hpdlf-<uid>, or $HPDLF_STATS_DIR), a versioned header and a
 * struct hs_store_stats under a seqlock, so another process (the inspector)
 * reads a consistent snapshot without stopping the owner.
 *
 * Any local user can plant a link or a FIFO under a name in /dev/shm, so
 * neither side trusts a name: the directory must be this user's alone; the
 * writer creates under a random name with O_EXCL|O_NOFOLLOW and renames;
 * readers never follow a link nor wait on a FIFO, and take only a regular
 * file of this user with the exact size and magic.  docs/store-format.md */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/store_internal.h"

#define PAGE_MAGIC "HPDLFST\0"
#define PAGE_VERSION 2u  /* 1: no tensor section (still read) */
#define PUBLISH_EVERY_NS 10000000ull /* at most 100 updates a second */
#define DIR_ENV "HPDLF_STATS_DIR"
#define NAME_FMT "hpdlf-store.%ld"
#define TMP_TRIES 16

struct statpage {
	char magic[8];
	uint32_t version;
	uint32_t header_size;   /* offsetof(struct statpage, stats) */
	uint32_t stats_size;    /* sizeof(struct hs_store_stats) */
	int32_t pid;
	uint64_t start_time;    /* field 22 of /proc/<pid>/stat: tells a reused pid */
	_Atomic uint64_t seq;   /* odd while the owner writes */
	uint64_t updated_ns;    /* CLOCK_REALTIME */
	/* the launcher's job and this process's rank in it (launch.c's
	 * variables), so the inspector can group the ranks of one job: rank
	 * plus one (0: not launched as a rank), the job's size, the job id
	 * NUL-padded ("" when none).  Were reserved zero bytes: a page of an
	 * older writer reads as "no job", hence no layout change. */
	int32_t rank1;
	int32_t nranks;
	char job[24];
	struct hs_store_stats stats;
	/* version 2: the per-tensor section (statpage_tensors.c) */
	uint64_t tick;
	uint32_t ntensors;
	uint32_t tensor_size;   /* sizeof(struct hs_page_tensor) */
	struct hs_page_tensor tensor[HS_PAGE_TENSORS];
};

_Static_assert(sizeof(struct hs_store_stats) % 8 == 0, "stats are 64-bit words");
_Static_assert(offsetof(struct statpage, stats) == 80, "layout version 1 (docs/store-format.md)");

#define HEADER_SIZE offsetof(struct statpage, stats)
#define V1_SIZE offsetof(struct statpage, tick)
_Static_assert(V1_SIZE == 3808 && sizeof(struct hs_page_tensor) == 192 && sizeof(struct statpage) == 16112,
	       "layout version 2 (docs/store-format.md)");

/* Bytes of a page of layout version v (1 or 2). */
static size_t page_size(uint32_t v)
{
	return v == 1 ? V1_SIZE : sizeof(struct statpage);
}

/* st->page of a store that publishes one. */
struct writer {
	struct statpage *map;
	int dfd;                /* the checked directory: the page is unlinked through it */
	char name[32];
};

static uint64_t random_u64(void)
{
	uint64_t v;
	struct timespec ts;

	if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
		return v;
	/* No entropy yet (early boot): O_EXCL keeps a guessable name safe. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
}

uint64_t (*hs_statpage_rand)(void) = random_u64;

static const char *file_kind(mode_t m)
{
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	return S_ISREG(m) ? "a regular file" : "not a regular file";
}

static int dir_path(char *buf, size_t len)
{
	const char *env = getenv(DIR_ENV);
	int n;

	if (env && *env) {
		/* the writer and its readers run in different directories */
		if (env[0] != '/')
			return hp_error(HP_EUSAGE, DIR_ENV "=%s: not an absolute path", env);
		n = snprintf(buf, len, "%s", env);
		/* "dir/" would follow a link named dir despite O_NOFOLLOW */
		while (n > 1 && (size_t)n < len && buf[n - 1] == '/')
			buf[--n] = 0;
	} else {
		n = snprintf(buf, len, "/dev/shm/hpdlf-%lu", (unsigned long)geteuid());
	}
	if (n < 0 || (size_t)n >= len)
		return hp_error(HP_EUSAGE, "stats page directory: path longer than %zu bytes", len - 1);
	return 0;
}

/* Why a directory is not private to this user; NULL if it is. */
static const char *dir_unsafe(const struct stat *sb, char *why, size_t len)
{
	if (!S_ISDIR(sb->st_mode))
		snprintf(why, len, "%s, not a directory", file_kind(sb->st_mode));
	else if (sb->st_uid != geteuid())
		snprintf(why, len, "owned by uid %lu, not by this user (uid %lu)", (unsigned long)sb->st_uid,
			 (unsigned long)geteuid());
	else if (sb->st_mode & 077)
		snprintf(why, len, "mode %04o lets group or others in (chmod 700 it)", (unsigned)(sb->st_mode & 07777));
	else
		return NULL;
	return why;
}

/* A descriptor of the page directory, checked private: a real directory
 * (a link is not followed), owned by this user, no group or other access.
 * `create`: make it first (0700) if it does not exist. */
static int dir_open(const char *path, int create)
{
	struct stat sb;
	char why[128];
	int fd, e;

	if (create && mkdir(path, 0700) < 0 && errno != EEXIST)
		return hp_error(-errno, "%s: cannot create the stats page directory: %s", path, strerror(errno));
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		if ((e == ELOOP || e == ENOTDIR) && lstat(path, &sb) == 0 && dir_unsafe(&sb, why, sizeof why))
			return hp_error(-EPERM, "%s: %s; stats pages need a private directory", path, why);
		return hp_error(-e, "%s: %s", path, strerror(e));
	}
	if (fstat(fd, &sb) < 0) {
		e = errno;
		close(fd);
		return hp_error(-e, "%s: %s", path, strerror(e));
	}
	if (dir_unsafe(&sb, why, sizeof why)) {
		close(fd);
		return hp_error(-EPERM, "%s: %s; stats pages need a private directory", path, why);
	}
	return fd;
}

int hs_statpage_dir(char *buf, size_t len, int *dirfd)
{
	int rc = dir_path(buf, len);

	if (rc < 0)
		return rc;
	rc = dir_open(buf, 0);
	if (rc < 0)
		return rc;
	if (dirfd)
		*dirfd = rc;
	else
		close(rc);
	return 0;
}

char *hs_statpage_path(pid_t pid, char *buf, size_t len)
{
	char dir[PATH_MAX];
	int n;

	if (dir_path(dir, sizeof dir) < 0)
		return NULL;
	n = snprintf(buf, len, "%s/" NAME_FMT, dir, (long)pid);
	return n >= 0 && (size_t)n < len ? buf : NULL;
}

/* Start time of a process in clock ticks after boot, 0 if unknown. */
static uint64_t proc_start_time(pid_t pid)
{
	char path[64], line[1024];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (fgets(line, sizeof line, f)) {
		char *p = strrchr(line, ')'); /* the command name may hold spaces */
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
				&v) != 1)
			v = 0;
	}
	fclose(f);
	return v;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* A new file under a random name no one else can have planted: O_EXCL
 * refuses anything already there, a link included. */
static int create_tmp(int dfd, char *tmp, size_t len)
{
	for (int i = 0; i < TMP_TRIES; i++) {
		snprintf(tmp, len, "." NAME_FMT ".%016" PRIx64, (long)getpid(), hs_statpage_rand());
		int fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			return fd >= 0 ? fd : -errno;
	}
	return -EEXIST;
}

/* The first of `names` set in the environment, or NULL. */
static const char *first_env(const char *const *names, int n)
{
	for (int i = 0; i < n; i++) {
		const char *v = getenv(names[i]);
		if (v && *v)
			return v;
	}
	return NULL;
}

/* Job id, rank and size as the launcher gave them: Slurm's job and step
 * first (srun also sets PMIx variables, but the Slurm id is the one its
 * users know), then PMIx's namespace, then Open MPI's own job id.  A job id
 * longer than the field keeps its tail, where launchers put the counter. */
static void page_ident(struct statpage *p)
{
	static const char *const ranks[] = { "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID" };
	static const char *const sizes[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS" };
	static const char *const jobs[] = { "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid" };
	const char *r = first_env(ranks, 4), *n = first_env(sizes, 4), *j = getenv("SLURM_JOB_ID");
	const char *step = getenv("SLURM_STEP_ID");
	char id[128];

	if (j && *j)
		snprintf(id, sizeof id, "%s%s%s", j, step && *step ? "." : "", step && *step ? step : "");
	else
		snprintf(id, sizeof id, "%s", (j = first_env(jobs, 3)) ? j : "");
	size_t l = strlen(id), keep = l < sizeof p->job - 1 ? l : sizeof p->job - 1;
	memcpy(p->job, id + l - keep, keep);
	p->rank1 = r && id[0] ? (int32_t)strtol(r, NULL, 10) + 1 : 0;
	p->nranks = n && p->rank1 > 0 ? (int32_t)strtol(n, NULL, 10) : 0;
}

/* Create, size, map and fill the page under a temporary name, then rename
 * it onto its own: readers never see a half-initialised page. */
static int writer_open(const char *dir, struct writer *w)
{
	char tmp[64];
	struct statpage *p;
	int fd, rc;

	w->dfd = dir_open(dir, 1);
	if (w->dfd < 0)
		return w->dfd;
	snprintf(w->name, sizeof w->name, NAME_FMT, (long)getpid());
	fd = create_tmp(w->dfd, tmp, sizeof tmp);
	if (fd == -EEXIST)
		return hp_error(fd, "%s: cannot create a page: %d random names taken", dir, TMP_TRIES);
	if (fd < 0)
		return hp_error(fd, "%s/%s: cannot create: %s", dir, tmp, strerror(-fd));
	if (ftruncate(fd, sizeof *p) < 0) {
		rc = hp_error(-errno, "%s/%s: cannot size: %s", dir, tmp, strerror(errno));
		goto fail_fd;
	}
	p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = hp_error(-errno, "%s/%s: cannot map: %s", dir, tmp, strerror(errno));
		goto fail_fd;
	}
	close(fd);
	p->version = PAGE_VERSION;
	p->header_size = HEADER_SIZE;
	p->stats_size = sizeof p->stats;
	p->tensor_size = sizeof p->tensor[0];
	p->pid = getpid();
	p->start_time = proc_start_time(getpid());
	page_ident(p);
	memcpy(p->magic, PAGE_MAGIC, 8);
	/* rename replaces a link planted under the final name, never follows it */
	if (renameat(w->dfd, tmp, w->dfd, w->name) < 0) {
		rc = hp_error(-errno, "%s/%s: cannot publish: %s", dir, w->name, strerror(errno));
		munmap(p, sizeof *p);
		unlinkat(w->dfd, tmp, 0);
		return rc;
	}
	w->map = p;
	return 0;
fail_fd:
	close(fd);
	unlinkat(w->dfd, tmp, 0);
	return rc;
}

/* Statistics are a convenience: a page that cannot be made safely costs one
 * warning, never the job. */
int hs_statpage_create(struct hs_store *st)
{
	struct writer *w = calloc(1, sizeof *w);
	char dir[PATH_MAX];
	int rc;

	if (!w) {
		rc = hp_error(-ENOMEM, "out of memory");
	} else {
		w->dfd = -1;
		rc = dir_path(dir, sizeof dir);
		if (rc == 0)
			rc = writer_open(dir, w);
	}
	if (rc < 0) {
		hp_log(HP_LOG_WARN, "store: no statistics page, hpdlf-store-inspect will not see this process: %s",
		       hp_errmsg());
		if (w && w->dfd >= 0)
			close(w->dfd);
		free(w);
		return 0;
	}
	st->page = w;
	hs_statpage_publish(st, 1);
	/* pages of processes killed before they could remove theirs (SIGKILL,
	 * a crash): the next process of this user reclaims them */
	int n = 0;
	if (hs_statpage_gc(&n) == 0 && n)
		hp_log(HP_LOG_INFO, "store: removed %d stats page%s of processes that are gone", n, n > 1 ? "s" : "");
	return 0;
}

void hs_statpage_publish(struct hs_store *st, int force)
{
	struct writer *w = st->page;
	struct statpage *p = w ? w->map : NULL;
	uint64_t now;

	if (!p)
		return;
	now = hs_now_ns();
	/* every pin and unpin calls here: look at the clock before taking the
	 * lock (a stale read only delays or repeats an update) */
	if (!force && now - __atomic_load_n(&st->page_last_ns, __ATOMIC_RELAXED) < PUBLISH_EVERY_NS)
		return;
	pthread_mutex_lock(&st->mu);
	if (force || now - st->page_last_ns >= PUBLISH_EVERY_NS) {
		__atomic_store_n(&st->page_last_ns, now, __ATOMIC_RELAXED);
		uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
		atomic_store_explicit(&p->seq, s + 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
		hs_store_fill_stats(st, &p->stats);
		p->ntensors = hs_statpage_fill_tensors(st, p->tensor, &p->tick);
		p->updated_ns = realtime_ns();
		atomic_store_explicit(&p->seq, s + 2, memory_order_release);
	}
	pthread_mutex_unlock(&st->mu);
}

void hs_statpage_destroy(struct hs_store *st)
{
	struct writer *w = st->page;

	if (!w)
		return;
	if (w->map->pid == getpid()) /* a forked child closing its copy leaves the page */
		unlinkat(w->dfd, w->name, 0);
	munmap(w->map, sizeof *w->map);
	close(w->dfd);
	free(w);
	st->page = NULL;
}

/* The page's figures into out (a version-1 page has no tensor section). */
static void copy_page(const struct statpage *p, size_t len, struct hs_statpage_info *out,
		      struct hs_statpage_tensors *tens)
{
	memcpy(&out->stats, (const void *)&p->stats, sizeof out->stats);
	out->updated_ns = p->updated_ns;
	if (!tens)
		return;
	tens->tick = 0;
	tens->ntensors = 0;
	if (p->version < 2 || len < sizeof *p)
		return;
	tens->tick = p->tick;
	tens->ntensors = p->ntensors > HS_PAGE_TENSORS ? HS_PAGE_TENSORS : p->ntensors;
	memcpy(tens->tensor, (const void *)p->tensor, tens->ntensors * sizeof tens->tensor[0]);
}

/* Copy a consistent snapshot out of a mapped page. */
static int snapshot(const struct statpage *p, size_t len, struct hs_statpage_info *out,
		    struct hs_statpage_tensors *tens)
{
	for (int tries = 0; tries < 100000; tries++) {
		uint64_t s1 = atomic_load_explicit(&p->seq, memory_order_acquire);
		if (s1 & 1)
			continue;
		copy_page(p, len, out, tens);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&p->seq, memory_order_relaxed) == s1)
			return 0;
	}
	return -EAGAIN;
}

static int check_header(const struct statpage *p, const char *path)
{
	if (memcmp(p->magic, PAGE_MAGIC, 8) != 0)
		return hp_error(HP_EFORMAT, "%s: not an hpdlf stats page (no magic)", path);
	/* version 1 (an older hpdlf) is still read, without tensors */
	if ((p->version != PAGE_VERSION && p->version != 1) || p->header_size != HEADER_SIZE ||
	    p->stats_size != sizeof(struct hs_store_stats))
		return hp_error(HP_EFORMAT,
				"%s: stats page layout version %u (%u+%u bytes); this build reads versions 1 and %u "
				"(use the hpdlf-store-inspect of the hpdlf that runs this process)",
				path, p->version, p->header_size, p->stats_size, PAGE_VERSION);
	return 0;
}

/* Whether what sits under the page's name may be read as a page: a regular
 * file of this user holding the version-1 header of `pid`'s page, of
 * exactly a page's size. */
static int check_file(int fd, const char *path, pid_t pid)
{
	struct statpage h;
	struct stat sb;
	int rc;

	if (fstat(fd, &sb) < 0)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return hp_error(HP_EFORMAT, "%s: %s, not a stats page", path, file_kind(sb.st_mode));
	if (sb.st_uid != geteuid())
		return hp_error(-EPERM, "%s: owned by uid %lu, not by this user (uid %lu)", path,
				(unsigned long)sb.st_uid, (unsigned long)geteuid());
	if (sb.st_size < (off_t)HEADER_SIZE || pread(fd, &h, HEADER_SIZE, 0) != (ssize_t)HEADER_SIZE)
		return hp_error(HP_EFORMAT, "%s: %lld bytes, too short for a stats page", path, (long long)sb.st_size);
	rc = check_header(&h, path);
	if (rc == 0 && h.pid != pid)
		rc = hp_error(HP_EFORMAT, "%s: the page of pid %ld under the name of pid %ld", path, (long)h.pid,
			      (long)pid);
	if (rc == 0 && sb.st_size != (off_t)page_size(h.version))
		rc = hp_error(HP_EFORMAT, "%s: %lld bytes; a version-%u stats page has %zu", path,
			      (long long)sb.st_size, h.version, page_size(h.version));
	uint32_t tsize = 0;
	if (rc == 0 && h.version >= 2 &&
	    (pread(fd, &tsize, sizeof tsize, offsetof(struct statpage, tensor_size)) != (ssize_t)sizeof tsize ||
	     tsize != sizeof(struct hs_page_tensor)))
		rc = hp_error(HP_EFORMAT, "%s: tensor entries of %u bytes; this build reads %zu", path, tsize,
			      sizeof(struct hs_page_tensor));
	return rc;
}

/* Open the page of `pid` without following a link or waiting on a FIFO. */
static int page_open(pid_t pid, char *path, size_t len)
{
	char name[32];
	int dfd, fd, rc;

	if ((rc = dir_path(path, len)) < 0)
		return rc;
	if ((dfd = dir_open(path, 0)) < 0)
		return dfd;
	snprintf(name, sizeof name, NAME_FMT, (long)pid);
	if (strlen(path) + 1 + strlen(name) < len)
		strcat(strcat(path, "/"), name);
	fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
	rc = -errno;
	close(dfd);
	if (fd >= 0)
		return fd;
	if (rc == -ELOOP)
		return hp_error(HP_EFORMAT, "%s: a symbolic link, not a stats page (not followed)", path);
	if (rc == -ENXIO)
		return hp_error(HP_EFORMAT, "%s: a socket, not a stats page", path);
	return hp_error(rc, "%s: %s", path, strerror(-rc));
}

int hs_statpage_read(pid_t pid, struct hs_statpage_info *out)
{
	return hs_statpage_read_tensors(pid, out, NULL);
}

int hs_statpage_read_tensors(pid_t pid, struct hs_statpage_info *out, struct hs_statpage_tensors *tens)
{
	char path[PATH_MAX];
	struct statpage *p;
	int fd, rc;

	if (tens && tens->size != sizeof *tens)
		return hp_error(HP_EUSAGE, "hs_statpage_read_tensors: size %zu; this library knows %zu", tens->size,
				sizeof *tens);
	fd = page_open(pid, path, sizeof path);
	if (fd < 0)
		return fd;
	rc = check_file(fd, path, pid);
	/* the size check_file accepted: a version-1 page is shorter */
	struct stat sb;
	size_t len = rc == 0 && fstat(fd, &sb) == 0 ? (size_t)sb.st_size : 0;
	if (rc == 0 && len != V1_SIZE && len != sizeof *p)
		rc = hp_error(HP_EFORMAT, "%s: changed size while being read", path);
	p = rc < 0 ? MAP_FAILED : mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (rc == 0 && p == MAP_FAILED)
		rc = hp_error(-errno, "%s: cannot map: %s", path, strerror(errno));
	close(fd);
	if (rc < 0)
		return rc;
	int dead = (kill(pid, 0) < 0 && errno == ESRCH) || (p->start_time && proc_start_time(pid) != p->start_time);
	out->pid = p->pid;
	out->version = p->version;
	if (dead) {
		/* No writer is left: take the page as it is, even mid-update. */
		copy_page(p, len, out, tens);
		rc = hp_error(-ESRCH, "%s: stale page: process %ld is gone (it did not close its store)", path,
			      (long)pid);
	} else if ((rc = snapshot(p, len, out, tens)) < 0) {
		rc = hp_error(rc, "%s: the owner kept updating; no consistent snapshot", path);
	}
	munmap(p, len);
	return rc;
}

int hs_statpage_read_job(pid_t pid, struct hs_statpage_job *out)
{
	char path[PATH_MAX];
	struct statpage h;
	int fd, rc;

	memset(out, 0, sizeof *out);
	out->rank = -1;
	fd = page_open(pid, path, sizeof path);
	if (fd < 0)
		return fd;
	rc = check_file(fd, path, pid);
	if (rc == 0 && pread(fd, &h, HEADER_SIZE, 0) != (ssize_t)HEADER_SIZE)
		rc = hp_error(HP_EFORMAT, "%s: too short for a stats page", path);
	close(fd);
	if (rc < 0)
		return rc;
	/* written once before the page was published: no seqlock needed */
	memcpy(out->job, h.job, sizeof h.job);
	out->job[sizeof out->job - 1] = 0;
	out->rank = h.rank1 > 0 ? h.rank1 - 1 : -1;
	out->nranks = h.rank1 > 0 && h.nranks > 0 ? h.nranks : 0;
	return 0;
}

/* ---- reclaiming the pages of dead processes ------------------------------ */

/* 1 if pid, which published a page whose header says start_time, is gone
 * (or its pid now names another process); 0 if it may still run. */
static int owner_gone(pid_t pid, uint64_t start_time)
{
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 1;
	return start_time && proc_start_time(pid) != start_time;
}

/* The page under `name` in dfd is a page of this user whose owner is gone:
 * read through a descriptor that neither follows a link nor waits. */
static int page_is_stale(int dfd, const char *name, pid_t pid)
{
	struct statpage h;
	int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC), stale;

	if (fd < 0)
		return 0;
	stale = check_file(fd, name, pid) == 0 && pread(fd, &h, HEADER_SIZE, 0) == (ssize_t)HEADER_SIZE &&
		owner_gone(pid, h.start_time);
	close(fd);
	return stale;
}

/* A name this module makes: "hpdlf-store.<pid>" (a page) or
 * ".hpdlf-store.<pid>.<hex>" (a page being made); 0 if neither. */
static pid_t page_name_pid(const char *name, int *tmp)
{
	const char *prefix = "hpdlf-store.";
	char *end;
	long pid;

	*tmp = name[0] == '.';
	name += *tmp;
	if (strncmp(name, prefix, strlen(prefix)))
		return 0;
	pid = strtol(name + strlen(prefix), &end, 10);
	if (pid <= 0 || pid > INT_MAX || end == name + strlen(prefix) || (*tmp ? *end != '.' : *end != 0))
		return 0;
	return (pid_t)pid;
}

int hs_statpage_gc(int *removed)
{
	char dir[PATH_MAX];
	int dfd, n = 0, rc = hs_statpage_dir(dir, sizeof dir, &dfd);
	DIR *d;

	if (removed)
		*removed = 0;
	if (rc == -ENOENT)
		return 0; /* no page was ever published */
	if (rc < 0)
		return rc;
	if (!(d = fdopendir(dfd))) {
		close(dfd);
		return hp_error(-errno, "%s: %s", dir, strerror(errno));
	}
	for (struct dirent *e; (e = readdir(d));) {
		int tmp;
		pid_t pid = page_name_pid(e->d_name, &tmp);
		if (!pid || pid == getpid())
			continue;
		/* a page being made belongs to a live maker until its pid is gone */
		int gone = tmp ? kill(pid, 0) < 0 && errno == ESRCH : page_is_stale(dirfd(d), e->d_name, pid);
		if (gone && unlinkat(dirfd(d), e->d_name, 0) == 0)
			n++;
	}
	closedir(d);
	if (removed)
		*removed = n;
	return 0;
}
