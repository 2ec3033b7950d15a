/* The SPEC of a search (tune.h): JSON read with json-c, every value checked,
 * a bad one named by its path ("space.lr.log_uniform[1]") so the user can
 * find it; unknown fields are refused too, since a typo ("reduction_fator")
 * would otherwise silently run the default. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "exec/tune_internal.h"

#define MAX_TRIALS 1000000

static int bad(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(const char *path, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return hp_error(HP_EUSAGE, "%s: %s", path, msg);
}

static int is_number(json_object *v)
{
	return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
}

/* v as a finite number. */
static int get_num(json_object *v, const char *path, double *out)
{
	if (!is_number(v))
		return bad(path, "expected a number, got %s", json_type_to_name(json_object_get_type(v)));
	*out = json_object_get_double(v);
	if (!isfinite(*out))
		return bad(path, "expected a finite number");
	return 0;
}

/* v as an integer in [lo, hi] (1e3 is accepted as 1000, 2.5 is not). */
static int get_int(json_object *v, const char *path, int64_t lo, int64_t hi, int64_t *out)
{
	double d = 0;
	int rc = get_num(v, path, &d);

	if (rc < 0)
		return rc;
	if (json_object_is_type(v, json_type_int))
		*out = json_object_get_int64(v);
	else if (d != floor(d) || fabs(d) > 9e15)
		return bad(path, "expected an integer, got %.17g", d);
	else
		*out = (int64_t)d;
	if (*out < lo || *out > hi)
		return bad(path, "%" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", *out, lo, hi);
	return 0;
}

static int get_str(json_object *v, const char *path, char **out)
{
	if (!json_object_is_type(v, json_type_string))
		return bad(path, "expected a string, got %s", json_type_to_name(json_object_get_type(v)));
	if (!(*out = strdup(json_object_get_string(v))))
		return -ENOMEM;
	return 0;
}

/* Refuse keys of o outside known (NULL-terminated); path names o. */
static int only_known(json_object *o, const char *path, const char *const *known)
{
	char esc[128], p[256];

	json_object_object_foreach(o, key, val) {
		int i = 0;
		(void)val;
		while (known[i] && strcmp(known[i], key))
			i++;
		if (known[i])
			continue;
		snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", hp_escape(key, esc, sizeof esc));
		return bad(p, "unknown field");
	}
	return 0;
}

static int need_object(json_object *v, const char *path)
{
	if (!json_object_is_type(v, json_type_object))
		return bad(path, "expected an object, got %s", json_type_to_name(json_object_get_type(v)));
	return 0;
}

/* A flag name as hpdlf-exec spells it after "--". */
static int check_flag_name(const char *name, const char *path)
{
	if (name[0] == '-')
		return bad(path, "flag names are given without the leading '--'");
	if (!isalnum((unsigned char)name[0]))
		return bad(path, "not a flag name");
	for (const char *c = name; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_')
			return bad(path, "not a flag name (letters, digits, '-' and '_')");
	return 0;
}

/* [lo, hi] of a uniform kind at path ("space.lr.log_uniform"). */
static int parse_bounds(json_object *v, const char *path, struct hp_tune_param *p)
{
	char p0[320], p1[320];
	int rc;

	if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) != 2)
		return bad(path, "expected [low, high]");
	snprintf(p0, sizeof p0, "%s[0]", path);
	snprintf(p1, sizeof p1, "%s[1]", path);
	if (p->kind == HP_TUNE_INT_UNIFORM) {
		int64_t a, b;
		if ((rc = get_int(json_object_array_get_idx(v, 0), p0, -(INT64_C(1) << 52), INT64_C(1) << 52, &a)) < 0 ||
		    (rc = get_int(json_object_array_get_idx(v, 1), p1, -(INT64_C(1) << 52), INT64_C(1) << 52, &b)) < 0)
			return rc;
		p->lo = (double)a, p->hi = (double)b;
	} else if ((rc = get_num(json_object_array_get_idx(v, 0), p0, &p->lo)) < 0 ||
		   (rc = get_num(json_object_array_get_idx(v, 1), p1, &p->hi)) < 0) {
		return rc;
	}
	if (p->kind == HP_TUNE_LOG_UNIFORM && p->lo <= 0)
		return bad(p0, "a log_uniform bound must be positive, got %g", p->lo);
	if (p->hi <= p->lo)
		return bad(p1, "%g must be greater than the low bound %g", p->hi, p->lo);
	return 0;
}

