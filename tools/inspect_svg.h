/* The --plot picture: what inspect_plot.c extracted, drawn by inspect_svg.c. */
#ifndef HPDLF_TOOLS_INSPECT_SVG_H
#define HPDLF_TOOLS_INSPECT_SVG_H

#include <stdio.h>

#define PLOT_MAX_SERIES 16

struct plot_point {
	double t, v;            /* seconds, value */
};
struct plot_line {
	const char *label;
	const struct plot_point *p; /* sorted by t */
	int n;
};
enum plot_io { IO_NONE, IO_BYTES, IO_BUSY };

struct plot_view {
	const char *title;
	double t0, t1;          /* time range, seconds */
	struct plot_line mem[PLOT_MAX_SERIES]; /* bytes per tier */
	int nmem;
	enum plot_io io_kind;   /* bandwidth in bytes/s, or busy fraction */
	const double *bins[2];  /* read, write: nbins equal bins over [t0, t1] */
	int nbins;
	struct plot_line bw[2]; /* instead of bins: points (log input) */
	struct plot_line loss;  /* log input: a third panel when n > 0 */
};

/* Write a well-formed SVG 1.1 document. */
void insp_svg_write(FILE *f, const struct plot_view *v);

#endif
