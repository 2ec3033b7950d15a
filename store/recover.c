/* Putting chunks back into their redundancy after a tier lost copies (a
 * remote daemon died): hs_store_recover in hpdlf/store.h.
 *
 * The store does it, not the tier: only the store knows which chunk an
 * extent holds, whether DRAM has it, and it moves chunks under its own
 * states (a chunk being loaded or written is left for the next check), so
 * a re-homed chunk can never race a write of the same chunk.  Re-homing is
 * a read of the surviving copy (or of the source) and a write-back to
 * wherever placement puts the chunk now; the old extent is then freed,
 * which also lets a restarted daemon rejoin (store/remote/rejoin.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/store_internal.h"

enum { JOB_REHOME = 0, JOB_REFILL = 1 };

struct job {
	struct hs_tensor *t;
	uint64_t i;
	int kind;
	struct hs_source src;
};

struct walk {
	struct job *jobs;
	size_t n, cap;
	int busy;               /* chunks in motion: looked at again at the next check */
	uint64_t kept, kept_bytes, dropped, lost;
	char names[400];        /* the tensors lost, for the message */
};

void hs_recover_opts_init(struct hs_recover_opts *o, size_t size)
{
	struct hs_recover_opts d = { .size = sizeof d };

	if (size > sizeof d)
		size = sizeof d;
	memcpy(o, &d, size);
	o->size = size;
}

static const char *label(const struct hs_tensor *t)
{
	return t->label[0] ? t->label : t->name ? t->name : "(anonymous)";
}

static int push(struct walk *w, struct hs_tensor *t, uint64_t i, int kind, const struct hs_source *src)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 64;
		struct job *j = realloc(w->jobs, cap * sizeof *j);
		if (!j)
			return -ENOMEM;
		w->jobs = j;
		w->cap = cap;
	}
	w->jobs[w->n++] = (struct job){ t, i, kind, src ? *src : (struct hs_source){ 0 } };
	return 0;
}

static void name_lost(struct walk *w, const struct hs_tensor *t)
{
	size_t l = strlen(w->names);

	if (strstr(w->names, label(t)))
		return;
	if (l + strlen(label(t)) + 8 < sizeof w->names)
		snprintf(w->names + l, sizeof w->names - l, "%s'%s'", l ? ", " : "", label(t));
	else if (!strstr(w->names, ", ..."))
		snprintf(w->names + l, sizeof w->names - l, ", ...");
}

/* What to do with chunk i of t, whose copy on tier k lost redundancy
 * (lock held).  *act is the tensor's verdict for lost chunks, asked once. */
static int judge(struct hs_store *st, struct hs_tensor *t, uint64_t i, int live, const struct hs_recover_opts *o,
		 int *act, struct hs_source *src, struct walk *w)
{
	struct hs_chunk *c = &t->ch[i];

	if (c->state == CH_RESIDENT) { /* DRAM holds it: written anew at its eviction */
		hs_chunk_release_copy(st, t, c);
		c->dirty = 1;
		w->kept++;
		w->kept_bytes += hs_chunk_iolen(t, i);
		return 0;
	}
	if (live > 0)
		return push(w, t, i, JOB_REHOME, NULL);
	if (*act < 0)
		*act = o && o->lost ? o->lost(o->arg, t, src) : HS_LOST_FAIL;
	if (*act == HS_LOST_DROP) {
		hs_chunk_release_copy(st, t, c); /* absent without a copy: zeros until rewritten */
		c->unverified = 0;
		w->dropped++;
		return 0;
	}
	if (*act == HS_LOST_REFILL && (src->path || src->mem))
		return push(w, t, i, JOB_REFILL, src);
	w->lost++;
	name_lost(w, t);
	return 0;
}

/* Every chunk whose copy on tier k has fewer live copies than it was given (lock held). */
static int walk_tier(struct hs_store *st, int k, const struct hs_recover_opts *o, struct walk *w)
{
	struct hs_tier *tier = st->tiers[k];
	int rc = 0;

	for (struct hs_tensor *t = st->list; t && rc == 0; t = t->next) {
		struct hs_source src = { 0 };
		int act = -1;
		for (uint64_t i = 0; i < t->nchunks && rc == 0; i++) {
			struct hs_chunk *c = &t->ch[i];
			int want = 1, live;
			if (c->tier != k)
				continue;
			if (c->state == CH_LOADING || c->state == CH_WRITING) {
				w->busy = 1;
				continue;
			}
			live = tier->ops->copies(tier, c->addr, &want);
			if (live >= 0 && live < want)
				rc = judge(st, t, i, live, o, &act, &src, w);
		}
	}
	return rc;
}

