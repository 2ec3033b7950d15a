/* hpdlf-exec's progress line on a terminal, one format for inference and
 * training: fields dropped by priority to fit the terminal's width. */
#ifndef HPDLF_TOOLS_TRAIN_PROGRESS_H
#define HPDLF_TOOLS_TRAIN_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "tools/exec_report.h"

struct hp_progress {
	int on;                 /* stderr is a terminal and not --quiet */
	const char *unit;       /* "step" or "iter" */
	double last_draw;
	double ema_ms;          /* smoothed step time */
	double ema_io;          /* smoothed lower-tier bytes/s */
	int width;              /* columns: $COLUMNS, else the terminal's, else 80 */
	int drawn;
	int has_val;            /* the last validation's figures, kept between them */
	double val_loss, val_accuracy;
};

void hp_progress_init(struct hp_progress *p, int on, const char *unit);
/* After each step: redrawn at most ten times a second, and at the last. */
void hp_progress_step(struct hp_progress *p, const struct exec_sample *x);
/* Leave the line (newline) once done. */
void hp_progress_end(struct hp_progress *p);
/* The line for x in at most width - 1 columns (no redraw, no state
 * change): what hp_progress_step draws. */
void hp_progress_format(const struct hp_progress *p, const struct exec_sample *x, char *line, size_t len);

#endif
