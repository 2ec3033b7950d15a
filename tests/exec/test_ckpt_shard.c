/* The shard partition (exec/shard.h): rank r of N owns elements
 * [n*r/N, n*(r+1)/N), computed without overflow; checked against 128-bit
 * arithmetic, for contiguity, cover and balance, up to n = 2^64 - 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "exec/shard.h"

static void check(uint64_t n, int N)
{
	uint64_t prev = 0, lo, hi, q = n / (uint64_t)N;

	for (int r = 0; r < N; r++) {
		hp_shard_range(n, r, N, &lo, &hi);
		assert_true(lo == (uint64_t)((unsigned __int128)n * (unsigned)r / (unsigned)N));
		assert_true(hi == (uint64_t)((unsigned __int128)n * (unsigned)(r + 1) / (unsigned)N));
		assert_true(lo == prev && lo <= hi); /* contiguous, in order */
		assert_true(hi - lo == q || hi - lo == q + 1); /* balanced */
		prev = hi;
	}
	assert_true(prev == n); /* covers [0, n) */
}

static void small(void **state)
{
	(void)state;
	for (int N = 1; N <= 17; N++)
		for (uint64_t n = 0; n <= 200; n++)
			check(n, N);
}

static void large(void **state)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;
	const int ranks[] = { 1, 2, 3, 7, 64, 1000, 4096, 65535 };

	(void)state;
	for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
		check(UINT64_MAX, ranks[i]);
		check(UINT64_MAX - 1, ranks[i]);
		for (int k = 0; k < 50; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			check(x, ranks[i]);
			check(x >> (k % 60), ranks[i]);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(small), cmocka_unit_test(large) };

	return cmocka_run_group_tests(tests, NULL, NULL);
}
