/* The watchdog's wire records and connections (comm_watch*.c only). */
#ifndef HPDLF_EXEC_COMM_WATCH_NET_H
#define HPDLF_EXEC_COMM_WATCH_NET_H

#include <stdint.h>

enum { HP_WATCH_HELLO = 1, HP_WATCH_BEAT, HP_WATCH_BYE, HP_WATCH_LOST, HP_WATCH_FAIL, HP_WATCH_DONE };
enum { HP_WATCH_CLOSED = 0, HP_WATCH_SILENT = 1, HP_WATCH_FAILED = 2 };

/* 24 bytes, integers in network order: HELLO (a: rank, token), BEAT, BYE,
 * LOST (a: the lost rank, b: CLOSED, SILENT or FAILED), rank 0 to the
 * others; FAIL, a rank that stops on an error of its own; DONE (a: the
 * rank), a rank of an asynchronous job that finished training and stays
 * connected, relayed by rank 0. */
struct hp_watch_rec {
	uint32_t type, a;
	uint32_t b, pad;
	uint64_t token;
};

/* The connections by rank (-1: none): rank 0 holds one to every other
 * rank, the others one to rank 0. */
int *hp_comm_watch_fds(void);

#endif
