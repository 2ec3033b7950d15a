/* The in-core arena placement: values alive at the same step never share
 * bytes, and the arena stays close to the liveness lower bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "exec/exec_internal.h"

static uint32_t rnd(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* Every pair alive together is disjoint; returns the liveness lower bound
 * (the largest sum of sizes alive at one step). */
static uint64_t check_disjoint(const struct hp_arena_item *it, int n, int nsteps, uint64_t total, uint64_t align)
{
	uint64_t bound = 0;

	for (int i = 0; i < n; i++) {
		uint64_t si = (it[i].size + align - 1) / align * align;
		assert_true(it[i].offset % align == 0);
		assert_true(it[i].offset + si <= total);
		for (int j = i + 1; j < n; j++) {
			uint64_t sj = (it[j].size + align - 1) / align * align;
			if (it[i].start > it[j].end || it[j].start > it[i].end || !si || !sj)
				continue;
			assert_true(it[i].offset + si <= it[j].offset || it[j].offset + sj <= it[i].offset);
		}
	}
	for (int s = 0; s < nsteps; s++) {
		uint64_t live = 0;
		for (int i = 0; i < n; i++)
			if (it[i].start <= s && s <= it[i].end)
				live += (it[i].size + align - 1) / align * align;
		if (live > bound)
			bound = live;
	}
	return bound;
}

static void test_random_lifetimes(void **state)
{
	uint32_t seed = 7;

	(void)state;
	for (int round = 0; round < 200; round++) {
		int n = 1 + (int)(rnd(&seed) % 60), nsteps = 1 + (int)(rnd(&seed) % 40);
		struct hp_arena_item it[64];
		uint64_t total, bound;
		for (int i = 0; i < n; i++) {
			int a = (int)(rnd(&seed) % (unsigned)nsteps), b = (int)(rnd(&seed) % (unsigned)nsteps);
			it[i] = (struct hp_arena_item){ .size = rnd(&seed) % 5000, .start = a < b ? a : b,
							.end = a < b ? b : a };
		}
		assert_int_equal(hp_arena_place(it, n, 64, &total), 0);
		bound = check_disjoint(it, n, nsteps, total, 64);
		assert_true(total >= bound);
	}
}

/* A chain (each value read only by the next step), as in a plain CNN: two
 * buffers suffice, and greedy-by-size finds them. */
static void test_chain_is_optimal(void **state)
{
	struct hp_arena_item it[32];
	uint64_t total;

	(void)state;
	for (int i = 0; i < 32; i++)
		it[i] = (struct hp_arena_item){ .size = 4096u * (uint64_t)(1 + (i * 7) % 5), .start = i, .end = i + 1 };
	assert_int_equal(hp_arena_place(it, 32, 64, &total), 0);
	assert_int_equal(total, check_disjoint(it, 32, 33, total, 64));
}

static void test_empty(void **state)
{
	uint64_t total = 1;

	(void)state;
	assert_int_equal(hp_arena_place(NULL, 0, 64, &total), 0);
	assert_int_equal(total, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_lifetimes),
		cmocka_unit_test(test_chain_is_optimal),
		cmocka_unit_test(test_empty),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
