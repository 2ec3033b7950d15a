/* Asynchronous SGD across the ranks (asgd.h): the parameters packed into
 * one state, written into peers' mailboxes every exchange_every steps,
 * and the states that arrived blended in, without waiting for anyone
 * (--async-deterministic: behind two barriers, for tests).  A peer the
 * watchdog finds lost, or that finished, is written to no more. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "exec/asgd.h"
#include "exec/comm.h"
#include "exec/comm_mbox.h"
#include "exec/comm_watch.h"
#include "exec/exec_internal.h"
#include "exec/train_internal.h"

struct hp_asgd {
	int *param, nparam;     /* the values the optimizer updates */
	uint64_t *at;           /* each one's offset in the state (floats) */
	size_t n;               /* floats in a state */
	float *w, *w0, *r;      /* this rank's state, before the step, a received one */
	struct hp_asgd_acc acc;
	struct hp_mbox *mb;
	int *cand;
	char *lost_said;        /* by rank: reported as lost already */
	char *report;
};

static int is_update(const struct hp_node *n)
{
	return !strcmp(n->domain, "ai.hpdlf") && (!strcmp(n->op_type, "SGDUpdate") || !strcmp(n->op_type, "AdamUpdate"));
}

/* The values the updates write (input 0 of each), in graph order. */
static int find_params(struct hp_trainer *t, struct hp_asgd *a)
{
	const struct hp_graph *g = t->g;

	a->param = calloc((size_t)g->nnodes + 1, sizeof *a->param);
	a->at = calloc((size_t)g->nnodes + 1, sizeof *a->at);
	if (!a->param || !a->at)
		return hp_error(-ENOMEM, "out of memory");
	for (int i = 0; i < g->nnodes; i++) {
		const struct hp_node *nd = &g->nodes[i];
		int v = nd->ninputs ? nd->inputs[0] : -1;
		if (!is_update(nd) || v < 0 || g->values[v].dtype != HP_F32)
			continue;
		a->at[a->nparam] = a->n;
		a->param[a->nparam++] = v;
		a->n += (size_t)hp_shape_numel(&g->values[v].shape);
	}
	if (!a->n)
		return hp_error(HP_EUSAGE, "%s: --sync async: the model has no parameter to train", t->model);
	return 0;
}

