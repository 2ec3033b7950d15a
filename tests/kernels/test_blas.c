/* kernels/blas.c: the one owner of OpenBLAS's process-wide thread count.
 * Checked against what OpenBLAS itself reports. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cblas.h>
#include <cmocka.h>

#include "kernels/blas.h"

static void test_threads_set(void **state)
{
	(void)state;
	hp_blas_threads(2);
	assert_int_equal(openblas_get_num_threads(), 2);
	hp_blas_threads(1);
	assert_int_equal(openblas_get_num_threads(), 1);
	hp_blas_threads(0); /* below 1: 1 */
	assert_int_equal(openblas_get_num_threads(), 1);
	hp_blas_threads(2);
	assert_int_equal(openblas_get_num_threads(), 2);
}

static void test_serial_nests(void **state)
{
	(void)state;
	hp_blas_threads(2);
	hp_blas_serial_enter();
	assert_int_equal(openblas_get_num_threads(), 1);
	hp_blas_serial_enter();
	hp_blas_serial_leave();
	assert_int_equal(openblas_get_num_threads(), 1); /* one section still open */
	hp_blas_serial_leave();
	assert_int_equal(openblas_get_num_threads(), 2);
}

/* A count asked for while a section is open waits for the last leave:
 * the section's kernels keep running BLAS on one thread. */
static void test_threads_deferred(void **state)
{
	(void)state;
	hp_blas_threads(1);
	hp_blas_serial_enter();
	hp_blas_threads(2);
	assert_int_equal(openblas_get_num_threads(), 1);
	hp_blas_serial_leave();
	assert_int_equal(openblas_get_num_threads(), 2);
}

static void *section(void *arg)
{
	for (int i = 0; i < 2000; i++) {
		hp_blas_serial_enter();
		if (openblas_get_num_threads() != 1)
			*(int *)arg = 1;
		hp_blas_serial_leave();
	}
	return NULL;
}

/* Sections open and close on several threads at once: inside any of them
 * the count is 1, and the last one out restores the count asked for. */
static void test_serial_threads(void **state)
{
	pthread_t th[4];
	int bad[4] = { 0 };

	(void)state;
	hp_blas_threads(2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, section, &bad[i]), 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(bad[i], 0);
	}
	assert_int_equal(openblas_get_num_threads(), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_threads_set),
		cmocka_unit_test(test_serial_nests),
		cmocka_unit_test(test_threads_deferred),
		cmocka_unit_test(test_serial_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
