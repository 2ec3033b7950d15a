/* The ranks of a data-parallel job side by side, and their sum: every rank
 * of `mpirun -np N hpdlf-exec ...` publishes its own page, carrying the
 * launcher's job id and its rank (store/statpage.c); pages with the same
 * job id are one job.  The sum is a target of its own (job_sum), so every
 * output format prints it like a process: counters and byte figures are
 * added, latency histograms merged (so its percentiles are the job's), and
 * rates are the members' rates added (each over its own interval). */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tools/inspect.h"

/* A process's page that names its job and rank. */
static int ranked(const struct insp_target *t)
{
	return t->kind == INSP_LOCAL && !t->job_sum && (t->state == INSP_LIVE || t->state == INSP_STALE) &&
	       t->job[0] && t->rank[0];
}

static void add_tier(struct hs_tier_stats *d, const struct hs_tier_stats *s)
{
	/* after the name, struct hs_tier_stats is uint64 counters only */
	uint64_t *a = (uint64_t *)((char *)d + offsetof(struct hs_tier_stats, capacity));
	const uint64_t *b = (const uint64_t *)((const char *)s + offsetof(struct hs_tier_stats, capacity));
	size_t n = (sizeof *d - offsetof(struct hs_tier_stats, capacity)) / sizeof(uint64_t);

	if (!d->name[0])
		memcpy(d->name, s->name, sizeof d->name);
	for (size_t i = 0; i < n; i++)
		a[i] += b[i];
}

static void add_rate(double *d, double s)
{
	if (s >= 0)
		*d = *d < 0 ? s : *d + s;
}

/* Fold member m into the sum target j. */
static void add_member(struct insp_target *j, const struct insp_target *m)
{
	struct hs_store_stats *d = &j->cur.stats;
	const struct hs_store_stats *s = &m->cur.stats;
	int nt = s->ntiers < 0 ? 0 : s->ntiers > HS_MAX_TIERS + 1 ? HS_MAX_TIERS + 1 : s->ntiers;

	d->budget += s->budget;
	d->resident += s->resident;
	d->pinned += s->pinned;
	d->staging += s->staging;
	d->tensors += s->tensors;
	if (!d->chunk_size)
		d->chunk_size = s->chunk_size;
	if (nt > d->ntiers)
		d->ntiers = nt;
	for (int k = 0; k < nt; k++) {
		struct insp_tier_view v;
		add_tier(&d->tier[k], &s->tier[k]);
		insp_tier_view(m, k, &v);
		add_rate(&j->sum_rates[k].read_now, v.read_now);
		add_rate(&j->sum_rates[k].write_now, v.write_now);
		add_rate(&j->sum_rates[k].read_avg, v.read_avg);
		add_rate(&j->sum_rates[k].write_avg, v.write_avg);
	}
	if (m->cur.updated_ns > j->cur.updated_ns)
		j->cur.updated_ns = m->cur.updated_ns;
	if (m->state == INSP_LIVE)
		j->state = INSP_LIVE;
	j->job_sum++;
}

static int cmp_rank(const void *a, const void *b)
{
	const struct insp_target *x = *(const struct insp_target *const *)a, *y = *(const struct insp_target *const *)b;
	long p = strtol(x->rank, NULL, 10), q = strtol(y->rank, NULL, 10);

	return (p > q) - (p < q);
}

/* The sum target of members m[0..k). */
static int make_sum(struct insp_target *j, struct insp_target *const *m, int k)
{
	memset(j, 0, sizeof *j);
	if (!(j->sum_rates = malloc((HS_MAX_TIERS + 1) * sizeof *j->sum_rates)))
		return -ENOMEM;
	for (int i = 0; i <= HS_MAX_TIERS; i++)
		j->sum_rates[i].read_now = j->sum_rates[i].write_now = j->sum_rates[i].read_avg =
			j->sum_rates[i].write_avg = -1;
	j->kind = INSP_LOCAL;
	j->state = INSP_STALE; /* live as soon as one member is */
	j->cur.version = m[0]->cur.version;
	j->nranks = m[0]->nranks;
	snprintf(j->job, sizeof j->job, "%s", m[0]->job);
	snprintf(j->spec, sizeof j->spec, "job %s", m[0]->job);
	for (int i = 0; i < k; i++)
		add_member(j, m[i]);
	return 0;
}

/* Append the ranks of t[first]'s job (in rank order), then their sum. */
static int emit_job(const struct insp_target *t, int n, int first, char *done, struct insp_target *o, int *no)
{
	struct insp_target **m = malloc((size_t)n * sizeof *m);
	int k = 0, rc = 0;

	if (!m)
		return -ENOMEM;
	for (int i = first; i < n; i++)
		if (!done[i] && ranked(&t[i]) && !strcmp(t[i].job, t[first].job)) {
			done[i] = 1;
			m[k++] = (struct insp_target *)&t[i];
		}
	qsort(m, (size_t)k, sizeof *m, cmp_rank);
	for (int i = 0; i < k; i++)
		o[(*no)++] = *m[i];
	if (k >= 2 && (rc = make_sum(&o[*no], m, k)) == 0)
		(*no)++;
	free(m);
	return rc;
}

int insp_group_jobs(const struct insp_target *t, int n, struct insp_target **out, int *nout)
{
	struct insp_target *o = calloc((size_t)(2 * n + 1), sizeof *o);
	char *done = calloc((size_t)n + 1, 1);
	int no = 0, rc = 0;

	if (!o || !done) {
		free(o);
		free(done);
		return -ENOMEM;
	}
	for (int i = 0; i < n && rc == 0; i++) {
		if (done[i])
			continue;
		if (ranked(&t[i]))
			rc = emit_job(t, n, i, done, o, &no);
		else
			o[no++] = t[i];
	}
	free(done);
	if (rc < 0) {
		insp_free_grouped(o, no);
		return rc;
	}
	*out = o;
	*nout = no;
	return 0;
}

void insp_free_grouped(struct insp_target *t, int n)
{
	for (int i = 0; i < n; i++)
		if (t[i].job_sum)
			free(t[i].sum_rates);
	free(t);
}
