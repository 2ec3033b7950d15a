/* hpdlf-store: the daemon that lends this node's memory to the job's global
 * tensor address space, and the commands that load named tensors into the
 * daemons and take them out (put, get, ls, rm, stat, shutdown). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"
#include "store/remote/remote.h"
#include "tools/cli_suggest.h"
#include "tools/store_metrics.h"
#include "version.h"

static const char usage_text[] =
	"usage: hpdlf-store --listen HOST:PORT --dram SIZE [options]      run a daemon\n"
	"       hpdlf-store COMMAND [--store H:P,... | --hostfile F] [--token-file F]\n"
	"Lend this node's memory to the job's tensor store over libfabric.\n"
	"\n"
	"daemon options (each also read from the environment variable shown):\n"
	"%s"
	"  --dump-config              print the configuration and exit\n"
	"  --help                     this text\n"
	"  --version                  the version and source revision\n"
	"\n"
	"commands:\n"
	"  put NAME FILE              store FILE (e.g. a .npy) as the named tensor NAME\n"
	"  get NAME FILE              write the named tensor NAME to FILE\n"
	"  ls                         list named tensors\n"
	"  rm NAME                    remove a named tensor\n"
	"  stat                       capacity, use and clients of each daemon\n"
	"  shutdown                   stop the daemons (named tensors on --pmem are kept)\n"
	"daemons are found by --store, --hostfile, HPDLF_STORE, or under Slurm from SLURM_JOB_NODELIST.\n"
	"exit status: 0 success, 1 run-time failure, 2 bad usage\n";

/* The daemon's configuration, defined once: flag, environment, help. */
enum opt_id { O_LISTEN, O_DRAM, O_PMEM, O_TOKEN, O_PROVIDER, O_LEASE, O_PORT_FILE, O_LOG_LEVEL, O_METRICS, O_NOPT };
static const struct opt_def {
	const char *flag, *env, *def, *help;
} opt_defs[O_NOPT] = {
	[O_LISTEN] = { "listen", "HPDLF_STORE_LISTEN", NULL,
		       "HOST:PORT to listen on, that address only (Slurm default: NODE:7411)" },
	[O_DRAM] = { "dram", "HPDLF_STORE_DRAM", NULL, "DRAM to lend (K/M/G/T suffixes)" },
	[O_PMEM] = { "pmem", "HPDLF_STORE_PMEM", NULL,
		     "PATH:SIZE persistent region (file or DAX); named tensors on it survive restarts" },
	[O_TOKEN] = { "token-file", "HPDLF_TOKEN_FILE", NULL, "shared secret of the job (required)" },
	[O_PROVIDER] = { "provider", "FI_PROVIDER", NULL,
			 "libfabric provider (default: the first one that checks keys, e.g. tcp;ofi_rxm)" },
	[O_LEASE] = { "lease-ms", "HPDLF_STORE_LEASE_MS", "5000", "drop clients silent this long, freeing their memory" },
	[O_PORT_FILE] = { "port-file", "HPDLF_STORE_PORT_FILE", NULL, "write the bound HOST:PORT here once ready" },
	[O_LOG_LEVEL] = { "log-level", "HPDLF_LOG_LEVEL", "info", "error, warn, info or debug" },
	[O_METRICS] = { "listen-metrics", "HPDLF_STORE_LISTEN_METRICS", NULL,
			"HOST:PORT to serve GET /metrics on (Prometheus; PORT 0: any free port)" },
};

static const char *level_names[] = { "error", "warn", "info", "debug" };
static struct hs_daemon *g_daemon;

static void log_sink(int level, const char *msg, void *arg)
{
	struct timespec ts;
	struct tm tm;
	char when[32];

	(void)arg;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ld hpdlf-store[%d] %s: %s\n", when, ts.tv_nsec / 1000000, (int)getpid(),
		level_names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}