/* One choice as the flag's text: strings as they are, numbers as JSON has them. */
static int choice_text(json_object *e, const char *path, char **out)
{
	char buf[64];

	if (json_object_is_type(e, json_type_string)) {
		if (!*json_object_get_string(e))
			return bad(path, "an empty string is not a flag value");
		return get_str(e, path, out);
	}
	if (json_object_is_type(e, json_type_int))
		snprintf(buf, sizeof buf, "%" PRId64, json_object_get_int64(e));
	else if (json_object_is_type(e, json_type_double) && isfinite(json_object_get_double(e)))
		hp_tune_fmt_double(buf, sizeof buf, json_object_get_double(e));
	else
		return bad(path, "a choice is a string or a number, got %s",
			   json_type_to_name(json_object_get_type(e)));
	return (*out = strdup(buf)) ? 0 : -ENOMEM;
}

static int parse_choices(json_object *v, const char *path, struct hp_tune_param *p)
{
	char pi[320];
	int n, rc;

	if (!json_object_is_type(v, json_type_array) || !(n = (int)json_object_array_length(v)))
		return bad(path, "expected a non-empty array of values");
	if (!(p->choices = calloc((size_t)n, sizeof *p->choices)))
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		snprintf(pi, sizeof pi, "%s[%d]", path, i);
		if ((rc = choice_text(json_object_array_get_idx(v, i), pi, &p->choices[p->nchoices])) < 0)
			return rc;
		p->nchoices++;
		for (int j = 0; j < i; j++)
			if (!strcmp(p->choices[j], p->choices[i]))
				return bad(pi, "repeats %s[%d]", path, j);
	}
	return 0;
}

static const char *const kind_names[] = { "uniform", "log_uniform", "int_uniform", "choice", NULL };

/* space.NAME: {"KIND": ARGS}. */
static int parse_param(const char *name, json_object *v, struct hp_tune_param *p)
{
	char esc[128], path[256], kp[320];
	int rc, k = 0;

	snprintf(path, sizeof path, "space.%s", hp_escape(name, esc, sizeof esc));
	if ((rc = check_flag_name(name, path)) < 0 || (rc = need_object(v, path)) < 0)
		return rc;
	if (!(p->name = strdup(name)))
		return -ENOMEM;
	if (json_object_object_length(v) != 1)
		return bad(path, "give exactly one of uniform, log_uniform, int_uniform, choice (got %d fields)",
			   json_object_object_length(v));
	json_object_object_foreach(v, key, args) {
		while (kind_names[k] && strcmp(kind_names[k], key))
			k++;
		snprintf(kp, sizeof kp, "%s.%s", path, hp_escape(key, esc, sizeof esc));
		if (!kind_names[k])
			return bad(kp, "unknown distribution (uniform, log_uniform, int_uniform or choice)");
		p->kind = (enum hp_tune_kind)k;
		return p->kind == HP_TUNE_CHOICE ? parse_choices(args, kp, p) : parse_bounds(args, kp, p);
	}
	return HP_EINTERNAL;
}

static int parse_space(json_object *v, struct hp_tune_spec *s)
{
	int rc;

	if ((rc = need_object(v, "space")) < 0)
		return rc;
	if (!json_object_object_length(v))
		return bad("space", "names no flag to search");
	if (!(s->params = calloc((size_t)json_object_object_length(v), sizeof *s->params)))
		return -ENOMEM;
	json_object_object_foreach(v, name, pv) {
		if ((rc = parse_param(name, pv, &s->params[s->nparams++])) < 0)
			return rc;
	}
	return 0;
}

static int parse_objective(json_object *v, struct hp_tune_spec *s)
{
	static const char *const known[] = { "metric", "mode", NULL };
	json_object *m;
	int rc;

	if ((rc = need_object(v, "objective")) < 0 || (rc = only_known(v, "objective", known)) < 0)
		return rc;
	if (!json_object_object_get_ex(v, "metric", &m))
		return bad("objective.metric", "missing (e.g. \"val_loss\")");
	if ((rc = get_str(m, "objective.metric", &s->metric)) < 0)
		return rc;
	if (!*s->metric)
		return bad("objective.metric", "empty");
	if (json_object_object_get_ex(v, "mode", &m)) {
		const char *mode = json_object_get_string(m);
		if (!json_object_is_type(m, json_type_string) || (strcmp(mode, "min") && strcmp(mode, "max")))
			return bad("objective.mode", "expected \"min\" or \"max\"");
		s->maximize = !strcmp(mode, "max");
	}
	return 0;
}