static int io_state(struct hp_trainer *t, float *w, int write)
{
	struct hp_asgd *a = t->asgd;

	for (int i = 0; i < a->nparam; i++) {
		uint64_t bytes = (uint64_t)hp_shape_numel(&t->g->values[a->param[i]].shape) * sizeof(float);
		int rc = write ? hp_session_write_value(t->s, a->param[i], 0, bytes, w + a->at[i])
			       : hp_session_read_value(t->s, a->param[i], 0, bytes, w + a->at[i]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The store's remote tier, if the job has daemons: the mailboxes go there.
 * Every rank is given the same --store, so all choose alike. */
static struct hs_tier *store_daemons(const struct hp_trainer *t)
{
	for (int i = 0; t->o.tiers && i < t->o.ntiers; i++)
		if (t->o.tiers[i].kind == HS_TIER_REMOTE && t->o.tiers[i].tier)
			return t->o.tiers[i].tier;
	return NULL;
}

int hp_asgd_setup(struct hp_trainer *t)
{
	struct hp_asgd *a;
	int rc;

	if (!t->o.async_sgd || t->nranks < 2)
		return 0;
	if (!(a = t->asgd = calloc(1, sizeof *a)))
		return hp_error(-ENOMEM, "out of memory");
	if ((rc = find_params(t, a)) < 0)
		return rc;
	a->w = malloc(a->n * sizeof *a->w);
	a->w0 = malloc(a->n * sizeof *a->w0);
	a->r = malloc(a->n * sizeof *a->r);
	a->acc.sum = malloc(a->n * sizeof *a->acc.sum);
	a->cand = calloc((size_t)t->nranks, sizeof *a->cand);
	a->lost_said = calloc((size_t)t->nranks, 1);
	if (!a->w || !a->w0 || !a->r || !a->acc.sum || !a->cand || !a->lost_said)
		return hp_error(-ENOMEM, "out of memory for the asynchronous state (%zu floats)", a->n);
	struct hs_tier *daemons = store_daemons(t);
	return daemons ? hp_mbox_open_store(daemons, a->n, &a->mb) : hp_mbox_open(a->n, &a->mb);
}

void hp_asgd_free(struct hp_trainer *t)
{
	struct hp_asgd *a = t->asgd;

	if (!a)
		return;
	hp_mbox_close(a->mb);
	free(a->param);
	free(a->at);
	free(a->w);
	free(a->w0);
	free(a->r);
	free(a->acc.sum);
	free(a->cand);
	free(a->lost_said);
	free(a->report);
	free(a);
	t->asgd = NULL;
}

static int64_t every(const struct hp_trainer *t)
{
	return t->o.exchange_every > 0 ? t->o.exchange_every : 4;
}

static int exchange_due(const struct hp_trainer *t)
{
	return (t->step + 1) % every(t) == 0;
}

int hp_asgd_before(struct hp_trainer *t)
{
	if (!t->asgd || !t->o.parzen || !exchange_due(t))
		return 0;
	return io_state(t, t->asgd->w0, 0);
}

static void sleep_ms(double ms)
{
	struct timespec ts = { (time_t)(ms / 1e3), (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Write this rank's state to the peers the schedule picks (alive ones
 * only, unless deterministic: then every rank is alive by contract). */
static int send_state(struct hp_trainer *t, int64_t e, json_object *rep)
{
	struct hp_asgd *a = t->asgd;
	json_object *to = json_object_new_array();
	int nc = 0, k, rc = 0;

	for (int p = 0; p < t->nranks; p++)
		if (p != t->rank && (t->o.async_deterministic || hp_comm_watch_peer(p) == HP_PEER_ALIVE))
			a->cand[nc++] = p;
	k = hp_asgd_pick(a->cand, nc, t->o.exchange_peers > 0 ? t->o.exchange_peers : 1, t->o.seed, t->rank, e);
	for (int i = 0; i < k && rc == 0; i++) {
		rc = hp_mbox_put(a->mb, a->cand[i], t->step + 1, a->w);
		if (rc == HP_EPROTO && !t->o.async_deterministic)
			rc = 0; /* its node is gone: the watchdog will say so */
		json_object_array_add(to, json_object_new_int(a->cand[i]));
	}
	json_object_object_add(rep, "sent_to", to);
	return rc;
}

/* Take what arrived from every sender (in rank order) into the sum. */
static void take_states(struct hp_trainer *t, json_object *rep)
{
	struct hp_asgd *a = t->asgd;
	json_object *got = json_object_new_array();
	int torn = 0;

	a->acc.k = 0;
	for (int q = 0; q < t->nranks; q++) {
		struct hp_mbox_msg msg;
		if (q == t->rank || hp_comm_watch_peer(q) == HP_PEER_LOST)
			continue;
		int have = hp_mbox_take(a->mb, q, a->r, &msg);
		torn += msg.torn;
		if (have != 1)
			continue;
		int use = hp_asgd_accept(a->w, a->w0, a->r, a->n, t->o.parzen);
		if (use)
			hp_asgd_add(&a->acc, a->r, a->n);
		json_object *m = json_object_new_object();
		json_object_object_add(m, "from", json_object_new_int(q));
		json_object_object_add(m, "sender_step", json_object_new_int64(msg.step));
		json_object_object_add(m, "staleness", json_object_new_int64(t->step + 1 - msg.step));
		json_object_object_add(m, "missed", json_object_new_int64((int64_t)msg.missed));
		json_object_object_add(m, "used", json_object_new_boolean(use));
		json_object_array_add(got, m);
	}
	json_object_object_add(rep, "received", got);
	json_object_object_add(rep, "torn", json_object_new_int(torn));
}

/* Peers lost so far (every exchange), and those noticed since the last. */
static void lost_peers(struct hp_trainer *t, json_object *rep)
{
	struct hp_asgd *a = t->asgd;
	json_object *all = json_object_new_array(), *now = json_object_new_array();

	for (int p = 0; p < t->nranks; p++) {
		if (hp_comm_watch_peer(p) != HP_PEER_LOST)
			continue;
		json_object_array_add(all, json_object_new_int(p));
		if (a->lost_said[p]++)
			continue;
		json_object *m = json_object_new_object();
		json_object_object_add(m, "rank", json_object_new_int(p));
		json_object_object_add(m, "why", json_object_new_string(hp_comm_watch_lost_why(p)));
		json_object_array_add(now, m);
	}
	json_object_object_add(rep, "lost", all);
	json_object_object_add(rep, "lost_now", now);
}

static int exchange(struct hp_trainer *t)
{
	struct hp_asgd *a = t->asgd;
	json_object *rep = json_object_new_object();
	int64_t e = (t->step + 1) / every(t);
	int rc = io_state(t, a->w, 0);

	json_object_object_add(rep, "rank", json_object_new_int(t->rank));
	json_object_object_add(rep, "exchange", json_object_new_int64(e));
	json_object_object_add(rep, "mailbox", json_object_new_string(a->mb->where));
	if (rc == 0 && t->o.async_deterministic)
		rc = hp_comm_barrier();
	if (rc == 0)
		rc = send_state(t, e, rep);
	if (rc == 0 && t->o.async_deterministic)
		rc = hp_comm_barrier(); /* every state of this exchange is in place */
	if (rc == 0) {
		take_states(t, rep);
		double b = hp_asgd_blend(a->w, &a->acc, a->n, t->o.blend);
		json_object_object_add(rep, "blend", json_object_new_double(b));
		if (a->acc.k)
			rc = io_state(t, a->w, 1);
		lost_peers(t, rep);
	}
	if (rc == 0 && !(a->report = strdup(json_object_to_json_string_ext(rep, JSON_C_TO_STRING_PLAIN))))
		rc = hp_error(-ENOMEM, "out of memory");
	json_object_put(rep);
	return rc;
}

int hp_asgd_after(struct hp_trainer *t)
{
	struct hp_asgd *a = t->asgd;

	if (t->o.delay_ms > 0)
		sleep_ms(t->o.delay_ms); /* --debug-delay-ms, synchronous runs too */
	if (!t->o.async_sgd || !a)
		return 0;
	free(a->report);
	a->report = NULL;
	return exchange_due(t) ? exchange(t) : 0;
}

const char *hp_asgd_report(const struct hp_trainer *t)
{
	return t->asgd ? t->asgd->report : NULL;
}
