/* Training benchmark: step time and GFLOP/s of `hpdlf-exec --train` in core
 * and under a budget of 25% of the in-core tensor peak (or the smallest
 * budget the planner accepts, when that is more), and, when python3 has
 * torch, the same model, weights, data and batch trained by PyTorch on the
 * same thread count in the same run (tools/bench_train_torch.py).
 *
 *   hpdlf-bench-train [--exec PATH] [--python PATH] [--threads N] [--steps N]
 *                     [--rounds N] [--fraction F] [--optimizer sgd|adam]
 *                     [--dir DIR] [--no-torch] [--no-budget] [MODEL ...]
 *
 * MODEL: mlp, lenet, unet3d_tiny (tests/models/NAME: x.npy, y.npy, batch
 * and lr from train_OPT.json) or unet3d (tools/make_unet3d.py, base 16, 3
 * levels; 8 volumes of 48^3 from tools/make_volumes.py; batch 1); default
 * all four.  A MODEL with a '/' is a folder of that same layout (e.g. one
 * of bench/make_bench_models.py's); when it holds model.pt, PyTorch trains
 * that TorchScript module (the one the ONNX file was exported from) rather
 * than one built from the graph.  --no-budget skips the budgeted runs.  Step time is the median over the steps after the first
 * (warm-up) of every round; each round runs hpdlf in core, torch and hpdlf
 * under the budget one after the other, so load on a shared machine hits
 * all three alike.  The fastest step of each is reported too (*_min): on a
 * loaded machine short steps are often preempted, and the fastest is the
 * least disturbed.  Ends with one JSON line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#ifndef HPDLF_SOURCE_DIR
#define HPDLF_SOURCE_DIR "."
#endif
#ifndef HPDLF_EXEC_PATH
#define HPDLF_EXEC_PATH "hpdlf-exec"
#endif
#ifndef HPDLF_PYTHON
#define HPDLF_PYTHON "/usr/bin/python3"
#endif

#define MAX_MS 4096

struct model {
	char name[32], onnx[4200], x[4200], y[4200], pt[4200];
	int64_t batch, steps;
	double lr;
};

/* Step times and losses of one side (all rounds together). */
struct series {
	double ms[MAX_MS], loss0[64];
	int n, nloss0, ok;
	double flops;        /* per step */
	uint64_t peak;       /* tensor peak (hpdlf) */
	double losses[MAX_MS]; /* of the first round, step by step */
	int nlosses;
};

struct cfg {
	const char *exe, *python;
	int threads, rounds, torch, budget;
	int64_t steps;
	double fraction;
	const char *optimizer;
	char dir[4096];
};

static double min_of(const double *v, int n)
{
	double m = n > 0 ? v[0] : 0;

	for (int i = 1; i < n; i++)
		m = v[i] < m ? v[i] : m;
	return m;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
	double *s;
	double m;

	if (n <= 0)
		return 0;
	s = malloc((size_t)n * sizeof *s);
	if (!s)
		return 0;
	memcpy(s, v, (size_t)n * sizeof *s);
	qsort(s, (size_t)n, sizeof *s, cmp_double);
	m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return m;
}

/* Run argv with stdout and stderr into files (NULL: /dev/null); the exit
 * status, or -1 when it did not exit normally. */
