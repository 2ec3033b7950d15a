/* Daemon targets: one authenticated Stat request per read (a connection
 * each time, so a slow --watch never outlives the daemon's lease). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hpdlf/error.h"
#include "tools/inspect.h"

#define STAT_TIMEOUT_MS 3000

void insp_read_remote(struct insp_target *t)
{
	struct hs_remote_stat s;
	struct timespec now;
	int rc;

	/* The client retries EINTR until its deadline: let a signal end it now. */
	insp_exit_on_signal = 1;
	if (insp_stop) {
		insp_exit_on_signal = 0;
		return;
	}
	rc = hs_remote_stat(t->spec, t->token_file, STAT_TIMEOUT_MS, &s);
	insp_exit_on_signal = 0;
	t->rc = rc;
	t->err[0] = 0;
	if (rc < 0) {
		t->state = INSP_ERROR;
		t->have_prev = 0;
		snprintf(t->err, sizeof t->err, "%s", hp_errmsg()[0] ? hp_errmsg() : hp_strerror(rc));
		return;
	}
	/* Rates only between two answers of the same daemon run. */
	t->have_prev = t->state == INSP_LIVE && t->cur_t > 0 && s.uptime_ms >= t->dcur.uptime_ms &&
		       s.stat_version == t->dcur.stat_version;
	if (t->have_prev) {
		t->dprev = t->dcur;
		t->prev_t = t->cur_t;
	}
	t->dcur = s;
	t->cur_t = insp_mono_s();
	clock_gettime(CLOCK_REALTIME, &now);
	t->read_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	t->state = INSP_LIVE;
}
