/* Messages and log lines are one line of printable text: hp_escape against
 * hand-written expectations, and hp_error / hp_error_prefix / hp_log through
 * it (issue 22: names from models and peers reached them raw). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "hpdlf/error.h"

static const char *esc(const char *src)
{
	static char buf[4096];

	return hp_escape(src, buf, sizeof buf);
}

static void controls(void **state)
{
	(void)state;
	assert_string_equal(esc("plain text, 100% ascii ~"), "plain text, 100% ascii ~");
	assert_string_equal(esc("a\nb"), "a\\nb");
	assert_string_equal(esc("tab\there\r"), "tab\\there\\r");
	assert_string_equal(esc("\x1b[31mred\x1b[0m"), "\\e[31mred\\e[0m");
	assert_string_equal(esc("\x1b[2J"), "\\e[2J");
	assert_string_equal(esc("bell\a nul-ish \x01 \x1f"), "bell\\x07 nul-ish \\x01 \\x1f");
	assert_string_equal(esc("del\x7f"), "del\\x7f");
	/* Backslashes are kept: escaping an escaped text changes nothing. */
	assert_string_equal(esc("C:\\dir\\n"), "C:\\dir\\n");
	assert_string_equal(esc(""), "");
	assert_string_equal(esc(NULL), "");
}