static int spawn(const char *const *argv, const char *out, const char *err, const char *tmpdir)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		int fo = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fe = open(err ? err : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(127);
		setenv("TMPDIR", tmpdir, 1); /* the spill file goes into the bench's directory */
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static void series_add(struct series *s, double ms, int step, double loss, int first_round)
{
	if (step > 0 && s->n < MAX_MS)
		s->ms[s->n++] = ms; /* step 0 is the warm-up */
	if (first_round && s->nlosses < MAX_MS)
		s->losses[s->nlosses++] = loss;
}

/* The --log-json lines of one hpdlf run into s. */
static int read_log(const char *path, struct series *s, int first_round)
{
	char line[8192];
	FILE *f = fopen(path, "r");
	int steps = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f)) {
		json_object *o = json_tokener_parse(line), *v;
		double ms = 0, loss = 0, gf = 0;
		int step = 0;
		if (!o)
			continue;
		if (json_object_object_get_ex(o, "ms", &v))
			ms = json_object_get_double(v);
		if (json_object_object_get_ex(o, "loss", &v))
			loss = json_object_get_double(v);
		if (json_object_object_get_ex(o, "gflops", &v))
			gf = json_object_get_double(v);
		if (json_object_object_get_ex(o, "step", &v))
			step = json_object_get_int(v);
		s->flops = gf * ms * 1e6;
		series_add(s, ms, step, loss, first_round);
		steps++;
		json_object_put(o);
	}
	fclose(f);
	return steps;
}

/* One hpdlf-exec training run (budget 0: in core).  Returns 0, 2 with
 * *smallest set when the budget is below what the planner accepts, or -1. */
static int run_hpdlf(const struct cfg *c, const struct model *m, uint64_t budget, struct series *s, int first_round,
		     uint64_t *smallest)
{
	char log[4200], stats[4200], err[4200], b[32], t[32], st[32], bt[32], lr[32];
	const char *argv[40];
	int n = 0, rc;

	snprintf(log, sizeof log, "%s/log.jsonl", c->dir);
	snprintf(stats, sizeof stats, "%s/stats.json", c->dir);
	snprintf(err, sizeof err, "%s/exec.err", c->dir);
	snprintf(b, sizeof b, "%llu", (unsigned long long)budget);
	snprintf(t, sizeof t, "%d", c->threads);
	snprintf(st, sizeof st, "%lld", (long long)m->steps);
	snprintf(bt, sizeof bt, "%lld", (long long)m->batch);
	snprintf(lr, sizeof lr, "%.9g", m->lr);
	argv[n++] = c->exe, argv[n++] = m->onnx, argv[n++] = "--train";
	argv[n++] = "--data", argv[n++] = m->x, argv[n++] = "--labels", argv[n++] = m->y;
	argv[n++] = "--loss", argv[n++] = "cross-entropy", argv[n++] = "--optimizer", argv[n++] = c->optimizer;
	argv[n++] = "--lr", argv[n++] = lr, argv[n++] = "--batch", argv[n++] = bt;
	argv[n++] = "--steps", argv[n++] = st, argv[n++] = "--no-shuffle", argv[n++] = "--quiet";
	argv[n++] = "--threads", argv[n++] = t, argv[n++] = "--log-json", argv[n++] = log;
	argv[n++] = "--stats-json", argv[n++] = stats;
	if (budget)
		argv[n++] = "--budget", argv[n++] = b;
	argv[n] = NULL;
	rc = spawn(argv, NULL, err, c->dir);
	if (rc == 2 && smallest) {
		char msg[2048] = "";
		const char *p;
		FILE *f = fopen(err, "r");
		if (f) {
			msg[fread(msg, 1, sizeof msg - 1, f)] = 0;
			fclose(f);
		}
		p = strstr(msg, "the smallest budget that works is ");
		if (p && (*smallest = strtoull(p + strlen("the smallest budget that works is "), NULL, 10)) > budget)
			return 2;
	}
	if (rc != 0) {
		fprintf(stderr, "hpdlf-bench-train: %s %s failed (exit %d), see %s\n", m->name,
			budget ? "under a budget" : "in core", rc, err);
		return -1;
	}
	if (read_log(log, s, first_round) <= 0)
		return -1;
	json_object *o = json_object_from_file(stats), *v;
	if (o && json_object_object_get_ex(o, "tensor_peak_bytes", &v))
		s->peak = (uint64_t)json_object_get_int64(v);
	json_object_put(o);
	s->ok = 1;
	return 0;
}

/* Is torch importable by the python given? */
static int have_torch(const struct cfg *c)
{
	const char *argv[] = { c->python, "-c", "import torch", NULL };

	return spawn(argv, NULL, NULL, c->dir) == 0;
}

