/* Token files (issue 22): only a regular file of 16..4096 bytes, not all
 * alike, with no access for group or others is a token; anything else is
 * refused at once (a FIFO does not hang) with a message that names the file
 * and the fix and never shows the token.  The derived key lives in memory
 * left out of core dumps, shared between loads of the same token. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "store/remote/wire.h"

static char dir[256];
static const char text_token[] = "correct horse battery staple 4096";

static const char *path_of(const char *name)
{
	static char p[4][512];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
	return p[k];
}

/* A file of `len` bytes (byte i = fill or, if fill < 0, a mix) and mode. */
static const char *make(const char *name, size_t len, int fill, mode_t mode)
{
	const char *p = path_of(name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	for (size_t i = 0; i < len; i++) {
		unsigned char b = (unsigned char)(fill >= 0 ? fill : (int)(i * 131 + 7));
		assert_int_equal(write(fd, &b, 1), 1);
	}
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
	return p;
}

static void refused(const char *path, const char *why, const char *hint)
{
	struct hs_secret s;

	assert_int_equal(hs_secret_load(path, &s), HP_EUSAGE);
	assert_int_equal(s.have, 0);
	if (!strstr(hp_errmsg(), path) || !strstr(hp_errmsg(), why) || !strstr(hp_errmsg(), hint))
		fail_msg("%s: want '%s' and '%s' in: %s", path, why, hint, hp_errmsg());
	assert_int_equal(hp_exit_status(HP_EUSAGE), 2);
}

static void loose_modes(void **state)
{
	static const mode_t modes[] = { 0644, 0640, 0604, 0620, 0602, 0610, 0601, 0660, 0666, 0700 | 040 };

	(void)state;
	for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
		char want[32];
		snprintf(want, sizeof want, "mode %04o", (unsigned)modes[i]);
		refused(make("loose", 32, -1, modes[i]), want, "chmod 600");
	}
	/* A symlink is judged by its target. */
	unlink(path_of("link"));
	assert_int_equal(symlink(make("target", 32, -1, 0644), path_of("link")), 0);
	refused(path_of("link"), "mode 0644", "chmod 600");
}

static void not_regular(void **state)
{
	(void)state;
	mkdir(path_of("dir"), 0700);
	refused(path_of("dir"), "a directory", "head -c 32 /dev/urandom");
	/* A FIFO nobody writes: refused at once, never a hang. */
	unlink(path_of("fifo"));
	assert_int_equal(mkfifo(path_of("fifo"), 0600), 0);
	alarm(10);
	refused(path_of("fifo"), "a FIFO", "head -c 32 /dev/urandom");
	alarm(0);
	refused("/dev/zero", "a character device", "head -c 32 /dev/urandom");
	refused("/dev/null", "a character device", "head -c 32 /dev/urandom");
}

static void sizes(void **state)
{
	struct hs_secret s;

	(void)state;
	refused(make("empty", 0, -1, 0600), "holds 0 bytes", "head -c 32 /dev/urandom");
	refused(make("short", 15, -1, 0600), "holds 15 bytes, not 16 to 4096", "head -c 32 /dev/urandom");
	refused(make("long", 5000, -1, 0600), "holds 5000 bytes", "head -c 32 /dev/urandom");
	refused(make("over", 4097, -1, 0600), "holds 4097 bytes", "umask 077");
	refused(make("zeros", 32, 0, 0600), "all the same", "head -c 32 /dev/urandom");
	refused(make("aaa", 4096, 'a', 0400), "all the same", "umask 077");
	assert_int_equal(hs_secret_load(make("min", 16, -1, 0600), &s), 0);
	assert_true(s.have);
	hs_secret_free(&s);
	assert_int_equal(hs_secret_load(make("max", 4096, -1, 0400), &s), 0);
	assert_true(s.have);
	hs_secret_free(&s);
	assert_int_equal(hs_secret_load(path_of("missing"), &s), -ENOENT);
	assert_non_null(strstr(hp_errmsg(), path_of("missing")));
}

static void sources(void **state)
{
	struct hs_secret s;

	(void)state;
	unsetenv("HPDLF_TOKEN_FILE");
	assert_int_equal(hs_secret_load(NULL, &s), 0);
	assert_int_equal(s.have, 0);
	hs_secret_free(&s);
	setenv("HPDLF_TOKEN_FILE", make("env", 32, -1, 0600), 1);
	assert_int_equal(hs_secret_load(NULL, &s), 0);
	assert_true(s.have);
	hs_secret_free(&s);
	assert_int_equal(s.have, 0);
	hs_secret_free(&s); /* twice: a no-op */
	setenv("HPDLF_TOKEN_FILE", make("env", 32, -1, 0644), 1);
	assert_int_equal(hs_secret_load("", &s), HP_EUSAGE);
	unsetenv("HPDLF_TOKEN_FILE");
	/* a symlink to a good token is a good token */
	unlink(path_of("goodlink"));
	assert_int_equal(symlink(make("good", 32, -1, 0600), path_of("goodlink")), 0);
	assert_int_equal(hs_secret_load(path_of("goodlink"), &s), 0);
	hs_secret_free(&s);
}

