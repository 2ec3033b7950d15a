/* The search space in the unit cube (tune_internal.h): sampling, the grid,
 * and the text of each value as hpdlf-exec parses it back exactly. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/tune_internal.h"

static double clamp01(double u)
{
	return u < 0 ? 0 : u > 1 ? 1 : u;
}

static int64_t int_span(const struct hp_tune_param *p)
{
	return (int64_t)(p->hi - p->lo);
}

void hp_tune_sample(const struct hp_tune_spec *s, struct hp_rng *r, double *u)
{
	for (int i = 0; i < s->nparams; i++) {
		const struct hp_tune_param *p = &s->params[i];
		double x = hp_rng_unit(r);
		if (p->kind == HP_TUNE_CHOICE)
			u[i] = floor(x * p->nchoices);
		else if (p->kind == HP_TUNE_INT_UNIFORM)
			u[i] = floor(x * (double)(int_span(p) + 1)) / (double)int_span(p);
		else
			u[i] = x;
	}
	hp_tune_snap(s, u);
}

void hp_tune_snap(const struct hp_tune_spec *s, double *u)
{
	for (int i = 0; i < s->nparams; i++) {
		const struct hp_tune_param *p = &s->params[i];
		if (p->kind == HP_TUNE_CHOICE) {
			double k = floor(u[i] + 0.5);
			u[i] = k < 0 ? 0 : k > p->nchoices - 1 ? p->nchoices - 1 : k;
		} else if (p->kind == HP_TUNE_INT_UNIFORM) {
			u[i] = floor(clamp01(u[i]) * (double)int_span(p) + 0.5) / (double)int_span(p);
		} else {
			u[i] = clamp01(u[i]);
		}
	}
}

/* The flag's value at unit coordinate u of a uniform kind. */
static double value_of(const struct hp_tune_param *p, double u)
{
	double v;

	if (u <= 0)
		return p->lo;
	if (u >= 1)
		return p->hi;
	if (p->kind == HP_TUNE_LOG_UNIFORM)
		v = exp(log(p->lo) + u * (log(p->hi) - log(p->lo)));
	else
		v = p->lo + u * (p->hi - p->lo);
	return v < p->lo ? p->lo : v > p->hi ? p->hi : v;
}

/* The shortest %g that reads back as the same double: 0.05, not
 * 0.050000000000000003, in logs and in the flags printed to reproduce a
 * trial (hpdlf-exec parses either to the same value). */
void hp_tune_fmt_double(char *buf, size_t size, double v)
{
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

int hp_tune_format(const struct hp_tune_spec *s, const double *u, char **values)
{
	char buf[64];

	for (int i = 0; i < s->nparams; i++) {
		const struct hp_tune_param *p = &s->params[i];
		if (p->kind == HP_TUNE_CHOICE) {
			values[i] = strdup(p->choices[(int)u[i]]);
		} else {
			if (p->kind == HP_TUNE_INT_UNIFORM)
				snprintf(buf, sizeof buf, "%" PRId64,
					 (int64_t)p->lo + (int64_t)floor(u[i] * (double)int_span(p) + 0.5));
			else
				hp_tune_fmt_double(buf, sizeof buf, value_of(p, u[i]));
			values[i] = strdup(buf);
		}
		if (!values[i])
			return -ENOMEM;
	}
	return 0;
}

/* Values flag p takes in the grid. */
static int64_t grid_count(const struct hp_tune_spec *s, const struct hp_tune_param *p)
{
	if (p->kind == HP_TUNE_CHOICE)
		return p->nchoices;
	if (p->kind == HP_TUNE_INT_UNIFORM && int_span(p) + 1 < s->grid_points)
		return int_span(p) + 1;
	return s->grid_points;
}

int64_t hp_tune_grid_size(const struct hp_tune_spec *s)
{
	int64_t n = 1;

	for (int i = 0; i < s->nparams; i++) {
		n *= grid_count(s, &s->params[i]);
		if (n > (INT64_C(1) << 40))
			return INT64_C(1) << 40;
	}
	return n;
}

/* A finite space (choices, and integer ranges no wider than the grid) is
 * drawn without replacement by random search and ASHA: trial id < its size
 * gets entry id of a seeded permutation of the grid, so no configuration
 * runs twice before every one ran once.  -1: draw at random. */
int64_t hp_tune_finite_pick(const struct hp_tune_spec *s, uint64_t seed, int id)
{
	int64_t n = hp_tune_grid_size(s), *perm, pick;
	struct hp_rng r = hp_rng_for(seed, UINT64_MAX, 0xf1417e);

	for (int i = 0; i < s->nparams; i++)
		if (s->params[i].kind != HP_TUNE_CHOICE &&
		    !(s->params[i].kind == HP_TUNE_INT_UNIFORM && int_span(&s->params[i]) + 1 <= s->grid_points))
			return -1;
	if (id < 0 || id >= n || n > (INT64_C(1) << 20) || !(perm = malloc((size_t)n * sizeof *perm)))
		return -1;
	for (int64_t i = 0; i < n; i++)
		perm[i] = i;
	for (int64_t i = 0; i <= id; i++) { /* Fisher-Yates, as far as id */
		int64_t j = i + (int64_t)(hp_rng_unit(&r) * (double)(n - i));
		int64_t x = perm[i];
		j = j >= n ? n - 1 : j;
		perm[i] = perm[j], perm[j] = x;
	}
	pick = perm[id];
	free(perm);
	return pick;
}

void hp_tune_grid_point(const struct hp_tune_spec *s, int64_t i, double *u)
{
	for (int k = s->nparams - 1; k >= 0; k--) {
		const struct hp_tune_param *p = &s->params[k];
		int64_t c = grid_count(s, p), j = i % c;
		i /= c;
		if (p->kind == HP_TUNE_CHOICE)
			u[k] = (double)j;
		else
			u[k] = c == 1 ? 0.5 : (double)j / (double)(c - 1);
	}
	hp_tune_snap(s, u);
}