static int run_torch(const struct cfg *c, const struct model *m, struct series *s, int first_round)
{
	char script[4200], out[4200], err[4200], t[32], st[32], bt[32], lr[32], line[1 << 16];
	const char *argv[32];
	json_object *o, *ms, *losses;
	int n = 0, rc;
	FILE *f;

	snprintf(script, sizeof script, "%s/tools/bench_train_torch.py", HPDLF_SOURCE_DIR);
	snprintf(out, sizeof out, "%s/torch.json", c->dir);
	snprintf(err, sizeof err, "%s/torch.err", c->dir);
	snprintf(t, sizeof t, "%d", c->threads);
	snprintf(st, sizeof st, "%lld", (long long)m->steps);
	snprintf(bt, sizeof bt, "%lld", (long long)m->batch);
	snprintf(lr, sizeof lr, "%.9g", m->lr);
	argv[n++] = c->python, argv[n++] = script, argv[n++] = m->onnx, argv[n++] = m->x, argv[n++] = m->y;
	argv[n++] = "--batch", argv[n++] = bt, argv[n++] = "--steps", argv[n++] = st;
	argv[n++] = "--optimizer", argv[n++] = c->optimizer, argv[n++] = "--lr", argv[n++] = lr;
	argv[n++] = "--threads", argv[n++] = t;
	if (m->pt[0])
		argv[n++] = "--torchscript", argv[n++] = m->pt;
	argv[n] = NULL;
	rc = spawn(argv, out, err, c->dir);
	if (rc != 0 || !(f = fopen(out, "r"))) {
		fprintf(stderr, "hpdlf-bench-train: torch on %s failed (exit %d), see %s\n", m->name, rc, err);
		return -1;
	}
	o = fgets(line, sizeof line, f) ? json_tokener_parse(line) : NULL;
	fclose(f);
	if (!o || !json_object_object_get_ex(o, "ms", &ms) || !json_object_object_get_ex(o, "losses", &losses)) {
		json_object_put(o);
		return -1;
	}
	for (size_t i = 0; i < json_object_array_length(ms) && i < json_object_array_length(losses); i++)
		series_add(s, json_object_get_double(json_object_array_get_idx(ms, i)), (int)i,
			   json_object_get_double(json_object_array_get_idx(losses, i)), first_round);
	json_object_put(o);
	s->ok = 1;
	return 0;
}

/* tests/models/NAME, or the folder `dir` when not NULL. */
static int model_from_tests(const struct cfg *c, struct model *m, const char *dir)
{
	char path[4200], base[4096];

	snprintf(base, sizeof base, "%s/tests/models/%s", HPDLF_SOURCE_DIR, m->name);
	if (dir)
		snprintf(base, sizeof base, "%s", dir);
	snprintf(m->onnx, sizeof m->onnx, "%s/model.onnx", base);
	snprintf(m->x, sizeof m->x, "%s/x.npy", base);
	snprintf(m->y, sizeof m->y, "%s/y.npy", base);
	snprintf(m->pt, sizeof m->pt, "%s/model.pt", base);
	if (!dir || access(m->pt, R_OK) != 0)
		m->pt[0] = 0;
	snprintf(path, sizeof path, "%s/train_%s.json", base, c->optimizer);
	json_object *o, *v;
	if (!(o = json_object_from_file(path))) {
		fprintf(stderr, "hpdlf-bench-train: %s: cannot read\n", path);
		return -1;
	}
	if (json_object_object_get_ex(o, "batch", &v))
		m->batch = json_object_get_int64(v);
	if (json_object_object_get_ex(o, "lr", &v))
		m->lr = json_object_get_double(v);
	json_object_put(o);
	m->steps = c->steps ? c->steps : 60;
	return m->batch > 0 ? 0 : -1;
}