static void on_signal(int sig)
{
	(void)sig;
	if (g_daemon)
		hs_daemon_stop(g_daemon);
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "hpdlf-store: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(see hpdlf-store --help)\n");
	return 2;
}

static int fail(int rc)
{
	fprintf(stderr, "hpdlf-store: %s\n", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	return hp_exit_status(rc) == 2 ? 2 : 1;
}

static void print_usage(void)
{
	char opts[2048] = "";
	size_t n = 0;

	for (int i = 0; i < O_NOPT; i++)
		n += (size_t)snprintf(opts + n, sizeof opts - n, "  --%-24s %s [%s]\n", opt_defs[i].flag,
				      opt_defs[i].help, opt_defs[i].env);
	printf(usage_text, opts);
}

static void dump_config(const char *val[O_NOPT])
{
	for (int i = 0; i < O_NOPT; i++)
		printf("%s = %s    # %s (env %s)\n", opt_defs[i].flag, val[i] ? val[i] : "(unset)", opt_defs[i].help,
		       opt_defs[i].env);
}

/* Default listen address under Slurm: this node's name, port 7411. */
static const char *slurm_listen(char *buf, size_t len)
{
	const char *node = getenv("SLURMD_NODENAME"), *port = getenv("HPDLF_STORE_PORT");
	char host[256];

	if (!getenv("SLURM_JOB_ID"))
		return NULL;
	if (!node) {
		if (gethostname(host, sizeof host - 1) < 0)
			return NULL;
		host[sizeof host - 1] = 0;
		node = host;
	}
	snprintf(buf, len, "%s:%s", node, port ? port : "7411");
	return buf;
}

static int parse_level(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, level_names[i]))
			return i;
	return -1;
}

