/* A graph-only trainer stops OpenBLAS's idle workers before it plans
 * (kernels/blas.h hp_blas_quiet): they polled a core with sched_yield all
 * through the planning of a large step, as the session that stopped them
 * before came only after it (--plan: none at all).  Its own process: the
 * first stop is the only one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "hpdlf/error.h"
#include "hpdlf/exec.h"
#include "hpdlf/train.h"

#ifdef HP_BLAS_SHUTDOWN
/* OpenBLAS's pthread build: 1 while its workers run (started when it
 * loads when it has more than one thread; 0 after blas_thread_shutdown_). */
extern int blas_server_avail;
#endif

static void path_of(const char *file, char *path, size_t n)
{
	const char *src = getenv("HPDLF_SOURCE_DIR");

	assert_non_null(src);
	snprintf(path, n, "%s/tests/models/mlp/%s", src, file);
}

static void test_trainer_stops_workers(void **state)
{
	char model[1024], x[1024], y[1024];
	struct hp_trainer_opts o;
	struct hp_trainer *t = NULL;
#ifdef HP_BLAS_SHUTDOWN
	int before = blas_server_avail;
#endif

	(void)state;
	path_of("model.onnx", model, sizeof model);
	path_of("x.npy", x, sizeof x);
	path_of("y.npy", y, sizeof y);
	hp_trainer_opts_init(&o, sizeof o);
	o.data = x;
	o.labels = y;
	o.batch = 32;
	o.steps = 1;
	o.threads = 1;
	o.budget = 0; /* in core: no speed model measured (its runs would make a session) */
	o.graph_only = 1; /* planned, no session made */
	assert_int_equal(hp_trainer_create(model, &o, &t), 0);
#ifdef HP_BLAS_SHUTDOWN
	print_message("OpenBLAS's workers before %d, after %d\n", before, blas_server_avail);
	assert_int_equal(blas_server_avail, 0);
#endif
	hp_trainer_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_trainer_stops_workers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
