/* Asynchronous SGD (internal to exec/): Keuper and Pfreundt's ASGD over
 * the mailboxes of comm_mbox.h (asgd.c), and its update rule
 * (asgd_rule.c), kept apart so that a test can hold it against NumPy.
 *
 * The rule, after this rank's local optimizer step turned w0 into w:
 *   received states r_1..r_m (newest from each sender since the last take);
 *   with parzen, only those with |w - r_j|^2 < |w0 - r_j|^2 count (the
 *   local step moved towards them), k of them;
 *   w = (1 - b) w + b (r_1 + ... + r_k) / k,  b = blend, or k / (k + 1)
 *   when blend < 0 (the mean of own and received states);
 * sums and the blend in double, the result rounded to float once. */
#ifndef HPDLF_EXEC_ASGD_H
#define HPDLF_EXEC_ASGD_H

#include <stddef.h>
#include <stdint.h>

struct hp_trainer;

/* After the session exists: the parameters exchanged and the mailboxes
 * (collective over the ranks).  Nothing unless opts.async_sgd. */
int hp_asgd_setup(struct hp_trainer *t);
/* Before step t->step runs (keeps w0 for parzen on an exchange step). */
int hp_asgd_before(struct hp_trainer *t);
/* After step t->step ran: the debug delay, then the exchange when due. */
int hp_asgd_after(struct hp_trainer *t);
/* The last step's exchange as JSON object text, NULL when it had none. */
const char *hp_asgd_report(const struct hp_trainer *t);
/* This rank's own checkpoint, DIR/rank.R (asgd_ckpt.c): written (write 1)
 * or read for --resume (0), without any collective. */
int hp_asgd_ckpt(struct hp_trainer *t, int write);
void hp_asgd_free(struct hp_trainer *t);

/* The blend (asgd_rule.c). */
struct hp_asgd_acc {
	double *sum;       /* n: the accepted states summed */
	int k;             /* how many */
};
/* Whether state r counts for w (w0: before the local step; parzen 0: all). */
int hp_asgd_accept(const float *w, const float *w0, const float *r, size_t n, int parzen);
void hp_asgd_add(struct hp_asgd_acc *a, const float *r, size_t n);
/* w blended with the accumulated states; the weight used (0: none). */
double hp_asgd_blend(float *w, const struct hp_asgd_acc *a, size_t n, double blend);
/* Peers of `rank`'s exchange number e: up to want of cand[0..nc),
 * shuffled in place from (seed, rank, e); returns how many (first ones). */
int hp_asgd_pick(int *cand, int nc, int want, uint64_t seed, int rank, int64_t e);

#endif