static int model_unet3d(const struct cfg *c, struct model *m)
{
	char cmd[16384];

	snprintf(m->onnx, sizeof m->onnx, "%s/unet3d.onnx", c->dir);
	snprintf(m->x, sizeof m->x, "%s/unet3d_x.npy", c->dir);
	snprintf(m->y, sizeof m->y, "%s/unet3d_y.npy", c->dir);
	snprintf(cmd, sizeof cmd, "%s %s/tools/make_unet3d.py %s >/dev/null && %s %s/tools/make_volumes.py %s %s --n 8",
		 c->python, HPDLF_SOURCE_DIR, m->onnx, c->python, HPDLF_SOURCE_DIR, m->x, m->y);
	if (access(m->y, R_OK) != 0 && system(cmd) != 0) {
		fprintf(stderr, "hpdlf-bench-train: cannot generate the 3D U-Net (python3 with numpy and onnx)\n");
		return -1;
	}
	m->batch = 1;
	m->lr = strcmp(c->optimizer, "adam") ? 0.02 : 1e-3;
	m->steps = c->steps ? c->steps : 6;
	return 0;
}

static json_object *jd(double v)
{
	return json_object_new_double(v);
}

/* The budgeted runs: 25% of the in-core peak, raised to the smallest
 * budget the planner accepts when that is more. */
static void bench_budget(const struct cfg *c, const struct model *m, struct series *bud, uint64_t peak, int round,
			 uint64_t *budget, int *raised)
{
	uint64_t smallest = 0;

	if (!*budget)
		*budget = (uint64_t)((double)peak * c->fraction);
	if (run_hpdlf(c, m, *budget, bud, round == 0, &smallest) == 2) {
		*budget = smallest;
		*raised = 1;
		run_hpdlf(c, m, *budget, bud, round == 0, NULL);
	}
}

static double max_loss_diff(const struct series *a, const struct series *b)
{
	double d = 0;

	for (int i = 0; i < a->nlosses && i < b->nlosses; i++) {
		double e = a->losses[i] > b->losses[i] ? a->losses[i] - b->losses[i] : b->losses[i] - a->losses[i];
		d = e > d ? e : d;
	}
	return d;
}

