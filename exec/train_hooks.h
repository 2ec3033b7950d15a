/* Test hooks of the trainer, kept out of the public hp_trainer_opts: for
 * programs and tests that link the static archive (hpdlf_internal_dep). */
#ifndef HPDLF_EXEC_TRAIN_HOOKS_H
#define HPDLF_EXEC_TRAIN_HOOKS_H

#include <stdint.h>

struct hp_trainer;

/* Called while a checkpoint is written (bytes done, total), e.g. to kill
 * the process halfway through one and check that the previous survives. */
typedef void (*hp_ckpt_progress_fn)(void *arg, uint64_t done, uint64_t total);
void hp_trainer_set_checkpoint_progress(struct hp_trainer *t, hp_ckpt_progress_fn fn, void *arg);

#endif
