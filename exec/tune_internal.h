/* Inside the search (exec/tune*.c): the parsed SPEC, the space's unit-cube
 * encoding, the trials and the seeded random streams. */
#ifndef HPDLF_EXEC_TUNE_INTERNAL_H
#define HPDLF_EXEC_TUNE_INTERNAL_H

#include <stdint.h>

#include "exec/tune.h"

enum hp_tune_kind { HP_TUNE_UNIFORM, HP_TUNE_LOG_UNIFORM, HP_TUNE_INT_UNIFORM, HP_TUNE_CHOICE };
enum hp_tune_algo { HP_TUNE_ASHA, HP_TUNE_BO, HP_TUNE_RANDOM, HP_TUNE_GRID };

struct hp_tune_param {
	char *name;
	enum hp_tune_kind kind;
	double lo, hi;  /* bounds (uniform kinds) */
	int nchoices;
	char **choices; /* as the flag takes them */
};

/* Bayesian optimisation's knobs ("bo": {...} in SPEC). */
struct hp_tune_bo_opts {
	int initial;     /* random configurations before the GP proposes */
	int candidates;  /* random points where EI is evaluated */
	int refine;      /* best candidates refined locally */
	double xi;       /* EI's exploration margin, in standard deviations */
};

struct hp_tune_spec {
	int nparams;
	struct hp_tune_param *params;
	char *metric;
	int maximize;
	char *unit;
	int64_t min, max, grace;
	int trials;
	enum hp_tune_algo algo;
	int eta;
	uint64_t seed;
	int parallel;
	int grid_points; /* values per continuous flag in a grid */
	struct hp_tune_bo_opts bo;
};

/* Deterministic streams: one per (seed, trial, purpose), so a trial's
 * configuration does not depend on how many numbers others drew. */
struct hp_rng {
	uint64_t s;
};

static inline uint64_t hp_rng_next(struct hp_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double hp_rng_unit(struct hp_rng *r)
{
	return (double)(hp_rng_next(r) >> 11) * 0x1.0p-53;
}

static inline struct hp_rng hp_rng_for(uint64_t seed, uint64_t trial, uint64_t purpose)
{
	struct hp_rng r = { seed * 0x2545f4914f6cdd1dull ^ (trial + 1) * 0x9e3779b97f4a7c15ull ^ purpose };
	hp_rng_next(&r);
	return r;
}

enum hp_trial_state { HP_TRIAL_RUNNING, HP_TRIAL_PROMOTED, HP_TRIAL_STOPPED, HP_TRIAL_DONE, HP_TRIAL_FAILED };

struct hp_tune_trial {
	double *u;       /* configuration (unit cube) */
	char **values;   /* its flags' text */
	enum hp_trial_state state;
	int reached;     /* highest rung with a result, -1 before */
	int job;         /* rung of the outstanding job, -1 when none */
	int64_t step;    /* last result */
	double metric;
};

/* Results at one rung: trial ids and their keys (lower is better),
 * sorted best first (ties: the lower id). */
struct hp_tune_rung {
	int n, cap;
	int *trial;
	double *key;
};

struct hp_tune_bo; /* tune_bo.c */

struct hp_tune {
	const struct hp_tune_spec *s;
	int nrungs;
	int64_t *rungs;            /* budget at each rung; the last is max */
	struct hp_tune_rung *rung;
	int n, cap;
	struct hp_tune_trial *tr;
	const char **names;        /* the flags' names, in SPEC order */
	int active;                /* outstanding jobs */
	struct hp_tune_bo *bo;     /* algorithm "bo" */
};

/* Asynchronous successive halving (tune_asha.c). */
int hp_asha_rungs(const struct hp_tune_spec *s, int64_t **rungs);
/* The trial to promote now (the best of a rung's top 1/eta not yet
 * promoted, highest rung first), or -1. */
int hp_asha_pick(const struct hp_tune *t);
int hp_asha_record(struct hp_tune_rung *r, int trial, double key);

/* Bayesian optimisation (tune_bo.c). */
int hp_bo_create(const struct hp_tune_spec *s, struct hp_tune_bo **out);
void hp_bo_free(struct hp_tune_bo *bo);
/* A result: configuration u reached step with metric. */
int hp_bo_observe(struct hp_tune_bo *bo, const double *u, int64_t step, double metric);
/* Configuration u for trial (random until enough results), away from
 * the npending configurations started without a result yet. */
int hp_bo_propose(struct hp_tune_bo *bo, int trial, int npending, const double *const *pending, double *u);
/* Its GP (for the benchmark's timings). */
struct hp_gp *hp_bo_gp(struct hp_tune_bo *bo);

/* Space (tune_space.c).  A configuration is a vector u of nparams numbers:
 * uniform kinds in [0, 1] (log scale for log_uniform), a choice its index. */
void hp_tune_sample(const struct hp_tune_spec *s, struct hp_rng *r, double *u);
/* u with every number snapped to what the flag can take (int_uniform to an
 * integer, choice to an index in range), then the values as text. */
void hp_tune_snap(const struct hp_tune_spec *s, double *u);
void hp_tune_fmt_double(char *buf, size_t size, double v);
int hp_tune_format(const struct hp_tune_spec *s, const double *u, char **values);
/* Points in the grid, and point i (last flag fastest). */
int64_t hp_tune_grid_size(const struct hp_tune_spec *s);
void hp_tune_grid_point(const struct hp_tune_spec *s, int64_t i, double *u);
int64_t hp_tune_finite_pick(const struct hp_tune_spec *s, uint64_t seed, int id);

#endif
