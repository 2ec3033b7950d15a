/* hpdlf-store commands: put, get, ls, rm, stat, shutdown against the daemons
 * of the job, through the remote tier. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"
#include "store/remote/remote.h"
#include "tools/cli_suggest.h"

int hs_store_command(int argc, char **argv);

struct cmd_opts {
	const char *store, *hostfile, *token;
	int replicas;
};

static int cmd_fail(const char *cmd, int rc)
{
	fprintf(stderr, "hpdlf-store %s: %s\n", cmd, hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
	return hp_exit_status(rc) == 2 ? 2 : 1;
}

static int open_tier(const struct cmd_opts *co, struct hs_tier **t)
{
	struct hs_remote_opts ro;
	struct hs_tier_config cfg = { .name = "remote" };
	char *eps = NULL;
	int rc = hs_remote_find_endpoints(co->store, co->hostfile, &eps);

	if (rc < 0)
		return rc;
	hs_remote_opts_init(&ro);
	ro.endpoints = eps;
	ro.token_file = co->token;
	ro.replicas = co->replicas;
	/* A one-shot command waits longer for an answer than a running job's
	 * tier: on a loaded node a slow reply is not a dead daemon (a killed
	 * one still shows at once, by its closed connection). */
	ro.dead_ms = 10000;
	cfg.ext = &ro;
	rc = hs_tier_remote_open(&cfg, t);
	free(eps);
	return rc;
}

static int read_file(const char *path, void **buf, uint64_t *size, uint64_t *padded)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	ssize_t n;

	if (fd < 0 || fstat(fd, &sb) < 0)
		return hp_error(-errno, "%s: %s", path, strerror(errno));
	*size = (uint64_t)sb.st_size;
	*padded = (*size + HS_IO_ALIGN - 1) / HS_IO_ALIGN * HS_IO_ALIGN;
	if (*padded == 0)
		*padded = HS_IO_ALIGN;
	if (posix_memalign(buf, HS_IO_ALIGN, *padded)) {
		close(fd);
		return -ENOMEM;
	}
	memset(*buf, 0, *padded);
	for (uint64_t got = 0; got < *size; got += (uint64_t)n) {
		n = read(fd, (char *)*buf + got, *size - got);
		if (n <= 0) {
			close(fd);
			free(*buf);
			return hp_error(-EIO, "%s: short read", path);
		}
	}
	close(fd);
	return 0;
}

/* The tensor holds the file's bytes; meta is its true size. */
static int do_put(struct hs_tier *t, const char *name, const char *path)
{
	uint64_t size = 0, padded = 0;
	void *buf;
	int rc = read_file(path, &buf, &size, &padded);

	if (rc < 0)
		return rc;
	rc = hs_remote_put(t, name, buf, padded, &size, sizeof size);
	free(buf);
	if (rc == 0)
		printf("%s: %" PRIu64 " bytes stored\n", name, size);
	return rc;
}

static int do_get(struct hs_tier *t, const char *name, const char *path)
{
	struct hs_remote_named n;
	uint64_t size = 0;
	void *buf;
	int rc = hs_remote_lookup(t, name, &n), fd;

	if (rc < 0)
		return rc;
	if (n.shared)
		return hp_error(HP_EUSAGE, "'%s' on daemon %s is a shared extent of a running job (an asynchronous-SGD "
				"mailbox), not a stored tensor", name, n.daemon);
	if (n.meta_len == sizeof size)
		memcpy(&size, n.meta, sizeof size);
	if (size > n.len)
		return hp_error(HP_EFORMAT, "'%s': recorded size %" PRIu64 " exceeds its extent", name, size);
	if (posix_memalign(&buf, HS_IO_ALIGN, n.len))
		return -ENOMEM;
	rc = hs_remote_get(t, &n, buf);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	if (rc == 1)
		fprintf(stderr, "hpdlf-store get: warning: '%s' carries no digest (stored by an hpdlf-store older "
			"than protocol 2), so it was not verified\n", name);
	rc = 0;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, buf, size) != (ssize_t)size)
		rc = hp_error(-errno, "%s: %s", path, strerror(errno));
	if (fd >= 0 && close(fd) < 0 && !rc)
		rc = -errno;
	free(buf);
	return rc;
}