/* Every required daemon option that is missing, in one line. */
static int missing_options(const char *listen, const char *dram, const char *token)
{
	const char *need[3];
	char list[256] = "";
	int n = 0;

	if (!listen)
		need[n++] = "--listen HOST:PORT (outside Slurm)";
	if (!dram)
		need[n++] = "--dram SIZE";
	if (!token)
		need[n++] = "--token-file F (or HPDLF_TOKEN_FILE; make one: (umask 077; head -c 32 /dev/urandom > "
			    "~/.hpdlf-token))";
	for (int i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", need[i]);
	return n ? usage_error("missing %s", list) : 0;
}

static int make_config(const char *val[O_NOPT], struct hs_daemon_config *c, char *pmem_path, size_t plen)
{
	int rc;

	memset(c, 0, sizeof *c);
	c->listen = val[O_LISTEN];
	c->token_file = val[O_TOKEN];
	c->provider = val[O_PROVIDER];
	if ((rc = missing_options(c->listen, val[O_DRAM], c->token_file)) != 0)
		return rc;
	if (hp_parse_size(val[O_DRAM], &c->dram) < 0)
		return usage_error("--dram: %s", hp_errmsg());
	c->dram = (c->dram + 4095) & ~4095ull;
	if (val[O_PMEM]) {
		const char *colon = strrchr(val[O_PMEM], ':');
		if (!colon || colon == val[O_PMEM] || (size_t)(colon - val[O_PMEM]) >= plen)
			return usage_error("--pmem wants PATH:SIZE, got '%s'", val[O_PMEM]);
		memcpy(pmem_path, val[O_PMEM], (size_t)(colon - val[O_PMEM]));
		pmem_path[colon - val[O_PMEM]] = 0;
		if (hp_parse_size(colon + 1, &c->pmem_size) < 0)
			return usage_error("--pmem: %s", hp_errmsg());
		c->pmem_size = (c->pmem_size + 4095) & ~4095ull;
		c->pmem_path = pmem_path;
	}
	char *end;
	unsigned long lease = strtoul(val[O_LEASE], &end, 10);
	if (*end || lease < 100 || lease > 3600000)
		return usage_error("--lease-ms: '%s' is not 100..3600000", val[O_LEASE]);
	c->lease_ms = (unsigned)lease;
	return 0;
}

/* Written to a hidden temporary beside it and renamed: a job script that
 * waits for the files of a directory (ls, a glob) sees each one whole. */
static int write_port_file(const char *path, const char *addr)
{
	const char *base = strrchr(path, '/');
	char tmp[4200];
	FILE *f;

	base = base ? base + 1 : path;
	snprintf(tmp, sizeof tmp, "%.*s.%s.tmp", (int)(base - path), path, base);
	f = fopen(tmp, "w");
	if (!f)
		return hp_error(-errno, "port file %s: %s", tmp, strerror(errno));
	fprintf(f, "%s\n", addr);
	if (fclose(f) || rename(tmp, path))
		return hp_error(-errno, "port file %s: %s", path, strerror(errno));
	return 0;
}

static int run_daemon(const char *val[O_NOPT])
{
	struct hs_daemon_config c;
	char pmem_path[4096];
	struct sigaction sa = { .sa_handler = on_signal };
	int rc = make_config(val, &c, pmem_path, sizeof pmem_path);

	if (rc)
		return rc;
	rc = hs_daemon_open(&c, &g_daemon);
	if (rc < 0)
		return fail(rc);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (val[O_METRICS] && (rc = store_metrics_start(val[O_METRICS], hs_daemon_address(g_daemon),
							 c.token_file)) < 0) {
		hs_daemon_close(g_daemon);
		return fail(rc);
	}
	if (val[O_PORT_FILE] && (rc = write_port_file(val[O_PORT_FILE], hs_daemon_address(g_daemon))) < 0) {
		store_metrics_stop();
		hs_daemon_close(g_daemon);
		return fail(rc);
	}
	rc = hs_daemon_run(g_daemon);
	store_metrics_stop(); /* before the daemon goes: a scrape may be asking it */
	hs_daemon_close(g_daemon);
	g_daemon = NULL;
	if (rc < 0)
		return fail(rc);
	hp_log(HP_LOG_INFO, "stopped");
	return 0;
}

int hs_store_command(int argc, char **argv);

int main(int argc, char **argv)
{
	const char *val[O_NOPT];
	struct option lo[O_NOPT + 4];
	int dump = 0, c, level;
	char lbuf[300];

	if (argc > 1 && argv[1][0] != '-')
		return hs_store_command(argc - 1, argv + 1);
	for (int i = 0; i < O_NOPT; i++) {
		val[i] = getenv(opt_defs[i].env);
		if (!val[i] || !*val[i])
			val[i] = opt_defs[i].def;
		lo[i] = (struct option){ opt_defs[i].flag, required_argument, NULL, i };
	}
	lo[O_NOPT] = (struct option){ "dump-config", no_argument, NULL, 'D' };
	lo[O_NOPT + 1] = (struct option){ "help", no_argument, NULL, 'h' };
	lo[O_NOPT + 2] = (struct option){ "version", no_argument, NULL, 'V' };
	lo[O_NOPT + 3] = (struct option){ 0, 0, 0, 0 };
	opterr = 0; /* cli_bad_option says it once, with a suggestion */
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		if (c >= 0 && c < O_NOPT)
			val[c] = optarg;
		else if (c == 'D')
			dump = 1;
		else if (c == 'V') {
			printf("hpdlf-store %s (%s)\n", HPDLF_VERSION, HPDLF_REVISION);
			return 0;
		}
		else if (c == 'h') {
			print_usage();
			return 0;
		} else
			return cli_bad_option("hpdlf-store", argv[optind - 1], c == ':', lo);
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!val[O_LISTEN])
		val[O_LISTEN] = slurm_listen(lbuf, sizeof lbuf);
	if ((level = parse_level(val[O_LOG_LEVEL])) < 0)
		return usage_error("--log-level: '%s' is not error, warn, info or debug", val[O_LOG_LEVEL]);
	if (dump) {
		dump_config(val);
		return 0;
	}
	hp_log_set(log_sink, NULL, level);
	return run_daemon(val);
}
