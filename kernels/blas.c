/* The process-wide OpenBLAS thread count, set in one place (kernels/blas.h). */
#include <pthread.h>

#include <cblas.h>

#include "kernels/blas.h"

static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static int wanted;  /* hp_blas_threads()'s value; 0: OpenBLAS's own default */
static int applied; /* the count OpenBLAS runs with; 0: not read yet */
static int serial;  /* open serial sections */

/* Under blas_mu: tell OpenBLAS the count in force if it differs. */
static void apply_locked(void)
{
	int n;

	if (!applied)
		applied = openblas_get_num_threads();
	if (!wanted)
		wanted = applied;
	n = serial ? 1 : wanted;
	if (n != applied) {
		openblas_set_num_threads(n);
		applied = n;
	}
}

void hp_blas_threads(int n)
{
	pthread_mutex_lock(&blas_mu);
	wanted = n < 1 ? 1 : n;
	apply_locked();
	pthread_mutex_unlock(&blas_mu);
}

void hp_blas_serial_enter(void)
{
	pthread_mutex_lock(&blas_mu);
	serial++;
	apply_locked();
	pthread_mutex_unlock(&blas_mu);
}

void hp_blas_serial_leave(void)
{
	pthread_mutex_lock(&blas_mu);
	if (serial > 0)
		serial--;
	apply_locked();
	pthread_mutex_unlock(&blas_mu);
}