/* The chunk's bytes from its source (pinned for overwriting at p). */
static int refill(struct hs_store *st, const struct job *j, void *p)
{
	uint64_t off = j->i * st->cs, len = hs_chunk_len(j->t, j->i);

	if (j->src.mem) {
		memcpy(p, (const char *)j->src.mem + off, len);
		return 0;
	}
	int fd = open(j->src.path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return hp_error(-errno, "%s: %s", j->src.path, strerror(errno));
	ssize_t got = pread(fd, p, len, (off_t)(j->src.offset + off));
	int err = errno;
	close(fd);
	if (got != (ssize_t)len)
		return hp_error(got < 0 ? -err : -EIO, "%s: short read of the source of tensor '%s'", j->src.path,
				label(j->t));
	return 0;
}

/* Read the chunk (surviving copy or source) and write it where placement
 * puts it now; *dest: the tier it went to. */
static int rehome(struct hs_store *st, const struct job *j, int *dest)
{
	void *p;
	int rc = hs_pin(j->t, j->i, 1, j->kind == JOB_REFILL ? HS_PIN_OVERWRITE : HS_PIN_READ, &p);

	if (rc < 0)
		return rc;
	if (j->kind == JOB_REFILL) {
		rc = refill(st, j, p);
	} else {
		pthread_mutex_lock(&st->mu);
		hs_chunk_release_copy(st, j->t, &j->t->ch[j->i]);
		j->t->ch[j->i].dirty = 1;
		pthread_mutex_unlock(&st->mu);
	}
	hs_unpin(j->t, j->i, 1);
	if (rc == 0 && (rc = hs_evict(j->t, j->i, 1, HS_TIER_ANY)) > 0)
		rc = 0;
	pthread_mutex_lock(&st->mu);
	*dest = j->t->ch[j->i].tier;
	pthread_mutex_unlock(&st->mu);
	return rc;
}

/* One line: where the chunks went. */
static void report(struct hs_store *st, int k, const struct walk *w, const uint64_t *to, uint64_t refilled)
{
	char where[256] = "";
	size_t l = 0;

	for (int d = 0; d < st->ntiers; d++)
		if (to[d] && l < sizeof where)
			l += (size_t)snprintf(where + l, sizeof where - l, "%s%" PRIu64 " to %s", l ? ", " : "", to[d],
					      st->tiers[d]->name);
	if (w->kept && l < sizeof where)
		snprintf(where + l, sizeof where - l, "%s%" PRIu64 " held in DRAM", l ? ", " : "", w->kept);
	hp_log(HP_LOG_WARN, "store: tier %s lost copies: %" PRIu64 " chunks copied anew (%s), %" PRIu64 " read again "
	       "from their source, %" PRIu64 " dropped (recomputed before they are read)", st->tiers[k]->name,
	       (uint64_t)w->n - refilled + w->kept, where[0] ? where : "none", refilled, w->dropped);
}

static int recover_tier(struct hs_store *st, int k, const struct hs_recover_opts *o, uint64_t epoch)
{
	struct hs_tier *tier = st->tiers[k];
	struct walk w = { 0 };
	uint64_t to[HS_MAX_TIERS] = { 0 }, refilled = 0, bytes = 0;
	int rc;

	pthread_mutex_lock(&st->mu);
	rc = walk_tier(st, k, o, &w);
	st->rec.rehomed += w.kept;
	st->rec.rehomed_bytes += w.kept_bytes;
	st->rec.dropped += w.dropped;
	st->rec.lost += w.lost;
	pthread_mutex_unlock(&st->mu);
	if (rc == 0 && w.lost) {
		int hrc = tier->ops->health ? tier->ops->health(tier) : 0;
		char why[512];
		snprintf(why, sizeof why, "%s", hrc < 0 ? hp_errmsg() : "");
		rc = hp_error(hrc < 0 ? hrc : -EHOSTDOWN, "%s%s%" PRIu64 " chunks of the values %s are lost (no copy "
			      "left, no source to read them from, not recomputed)", why, why[0] ? "; " : "",
			      w.lost, w.names);
	}
	for (size_t j = 0; rc == 0 && j < w.n; j++) {
		int dest = NO_TIER;
		rc = rehome(st, &w.jobs[j], &dest);
		if (rc < 0)
			rc = hp_error_prefix(rc, "store: re-homing tensor '%s' chunk %" PRIu64 " after tier %s lost a copy",
					     label(w.jobs[j].t), w.jobs[j].i, tier->name);
		else if (dest >= 0)
			to[dest]++;
		refilled += w.jobs[j].kind == JOB_REFILL;
		bytes += hs_chunk_iolen(w.jobs[j].t, w.jobs[j].i);
	}
	pthread_mutex_lock(&st->mu);
	st->rec.rehomed += w.n - refilled;
	st->rec.refilled += refilled;
	st->rec.rehomed_bytes += bytes;
	pthread_mutex_unlock(&st->mu);
	if (rc == 0 && !w.busy)
		st->rec_epoch[k] = epoch;
	if (rc == 0) /* also when nothing needed moving: the loss has its verdict */
		report(st, k, &w, to, refilled);
	free(w.jobs);
	return rc;
}

int hs_store_recover(struct hs_store *st, const struct hs_recover_opts *o, struct hs_recover_stats *out)
{
	int rc = 0;

	for (int k = 0; st && k < st->ntiers && rc == 0; k++) {
		struct hs_tier *tier = st->tiers[k];
		if (!tier->ops->copies || !tier->ops->epoch)
			continue;
		uint64_t ep = tier->ops->epoch(tier);
		if (ep != st->rec_epoch[k])
			rc = recover_tier(st, k, o, ep);
	}
	if (rc == 0)
		rc = hs_store_check(st);
	if (out && st) {
		pthread_mutex_lock(&st->mu);
		*out = st->rec;
		pthread_mutex_unlock(&st->mu);
	}
	return rc;
}