static void report(const struct cfg *c, const struct model *m, const struct series *in, const struct series *th,
		   const struct series *bud, uint64_t budget, int raised, json_object *out)
{
	json_object *j = json_object_new_object(), *b;
	double ims = median(in->ms, in->n), tms, bms;

	json_object_object_add(j, "model", json_object_new_string(m->name));
	json_object_object_add(j, "batch", json_object_new_int64(m->batch));
	json_object_object_add(j, "steps", json_object_new_int64(m->steps));
	json_object_object_add(j, "lr", jd(m->lr));
	if (!in->ok) {
		json_object_object_add(j, "error", json_object_new_string("in-core run failed"));
		json_object_array_add(out, j);
		return;
	}
	json_object_object_add(j, "flops_per_step", jd(in->flops));
	json_object_object_add(j, "incore_ms", jd(ims));
	json_object_object_add(j, "incore_gflops", jd(in->flops / ims / 1e6));
	json_object_object_add(j, "incore_ms_min", jd(min_of(in->ms, in->n)));
	json_object_object_add(j, "incore_peak_tensor_bytes", json_object_new_int64((int64_t)in->peak));
	fprintf(stderr, "%s (batch %lld): in core %.3f ms/step, %.2f GFLOP/s", m->name, (long long)m->batch, ims,
		in->flops / ims / 1e6);
	if (th->ok) {
		tms = median(th->ms, th->n);
		json_object_object_add(j, "torch_ms", jd(tms));
		json_object_object_add(j, "torch_gflops", jd(in->flops / tms / 1e6));
		json_object_object_add(j, "ratio_vs_torch", jd(ims / tms));
		json_object_object_add(j, "torch_ms_min", jd(min_of(th->ms, th->n)));
		json_object_object_add(j, "ratio_vs_torch_min", jd(min_of(in->ms, in->n) / min_of(th->ms, th->n)));
		json_object_object_add(j, "loss_max_abs_diff_vs_torch", jd(max_loss_diff(in, th)));
		fprintf(stderr, "; torch %.3f ms/step (hpdlf/torch %.3fx, fastest steps %.3fx, losses within %.2g)", tms,
			ims / tms, min_of(in->ms, in->n) / min_of(th->ms, th->n), max_loss_diff(in, th));
	} else if (c->torch) {
		json_object_object_add(j, "torch_error", json_object_new_string("torch run failed"));
	}
	if (!c->budget) {
		fprintf(stderr, "\n");
		json_object_array_add(out, j);
		return;
	}
	b = json_object_new_object();
	json_object_object_add(b, "fraction", jd(c->fraction));
	json_object_object_add(b, "budget_bytes", json_object_new_int64((int64_t)budget));
	json_object_object_add(b, "raised_to_smallest", json_object_new_boolean(raised));
	json_object_object_add(b, "fraction_of_peak", jd(in->peak ? (double)budget / (double)in->peak : 0));
	if (bud->ok) {
		bms = median(bud->ms, bud->n);
		json_object_object_add(b, "ms", jd(bms));
		json_object_object_add(b, "gflops", jd(in->flops / bms / 1e6));
		json_object_object_add(b, "ratio_vs_incore", jd(bms / ims));
		json_object_object_add(b, "ms_min", jd(min_of(bud->ms, bud->n)));
		json_object_object_add(b, "ratio_vs_incore_min", jd(min_of(bud->ms, bud->n) / min_of(in->ms, in->n)));
		json_object_object_add(b, "loss_max_abs_diff_vs_incore", jd(max_loss_diff(in, bud)));
		fprintf(stderr, "; budget %.1f MiB (%.0f%% of %.1f MiB%s) %.3f ms/step = %.3fx in core\n",
			(double)budget / 1048576, 100.0 * (double)budget / (double)in->peak, (double)in->peak / 1048576,
			raised ? ", the smallest that works" : "", bms, bms / ims);
	} else {
		json_object_object_add(b, "error", json_object_new_string("run under the budget failed"));
		fprintf(stderr, "; under a budget: failed\n");
	}
	json_object_object_add(j, "budget", b);
	json_object_array_add(out, j);
}

static void bench_model(const struct cfg *c, const char *name, json_object *out)
{
	struct model m = { 0 };
	struct series *in = calloc(3, sizeof *in), *th = in + 1, *bud = in + 2;
	uint64_t budget = 0;
	int raised = 0, rc;
	char buf[4096], *end, *base;

	/* a folder is named by its last component ("dir/resnet18/" -> resnet18) */
	snprintf(buf, sizeof buf, "%s", name);
	for (end = buf + strlen(buf); end > buf + 1 && end[-1] == '/';)
		*--end = 0;
	base = strrchr(buf, '/');
	snprintf(m.name, sizeof m.name, "%s", base ? base + 1 : buf);
	rc = !strcmp(name, "unet3d") ? model_unet3d(c, &m) : model_from_tests(c, &m, strchr(name, '/') ? name : NULL);
	if (rc < 0 || !in) {
		json_object *j = json_object_new_object();
		json_object_object_add(j, "model", json_object_new_string(name));
		json_object_object_add(j, "error", json_object_new_string("model not available"));
		json_object_array_add(out, j);
		free(in);
		return;
	}
	for (int r = 0; r < c->rounds; r++) {
		if (run_hpdlf(c, &m, 0, in, r == 0, NULL) < 0)
			break;
		if (c->torch)
			run_torch(c, &m, th, r == 0);
		if (c->budget)
			bench_budget(c, &m, bud, in->peak, r, &budget, &raised);
	}
	report(c, &m, in, th, bud, budget, raised, out);
	free(in);
}