static char logged[8192];

static void sink(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	strncat(logged, msg, sizeof logged - strlen(logged) - 1);
}

/* The token's text is in no message and no log line, loaded or refused. */
static void never_shown(void **state)
{
	const char *p = path_of("text");
	struct hs_secret s;
	int fd;

	(void)state;
	hp_log_set(sink, NULL, HP_LOG_DEBUG);
	for (mode_t mode = 0600; mode <= 0644; mode += 044) {
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		assert_int_equal(write(fd, text_token, strlen(text_token)), (ssize_t)strlen(text_token));
		assert_int_equal(fchmod(fd, mode), 0);
		close(fd);
		int rc = hs_secret_load(p, &s);
		assert_int_equal(rc, mode == 0600 ? 0 : HP_EUSAGE);
		assert_null(strstr(hp_errmsg(), "horse"));
		hs_secret_free(&s);
	}
	assert_null(strstr(logged, "horse"));
	hp_log_set(NULL, NULL, 0);
}

/* 1 if addr lies in a mapping /proc/self/smaps marks "dd" (not dumped). */
static int not_dumped(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, dd = -1;

	assert_non_null(f);
	while (fgets(line, sizeof line, f) && dd < 0) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
		else if (in && !strncmp(line, "VmFlags:", 8))
			dd = strstr(line, " dd") != NULL;
	}
	fclose(f);
	return dd == 1;
}

static void key_memory(void **state)
{
	struct hs_secret a, b, c;
	uint8_t n1[HS_NONCE_BYTES] = { 1 }, n2[HS_NONCE_BYTES] = { 2 }, m1[HS_MAC_BYTES], m2[HS_MAC_BYTES];
	const unsigned char *k;
	unsigned char zero[HS_KEY_BYTES] = { 0 };

	(void)state;
	assert_int_equal(hs_secret_load(make("k1", 32, -1, 0600), &a), 0);
	assert_true(not_dumped(a.kmem));
	/* the same token again: the same key, once */
	assert_int_equal(hs_secret_load(path_of("k1"), &b), 0);
	assert_ptr_equal(a.kmem, b.kmem);
	assert_int_equal(hs_secret_load(make("k2", 33, -1, 0600), &c), 0);
	assert_ptr_not_equal(a.kmem, c.kmem);
	hs_auth_mac(&a, "t", n1, n2, m1);
	hs_auth_mac(&c, "t", n1, n2, m2);
	assert_memory_not_equal(m1, m2, sizeof m1);
	/* one holder gone, the other still authenticates */
	k = a.kmem;
	hs_secret_free(&a);
	assert_null(a.kmem);
	assert_true(hs_auth_check(&b, "t", n1, n2, m1, sizeof m1));
	assert_false(hs_auth_check(&a, "t", n1, n2, m1, sizeof m1));
	/* the last holder gone: the key is wiped */
	hs_secret_free(&b);
	assert_memory_equal(k, zero, sizeof zero);
	hs_secret_free(&c);
}

/* Loads without frees never grow: the table holds distinct keys only. */
static void many_loads(void **state)
{
	struct hs_secret s[70], again;
	char name[32];
	int i;

	(void)state;
	for (i = 0; i < 1000; i++)
		assert_int_equal(hs_secret_load(path_of("k1"), &again), 0); /* never freed */
	for (i = 0; i < 70; i++) {
		snprintf(name, sizeof name, "many%d", i);
		if (hs_secret_load(make(name, 40 + (size_t)i, -1, 0600), &s[i]) < 0)
			break;
	}
	assert_int_equal(i, 63); /* 64 slots, one held by k1 */
	assert_int_equal(hs_secret_load(path_of("many63"), &s[63]), -ENOMEM);
	assert_non_null(strstr(hp_errmsg(), "tokens are in use"));
	hs_secret_free(&s[0]);
	assert_int_equal(hs_secret_load(path_of("many63"), &s[63]), 0);
	for (i = 1; i < 64; i++)
		hs_secret_free(&s[i]);
}

static int setup(void **state)
{
	const char *tmp = getenv("TMPDIR");

	(void)state;
	snprintf(dir, sizeof dir, "%s/hpdlf-secrets-XXXXXX", tmp ? tmp : "/tmp");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(loose_modes), cmocka_unit_test(not_regular), cmocka_unit_test(sizes),
		cmocka_unit_test(sources),     cmocka_unit_test(never_shown), cmocka_unit_test(key_memory),
		cmocka_unit_test(many_loads),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
