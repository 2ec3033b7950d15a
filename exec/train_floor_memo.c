/* The forward graph --plan's floor probes may know without building it
 * (train_floor.h): the last one a graph-only trainer built, remembered by
 * its weight split's choices and its floor.  A file of its own: train.c
 * notes here and train_floor.c, which calls train.c to build forward
 * graphs, looks here, so that neither calls back into the other (test
 * exec-calls). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/budget.h"
#include "exec/split_weight.h"
#include "exec/train_floor.h"
#include "exec/train_internal.h"

static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char *model;               /* NULL: nothing remembered */
	struct hp_trainer_opts o;  /* the trainer's, as key_of leaves them */
	struct hp_ws_log log;
	uint64_t floor;
} memo;
int hp_train_floor_memo_hits, hp_train_floor_builds;

/* The options a trainer built from o holds (hp_train_new), less the budget
 * and the resume flag, which the forward graph does not depend on before
 * its weight split. */
static void key_of(const struct hp_trainer_opts *o, struct hp_trainer_opts *k)
{
	memset(k, 0, sizeof *k);
	memcpy(k, o, o->size < sizeof *k ? o->size : sizeof *k);
	k->size = sizeof *k;
	if (!k->spec.seed)
		k->spec.seed = k->seed;
	k->budget = 0;
	k->resume = 0;
}

int hp_train_floor_noted(const struct hp_trainer *t)
{
	return t->o.graph_only && t->o.budget && !t->update_cut && !t->split_tensors && t->nranks <= 1 && !t->pipe;
}

void hp_train_floor_note(const struct hp_trainer *t, struct hp_ws_log *log, uint64_t floor)
{
	char *model = floor ? strdup(t->model) : NULL;

	if (!model)
		return;
	pthread_mutex_lock(&memo_lock);
	free(memo.model);
	hp_ws_log_free(&memo.log);
	memo.model = model;
	key_of(&t->o, &memo.o);
	memo.log = *log;
	memo.floor = floor;
	pthread_mutex_unlock(&memo_lock);
	memset(log, 0, sizeof *log);
}

void hp_train_floor_forget(void)
{
	pthread_mutex_lock(&memo_lock);
	free(memo.model);
	hp_ws_log_free(&memo.log);
	memset(&memo, 0, sizeof memo);
	hp_train_floor_memo_hits = 0;
	pthread_mutex_unlock(&memo_lock);
}

uint64_t hp_train_floor_known(const char *model, const struct hp_trainer_opts *o, int *would_cut)
{
	struct hp_trainer_opts k;
	struct hp_budget_layout l;
	uint64_t floor = 0;

	key_of(o, &k);
	hp_budget_layout_init(&l, o->budget);
	pthread_mutex_lock(&memo_lock);
	if (memo.model && !strcmp(memo.model, model) && !memcmp(&memo.o, &k, sizeof k) &&
	    hp_ws_log_same(&memo.log, &l, would_cut)) {
		floor = memo.floor;
		hp_train_floor_memo_hits++;
	}
	pthread_mutex_unlock(&memo_lock);
	return floor;
}
