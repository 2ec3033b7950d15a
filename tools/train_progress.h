/* hpdlf-exec --train: the progress line on a terminal. */
#ifndef HPDLF_TOOLS_TRAIN_PROGRESS_H
#define HPDLF_TOOLS_TRAIN_PROGRESS_H

#include <stdint.h>

#include "hpdlf/train.h"

struct hp_progress {
	int on;                 /* stderr is a terminal and not --quiet */
	int64_t total, first;
	double t0, last_draw;
	double ema_ms;          /* smoothed step time */
	double io_bytes;        /* lower-tier bytes since the start */
	int width;
};

void hp_progress_init(struct hp_progress *p, int on, int64_t total, int64_t first);
void hp_progress_step(struct hp_progress *p, const struct hp_step_info *in);
/* Leave the line (newline) once done. */
void hp_progress_end(struct hp_progress *p);

#endif