static int do_ls(struct hs_tier *t)
{
	struct hs_remote_named *v;
	int n = hs_remote_list(t, &v);

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		uint64_t size = v[i].len;
		char name[1024];
		if (v[i].meta_len == sizeof size)
			memcpy(&size, v[i].meta, sizeof size);
		/* names come from the daemons: one printable line each */
		printf("%-40s %14" PRIu64 "  %s\n", hp_escape(v[i].name, name, sizeof name), size, v[i].daemon);
	}
	free(v);
	return 0;
}

static int do_stat(struct hs_tier *t)
{
	struct hs_tier_stats st = { 0 };
	int rc = t->ops->stats(t, &st);

	if (rc == 0)
		printf("capacity %" PRIu64 " used %" PRIu64 " dead-daemons %d\n", st.capacity, st.used,
		       hs_remote_dead_count(t));
	return rc;
}

static int dispatch(struct hs_tier *t, int argc, char **argv)
{
	const char *c = argv[0];

	if (!strcmp(c, "put") && argc == 3)
		return do_put(t, argv[1], argv[2]);
	if (!strcmp(c, "get") && argc == 3)
		return do_get(t, argv[1], argv[2]);
	if (!strcmp(c, "ls") && argc == 1)
		return do_ls(t);
	if (!strcmp(c, "rm") && argc == 2) {
		int rc = hs_remote_remove(t, argv[1]);
		return rc < 0 ? rc : 0;
	}
	if (!strcmp(c, "stat") && argc == 1)
		return do_stat(t);
	if (!strcmp(c, "shutdown") && argc == 1)
		return hs_remote_shutdown_all(t);
	return hp_error(HP_EUSAGE, "bad arguments (see hpdlf-store --help)");
}

int hs_store_command(int argc, char **argv)
{
	static const char *cmds[] = { "put", "get", "ls", "rm", "stat", "shutdown" };
	static const struct option lo[] = {
		{ "store", required_argument, NULL, 's' },  { "hostfile", required_argument, NULL, 'f' },
		{ "token-file", required_argument, NULL, 't' }, { "replicas", required_argument, NULL, 'r' },
		{ 0, 0, 0, 0 },
	};
	struct cmd_opts co = { .replicas = 1 };
	struct hs_tier *t;
	int known = 0, c, rc;

	struct option names[sizeof cmds / sizeof *cmds + 1] = { { 0, 0, 0, 0 } };

	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		known |= !strcmp(argv[0], cmds[i]);
		names[i] = (struct option){ cmds[i], no_argument, NULL, 0 };
	}
	if (!known) {
		const char *near = cli_nearest(argv[0], names); /* "did you mean" as for options */
		fprintf(stderr, "hpdlf-store: unknown command '%s'%s%s%s\n(see hpdlf-store --help)\n", argv[0],
			near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
		return 2;
	}
	optind = 1;
	opterr = 0; /* cli_bad_option says it once, with a suggestion */
	while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
		if (c == 's')
			co.store = optarg;
		else if (c == 'f')
			co.hostfile = optarg;
		else if (c == 't')
			co.token = optarg;
		else if (c == 'r')
			co.replicas = atoi(optarg);
		else
			return cli_bad_option("hpdlf-store", argv[optind - 1], c == ':', lo);
	}
	/* Positional arguments follow the command (getopt moved them last). */
	argv[optind - 1] = argv[0];
	rc = open_tier(&co, &t);
	if (rc < 0)
		return cmd_fail(argv[0], rc);
	rc = dispatch(t, argc - optind + 1, argv + optind - 1);
	t->ops->close(t);
	return rc < 0 ? cmd_fail(argv[0], rc) : 0;
}