static int usage(void)
{
	fprintf(stderr, "usage: hpdlf-bench-train [--exec PATH] [--python PATH] [--threads N] [--steps N] "
			"[--rounds N] [--fraction F] [--optimizer sgd|adam] [--dir DIR] [--no-torch] "
			"[--no-budget] [mlp|lenet|unet3d_tiny|unet3d|FOLDER ...]\n");
	return 2;
}

static int parse(int argc, char **argv, struct cfg *c, const char **names, int *nnames, const char **base)
{
	for (int o = 1; o < argc; o++) {
		const char *a = argv[o], *v = o + 1 < argc ? argv[o + 1] : NULL;
		if (!strcmp(a, "--no-torch"))
			c->torch = 0;
		else if (!strcmp(a, "--no-budget"))
			c->budget = 0;
		else if (a[0] != '-')
			names[(*nnames)++] = a;
		else if (!v)
			return usage();
		else if (!strcmp(a, "--exec"))
			c->exe = v, o++;
		else if (!strcmp(a, "--python"))
			c->python = v, o++;
		else if (!strcmp(a, "--threads"))
			c->threads = atoi(v), o++;
		else if (!strcmp(a, "--steps"))
			c->steps = atoll(v), o++;
		else if (!strcmp(a, "--rounds"))
			c->rounds = atoi(v), o++;
		else if (!strcmp(a, "--fraction"))
			c->fraction = atof(v), o++;
		else if (!strcmp(a, "--optimizer") && (!strcmp(v, "sgd") || !strcmp(v, "adam")))
			c->optimizer = v, o++;
		else if (!strcmp(a, "--dir"))
			*base = v, o++;
		else
			return usage();
	}
	if (c->steps < 0 || c->steps > MAX_MS / 4 || c->fraction <= 0 || c->fraction > 1)
		return usage();
	return 0;
}

int main(int argc, char **argv)
{
	static const char *defaults[] = { "mlp", "lenet", "unet3d_tiny", "unet3d" };
	struct cfg c = { .exe = HPDLF_EXEC_PATH, .python = HPDLF_PYTHON, .rounds = 1, .torch = 1, .budget = 1,
			 .fraction = 0.25, .optimizer = "sgd" };
	const char **names = calloc((size_t)argc + 1, sizeof *names), *base = NULL;
	json_object *models = json_object_new_array(), *top = json_object_new_object();
	int nnames = 0, rc;

	if (!names || (rc = parse(argc, argv, &c, names, &nnames, &base)))
		return names ? rc : 1;
	if (base)
		snprintf(c.dir, sizeof c.dir, "%s", base);
	else if (snprintf(c.dir, sizeof c.dir, "/tmp/hpdlf-bench-train-XXXXXX") < 0 || !mkdtemp(c.dir)) {
		perror("hpdlf-bench-train: mkdtemp");
		return 1;
	}
	if (c.rounds < 1)
		c.rounds = 1;
	if (!c.threads)
		c.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (c.torch && !(c.torch = have_torch(&c)))
		fprintf(stderr, "hpdlf-bench-train: %s has no torch: hpdlf figures only\n", c.python);
	if (!nnames) {
		names = defaults;
		nnames = 4;
	}
	for (int i = 0; i < nnames; i++)
		bench_model(&c, names[i], models);
	json_object_object_add(top, "bench", json_object_new_string("train"));
	json_object_object_add(top, "threads", json_object_new_int(c.threads));
	json_object_object_add(top, "optimizer", json_object_new_string(c.optimizer));
	json_object_object_add(top, "rounds", json_object_new_int(c.rounds));
	json_object_object_add(top, "torch", json_object_new_boolean(c.torch));
	json_object_object_add(top, "models", models);
	printf("%s\n", json_object_to_json_string_ext(top, JSON_C_TO_STRING_PLAIN));
	json_object_put(top);
	if (!base) {
		char cmd[4200];
		snprintf(cmd, sizeof cmd, "rm -rf %s", c.dir);
		if (system(cmd) != 0)
			fprintf(stderr, "hpdlf-bench-train: could not remove %s\n", c.dir);
	}
	return 0;
}