static void unicode(void **state)
{
	(void)state;
	/* Valid UTF-8 text stays: accents, CJK, an emoji (4 bytes). */
	assert_string_equal(esc("caf\xc3\xa9 \xe5\xbc\xa0\xe9\x87\x8f \xf0\x9f\x98\x80"),
			    "caf\xc3\xa9 \xe5\xbc\xa0\xe9\x87\x8f \xf0\x9f\x98\x80");
	/* C1 controls in UTF-8: CSI (U+009B), NEL (U+0085), U+0080. */
	assert_string_equal(esc("x\xc2\x9b" "2Jy"), "x\\u009b2Jy");
	assert_string_equal(esc("\xc2\x85\xc2\x80"), "\\u0085\\u0080");
	assert_string_equal(esc("\xc2\xa0"), "\xc2\xa0"); /* NBSP is text */
	/* Line and paragraph separators, a bidi override. */
	assert_string_equal(esc("a\xe2\x80\xa8" "b\xe2\x80\xa9"), "a\\u2028b\\u2029");
	assert_string_equal(esc("\xe2\x80\xae" "gpj.exe"), "\\u202egpj.exe");
	/* Not UTF-8: a raw 8-bit CSI, a lone continuation, a truncated
	 * sequence, overlong forms, a surrogate, past U+10FFFF. */
	assert_string_equal(esc("a\x9b" "b"), "a\\x9bb");
	assert_string_equal(esc("\x80"), "\\x80");
	assert_string_equal(esc("\xe5\xbc"), "\\xe5\\xbc");
	assert_string_equal(esc("\xe5\xbc" "x"), "\\xe5\\xbcx");
	assert_string_equal(esc("\xc0\x8a"), "\\xc0\\x8a");
	assert_string_equal(esc("\xe0\x80\x8a"), "\\xe0\\x80\\x8a");
	assert_string_equal(esc("\xed\xa0\x80"), "\\xed\\xa0\\x80");
	assert_string_equal(esc("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
	assert_string_equal(esc("\xff\xfe"), "\\xff\\xfe");
}

/* The result fits, is terminated, and ends on a whole character or escape. */
static void truncation(void **state)
{
	char buf[8];

	(void)state;
	memset(buf, '#', sizeof buf);
	assert_string_equal(hp_escape("abcdefghij", buf, sizeof buf), "abcdefg");
	assert_string_equal(hp_escape("abcdef\n", buf, sizeof buf), "abcdef"); /* "\n" needs 2, 1 left */
	assert_string_equal(hp_escape("abcde\nf", buf, sizeof buf), "abcde\\n");
	assert_string_equal(hp_escape("ab\x1b" "cdef", buf, sizeof buf), "ab\\ecde");
	assert_string_equal(hp_escape("abcd\x01", buf, sizeof buf), "abcd");    /* \x01 needs 4, 3 left */
	assert_string_equal(hp_escape("abc\x01", buf, sizeof buf), "abc\\x01");
	assert_string_equal(hp_escape("a\xc2\x9b", buf, sizeof buf), "a\\u009b");
	assert_string_equal(hp_escape("ab\xc2\x9b", buf, sizeof buf), "ab");     /* \u009b needs 6, 5 left */
	assert_string_equal(hp_escape("abcde\xe5\xbc\xa0", buf, sizeof buf), "abcde");
	assert_string_equal(hp_escape("abcd\xe5\xbc\xa0", buf, sizeof buf), "abcd\xe5\xbc\xa0");
	assert_string_equal(hp_escape("\n", buf, 2), "");
	assert_string_equal(hp_escape("x", buf, 1), "");
	buf[0] = '#';
	hp_escape("x", buf, 0); /* nothing written */
	assert_int_equal(buf[0], '#');
	/* Every cut of a mixed text, at every size, is a prefix of the whole. */
	const char *mix = "n\xc3\xa9\n\x1b[2J\xc2\x9b\xe5\xbc\xa0\x9b\xf0\x9f\x98\x80z";
	char whole[128], part[128];
	hp_escape(mix, whole, sizeof whole);
	for (size_t len = 1; len <= strlen(whole) + 1; len++) {
		hp_escape(mix, part, len);
		assert_true(strlen(part) < len);
		assert_memory_equal(part, whole, strlen(part));
		/* the next unit did not fit: the cut is on a boundary */
		char again[128];
		hp_escape(mix, again, strlen(part) + 1);
		assert_string_equal(again, part);
	}
}

/* Random bytes, biased to the interesting ones: the result has no control
 * byte, no C1 in UTF-8, and escaping it again changes nothing (so it is
 * UTF-8 as hp_escape reads it). */
static void random_bytes(void **state)
{
	static const unsigned char pick[] = { 0x00, 0x0a, 0x1b, 0x5c, 0x7f, 0x80, 0x9b, 0xbf, 0xc2, 0xc3,
					      0xe2, 0x80, 0xa8, 0xed, 0xf0, 0xf4, 0x9f, 0xff, 'a', '[' };
	uint32_t x = 12345;
	char src[80], out[400], again[400];

	(void)state;
	for (int iter = 0; iter < 20000; iter++) {
		size_t n = 0;
		x = x * 1664525u + 1013904223u;
		for (size_t len = (x >> 8) % 64; n < len; n++) {
			x = x * 1664525u + 1013904223u;
			src[n] = (char)((x >> 24) & 1 ? pick[(x >> 8) % sizeof pick] : (x >> 12) & 0xff);
			if (!src[n])
				src[n] = 1;
		}
		src[n] = 0;
		hp_escape(src, out, sizeof out);
		for (const unsigned char *p = (const unsigned char *)out; *p; p++) {
			assert_true(*p >= 0x20 && *p != 0x7f);
			assert_false(p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f);
		}
		assert_string_equal(hp_escape(out, again, sizeof again), out);
	}
}

static void error_messages(void **state)
{
	const char *name = "w\n\x1b[2Jfake: line";

	(void)state;
	assert_int_equal(hp_error(HP_EMODEL, "model.onnx: tensor '%s' is not defined", name), HP_EMODEL);
	assert_string_equal(hp_errmsg(), "model.onnx: tensor 'w\\n\\e[2Jfake: line' is not defined");
	assert_int_equal(hp_error_prefix(HP_EMODEL, "node '%s'", "n\r1"), HP_EMODEL);
	assert_string_equal(hp_errmsg(), "node 'n\\r1': model.onnx: tensor 'w\\n\\e[2Jfake: line' is not defined");
	/* A message quoting the previous one is not escaped twice. */
	hp_error(HP_EMODEL, "again: %s", hp_errmsg());
	assert_string_equal(hp_errmsg(),
			    "again: node 'n\\r1': model.onnx: tensor 'w\\n\\e[2Jfake: line' is not defined");
	hp_error_prefix(-5, "ctx\n");
	assert_string_equal(strstr(hp_errmsg(), "ctx\\n: again"), hp_errmsg());
}

/* A message at the 1024-byte limit: terminated, no escape or character cut
 * in half, even when the formatting itself truncated mid-character. */
static void error_limit(void **state)
{
	char big[3000];
	size_t n;

	(void)state;
	memset(big, 'a', sizeof big);
	big[sizeof big - 1] = 0;
	for (int pad = 0; pad < 8; pad++) {
		/* "\xe5\xbc\xa0" (3 bytes) straddles the formatting limit */
		memset(big, 'a', 1018 + (size_t)pad);
		strcpy(big + 1018 + pad, "\xe5\xbc\xa0\xe5\xbc\xa0");
		hp_error(HP_EDATA, "%s", big);
		n = strlen(hp_errmsg());
		assert_true(n <= 1023);
		assert_null(strchr(hp_errmsg(), '\\'));
		/* what follows the a's is whole characters only */
		for (size_t i = 1018 + (size_t)pad; i < n; i += 3)
			assert_memory_equal(hp_errmsg() + i, "\xe5\xbc\xa0", 3);
	}
	for (int pad = 0; pad < 8; pad++) {
		memset(big, 'a', 1016 + (size_t)pad);
		strcpy(big + 1016 + pad, "\n\n\n\n");
		hp_error(HP_EDATA, "%s", big);
		n = strlen(hp_errmsg());
		assert_true(n <= 1023);
		assert_null(strchr(hp_errmsg(), '\n'));
		assert_true(n == 1016 + (size_t)pad || hp_errmsg()[n - 2] == '\\');
		assert_int_not_equal(hp_errmsg()[n - 1], '\\');
	}
	/* hp_error_prefix at the limit too */
	memset(big, 'b', 1020);
	strcpy(big + 1020, "\x1b\x1b");
	hp_error(HP_EDATA, "%s", big);
	hp_error_prefix(HP_EDATA, "prefix \x1b");
	n = strlen(hp_errmsg());
	assert_true(n <= 1023);
	assert_int_not_equal(hp_errmsg()[n - 1], '\\');
	assert_null(strchr(hp_errmsg(), 0x1b));
}

static char logged[2048];
static int nlogged;

static void sink(int level, const char *msg, void *arg)
{
	(void)level;
	(void)arg;
	snprintf(logged, sizeof logged, "%s", msg);
	nlogged++;
}

static void log_lines(void **state)
{
	(void)state;
	hp_log_set(sink, NULL, HP_LOG_INFO);
	hp_log(HP_LOG_INFO, "client %s connected", "evil\n2024-01-01T00:00:00.000 hpdlf-store[1] info: forged\x1b]0;t\a");
	assert_int_equal(nlogged, 1);
	assert_string_equal(logged,
			    "client evil\\n2024-01-01T00:00:00.000 hpdlf-store[1] info: forged\\e]0;t\\x07 connected");
	hp_log(HP_LOG_DEBUG, "dropped %s", "x");
	assert_int_equal(nlogged, 1);
	hp_log_set(NULL, NULL, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(controls),	  cmocka_unit_test(unicode),
		cmocka_unit_test(truncation),	  cmocka_unit_test(random_bytes),
		cmocka_unit_test(error_messages), cmocka_unit_test(error_limit),
		cmocka_unit_test(log_lines),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