static int parse_budget(json_object *v, struct hp_tune_spec *s)
{
	static const char *const known[] = { "unit", "min", "max", NULL };
	json_object *m;
	int rc;

	if ((rc = need_object(v, "budget")) < 0 || (rc = only_known(v, "budget", known)) < 0)
		return rc;
	if (json_object_object_get_ex(v, "unit", &m)) {
		if ((rc = get_str(m, "budget.unit", &s->unit)) < 0)
			return rc;
		if (strcmp(s->unit, "steps") && strcmp(s->unit, "epochs"))
			return bad("budget.unit", "expected \"steps\" or \"epochs\"");
	} else if (!(s->unit = strdup("steps"))) {
		return -ENOMEM;
	}
	if (!json_object_object_get_ex(v, "min", &m))
		return bad("budget.min", "missing");
	if ((rc = get_int(m, "budget.min", 1, INT64_C(1) << 50, &s->min)) < 0)
		return rc;
	if (!json_object_object_get_ex(v, "max", &m))
		return bad("budget.max", "missing");
	if ((rc = get_int(m, "budget.max", 1, INT64_C(1) << 50, &s->max)) < 0)
		return rc;
	if (s->max < s->min)
		return bad("budget.max", "%" PRId64 " is less than budget.min (%" PRId64 ")", s->max, s->min);
	return 0;
}

static const char *const algo_names[] = { "asha", "bo", "random", "grid", NULL };

static int parse_algorithm(json_object *v, struct hp_tune_spec *s)
{
	char esc[64];
	int k = 0;

	if (!json_object_is_type(v, json_type_string))
		return bad("algorithm", "expected \"asha\", \"bo\", \"random\" or \"grid\"");
	while (algo_names[k] && strcmp(algo_names[k], json_object_get_string(v)))
		k++;
	if (!algo_names[k])
		return bad("algorithm", "\"%s\" is not one of \"asha\", \"bo\", \"random\", \"grid\"",
			   hp_escape(json_object_get_string(v), esc, sizeof esc));
	s->algo = (enum hp_tune_algo)k;
	return 0;
}

static int parse_bo(json_object *v, struct hp_tune_spec *s)
{
	static const char *const known[] = { "initial", "candidates", "refine", "xi", NULL };
	json_object *m;
	int64_t n;
	int rc;

	if ((rc = need_object(v, "bo")) < 0 || (rc = only_known(v, "bo", known)) < 0)
		return rc;
	if (json_object_object_get_ex(v, "initial", &m)) {
		if ((rc = get_int(m, "bo.initial", 1, MAX_TRIALS, &n)) < 0)
			return rc;
		s->bo.initial = (int)n;
	}
	if (json_object_object_get_ex(v, "candidates", &m)) {
		if ((rc = get_int(m, "bo.candidates", 1, 1 << 20, &n)) < 0)
			return rc;
		s->bo.candidates = (int)n;
	}
	if (json_object_object_get_ex(v, "refine", &m)) {
		if ((rc = get_int(m, "bo.refine", 0, 64, &n)) < 0)
			return rc;
		s->bo.refine = (int)n;
	}
	if (json_object_object_get_ex(v, "xi", &m)) {
		if ((rc = get_num(m, "bo.xi", &s->bo.xi)) < 0)
			return rc;
		if (s->bo.xi < 0)
			return bad("bo.xi", "must not be negative");
	}
	return 0;
}

/* An optional integer field of the top level into *out. */
static int opt_int(json_object *root, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
	json_object *m;

	return json_object_object_get_ex(root, key, &m) ? get_int(m, key, lo, hi, out) : 0;
}

static int parse_scalars(json_object *root, struct hp_tune_spec *s)
{
	int64_t trials = -1, eta = 3, seed = 0, par = 1, gp = 3, grace = s->min;
	json_object *m;
	int rc;

	if ((rc = opt_int(root, "trials", 1, MAX_TRIALS, &trials)) < 0 ||
	    (rc = opt_int(root, "reduction_factor", 2, 1000, &eta)) < 0 ||
	    (rc = opt_int(root, "seed", 0, INT64_MAX, &seed)) < 0 ||
	    (rc = opt_int(root, "parallel", 1, 4096, &par)) < 0 ||
	    (rc = opt_int(root, "grid_points", 1, 1000, &gp)) < 0 ||
	    (rc = opt_int(root, "grace_period", s->min, s->max, &grace)) < 0)
		return rc;
	if (json_object_object_get_ex(root, "algorithm", &m) && (rc = parse_algorithm(m, s)) < 0)
		return rc;
	s->trials = (int)trials, s->eta = (int)eta, s->seed = (uint64_t)seed;
	s->parallel = (int)par, s->grid_points = (int)gp, s->grace = grace;
	return 0;
}

