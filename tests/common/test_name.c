/* common/name.h against snprintf: the names the autodiff, the weight split
 * and the recompute search build piece by piece are the bytes snprintf
 * gave them, truncation included (names key the split memo's hash and are
 * printed in plans). */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/name.h"

static unsigned rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (*s >> 16) & 0x7fff;
}

static void random_str(unsigned *s, char *out, size_t max)
{
	size_t l = rnd(s) % max;

	for (size_t i = 0; i < l; i++)
		out[i] = (char)('a' + rnd(s) % 26);
	out[l] = 0;
}

static void test_like_snprintf(void **state)
{
	static const int ints[] = { 0, 7, -7, 10, 99, 100, -100, 123456, INT_MAX, INT_MIN };
	char a[300], c[300], want[512], got[512];
	unsigned s = 1;

	(void)state;
	for (int k = 0; k < 20000; k++) {
		size_t len = rnd(&s) % 3 == 0 ? rnd(&s) % 12 : rnd(&s) % 400; /* 0 too */
		int d = rnd(&s) % 2 ? ints[rnd(&s) % 10] : (int)rnd(&s) - 16000;
		struct hp_name b;
		random_str(&s, a, sizeof a);
		random_str(&s, c, sizeof c);
		memset(want, 'X', sizeof want);
		memset(got, 'X', sizeof got);
		snprintf(want, len, "%s/%s#%d", a, c, d);
		hp_name_init(&b, got, len);
		hp_name_str(&b, a);
		hp_name_mem(&b, "/", 1);
		hp_name_str(&b, c);
		hp_name_mem(&b, "#", 1);
		hp_name_int(&b, d);
		assert_memory_equal(want, got, sizeof want); /* nothing past the end written either */
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_like_snprintf),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