/* trials against the algorithm: a grid has as many as points. */
static int check_trials(struct hp_tune_spec *s)
{
	if (s->algo == HP_TUNE_GRID) {
		int64_t n = hp_tune_grid_size(s);
		if (n > MAX_TRIALS)
			return bad("grid_points", "the grid would have more than %d points", MAX_TRIALS);
		if (s->trials >= 0 && s->trials != n)
			return bad("trials", "the grid has %" PRId64 " points; give %" PRId64 " or leave trials out", n,
				   n);
		s->trials = (int)n;
		return 0;
	}
	if (s->trials < 0)
		return bad("trials", "missing (how many configurations to try)");
	return 0;
}

static int parse_root(json_object *root, struct hp_tune_spec *s)
{
	static const char *const known[] = { "space", "objective", "budget", "trials", "algorithm",
		"reduction_factor", "seed", "grace_period", "parallel", "grid_points", "bo", NULL };
	json_object *m;
	int rc;

	if (!json_object_is_type(root, json_type_object))
		return hp_error(HP_EUSAGE, "SPEC: expected a JSON object");
	if ((rc = only_known(root, "", known)) < 0)
		return rc;
	if (!json_object_object_get_ex(root, "space", &m))
		return bad("space", "missing (the flags to search, e.g. {\"lr\": {\"log_uniform\": [1e-4, 1]}})");
	if ((rc = parse_space(m, s)) < 0)
		return rc;
	if (!json_object_object_get_ex(root, "objective", &m))
		return bad("objective", "missing (e.g. {\"metric\": \"val_loss\", \"mode\": \"min\"})");
	if ((rc = parse_objective(m, s)) < 0)
		return rc;
	if (!json_object_object_get_ex(root, "budget", &m))
		return bad("budget", "missing (e.g. {\"unit\": \"steps\", \"min\": 10, \"max\": 270})");
	if ((rc = parse_budget(m, s)) < 0 || (rc = parse_scalars(root, s)) < 0)
		return rc;
	s->bo = (struct hp_tune_bo_opts){ .initial = s->nparams + 3, .candidates = 256, .refine = 3, .xi = 0.01 };
	if (json_object_object_get_ex(root, "bo", &m) && (rc = parse_bo(m, s)) < 0)
		return rc;
	return check_trials(s);
}

/* One JSON value and only white space after it. */
static int check_json(struct json_tokener *tok, json_object *root, const char *text)
{
	enum json_tokener_error e = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);

	if (e == json_tokener_continue || (!root && e == json_tokener_success))
		return hp_error(HP_EUSAGE, "SPEC is not valid JSON: it ends in the middle of a value");
	if (!root || e != json_tokener_success)
		return hp_error(HP_EUSAGE, "SPEC is not valid JSON: %s (near byte %zu)", json_tokener_error_desc(e),
				end);
	while (isspace((unsigned char)text[end]))
		end++;
	if (text[end])
		return hp_error(HP_EUSAGE, "SPEC is not valid JSON: text after the object (byte %zu)", end);
	return 0;
}

int hp_tune_spec_parse(const char *json_text, struct hp_tune_spec **out)
{
	struct json_tokener *tok = json_tokener_new();
	struct hp_tune_spec *s = calloc(1, sizeof *s);
	json_object *root = NULL;
	int rc = -ENOMEM;

	*out = NULL;
	if (!tok || !s)
		goto fail;
	root = json_tokener_parse_ex(tok, json_text, (int)strlen(json_text));
	if ((rc = check_json(tok, root, json_text)) < 0)
		goto fail;
	s->trials = -1;
	if ((rc = parse_root(root, s)) < 0)
		goto fail;
	json_object_put(root);
	json_tokener_free(tok);
	*out = s;
	return 0;
fail:
	json_object_put(root);
	if (tok)
		json_tokener_free(tok);
	hp_tune_spec_free(s);
	return rc;
}

void hp_tune_spec_free(struct hp_tune_spec *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nparams; i++) {
		for (int j = 0; j < s->params[i].nchoices; j++)
			free(s->params[i].choices[j]);
		free(s->params[i].choices);
		free(s->params[i].name);
	}
	free(s->params);
	free(s->metric);
	free(s->unit);
	free(s);
}

void hp_tune_spec_info(const struct hp_tune_spec *s, struct hp_tune_spec_info *info)
{
	*info = (struct hp_tune_spec_info){
		.metric = s->metric, .maximize = s->maximize, .unit = s->unit, .min = s->min, .max = s->max,
		.grace_period = s->grace, .trials = s->trials, .algorithm = algo_names[s->algo],
		.reduction_factor = s->eta, .seed = s->seed, .parallel = s->parallel, .nparams = s->nparams,
	};
}

const char *hp_tune_spec_param(const struct hp_tune_spec *s, int i)
{
	return i >= 0 && i < s->nparams ? s->params[i].name : NULL;
}
