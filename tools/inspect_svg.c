/* SVG 1.1 writer for --plot: two panels over one time axis, memory per
 * tier on top, I/O bandwidth below (and the loss under them when the input
 * is a training log), each with axes, ticks, labels and a legend.  Every series is a <g> with an id and a <title> naming it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools/inspect_svg.h"

#define W 960
#define H 620
#define H_LOSS 860             /* with the loss panel */
#define LEFT 90
#define RIGHT 200               /* legend column */
#define PW (W - LEFT - RIGHT)

struct panel {
	const char *id, *heading, *unit; /* unit: "B", "B/s", "%" or "" (a plain number) */
	double y, h;            /* top and height in pixels */
	double vmax;            /* top of the value axis */
	double vmin;            /* its bottom: 0 but for a loss below zero */
};

static const char *colors[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
				"#9467bd", "#8c564b", "#e377c2", "#17becf" };

static void put_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\t')
				fputc(*s, f);
		}
	}
}

/* A round step giving about n ticks over [0, range]. */
static double nice_step(double range, int n)
{
	double raw = range / n, mag = pow(10, floor(log10(raw))), r = raw / mag;

	return mag * (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10);
}

/* Scale of a byte axis: the binary unit that keeps tick labels short. */
static double byte_scale(double vmax, const char **unit)
{
	static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double s = 1;
	int k = 0;

	while (vmax / s >= 1024 && k < 4) {
		s *= 1024;
		k++;
	}
	*unit = u[k];
	return s;
}

static double px_x(const struct plot_view *v, double t)
{
	return LEFT + (t - v->t0) / (v->t1 - v->t0) * PW;
}

static double px_y(const struct panel *p, double val)
{
	double y = p->y + p->h - (val - p->vmin) / (p->vmax - p->vmin) * p->h;

	return y < p->y ? p->y : y > p->y + p->h ? p->y + p->h : y;
}

static void time_axis(FILE *f, const struct plot_view *v, const struct panel *p)
{
	double span = v->t1 - v->t0, scale = span < 2 ? 1e3 : 1, step = nice_step(span * scale, 8);

	for (double t = 0; t <= span * scale + 1e-9; t += step) {
		double x = px_x(v, v->t0 + t / scale);
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, p->y, x,
			p->y + p->h);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, p->y + p->h + 16, t);
	}
	fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\">time since the first event (%s)</text>\n",
		LEFT + PW / 2, p->y + p->h + 34, scale > 1 ? "ms" : "s");
}

static void value_axis(FILE *f, struct panel *p, double vmax)
{
	const char *unit = p->unit;
	double scale = 1, step;
	char label[64];

	if (!strcmp(p->unit, "%"))
		scale = 0.01;
	else if (vmax > 0 && p->unit[0])
		scale = byte_scale(vmax, &unit);
	if (!(vmax > p->vmin))
		vmax = p->vmin + (strcmp(p->unit, "%") ? 1 : 0.01);
	step = nice_step((vmax - p->vmin) / scale, 5);
	p->vmin = floor(p->vmin / scale / step) * step * scale;
	p->vmax = ceil(vmax / scale / step) * step * scale;
	for (double y = p->vmin / scale; y <= p->vmax / scale + step * 1e-6; y += step) {
		double py = px_y(p, y * scale);
		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT, py, LEFT + PW, py);
		fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", LEFT - 6, py + 4, y);
	}
	if (!p->unit[0])
		snprintf(label, sizeof label, "%s", p->heading);
	else
		snprintf(label, sizeof label, "%s (%s%s)", p->heading, unit,
			 !strcmp(p->unit, "B/s") && strcmp(unit, "B/s") ? "/s" : "");
	fprintf(f, "<text transform=\"translate(%d,%.1f) rotate(-90)\" text-anchor=\"middle\">", 24, p->y + p->h / 2);
	put_text(f, label);
	fputs("</text>\n", f);
}

static void frame(FILE *f, const struct plot_view *v, struct panel *p, double vmax)
{
	fprintf(f, "<g id=\"%s\">\n", p->id);
	fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", LEFT,
		p->y, PW, p->h);
	value_axis(f, p, vmax);
	time_axis(f, v, p);
}

static void legend(FILE *f, const struct panel *p, int i, const char *color, const char *label)
{
	double y = p->y + 14 + 18 * i;

	fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n",
		LEFT + PW + 12, y - 4, LEFT + PW + 32, y - 4, color);
	fprintf(f, "<text x=\"%d\" y=\"%.1f\">", LEFT + PW + 38, y);
	put_text(f, label);
	fputs("</text>\n", f);
}

/* A step line through points (value holds until the next point). */
static void step_line(FILE *f, const struct plot_view *v, const struct panel *p, const struct plot_line *l,
		      const char *id, const char *title, const char *color)
{
	fprintf(f, "<g id=\"%s\" class=\"series\"><title>", id);
	put_text(f, title);
	fprintf(f, "</title>\n<path fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"", color);
	for (int i = 0; i < l->n; i++) {
		double x = px_x(v, l->p[i].t), y = px_y(p, l->p[i].v);
		if (i == 0)
			fprintf(f, "M%.1f %.1f", x, y);
		else
			fprintf(f, " H%.1f V%.1f", x, y);
	}
	if (l->n)
		fprintf(f, " H%.1f", px_x(v, v->t1));
	fputs("\"/></g>\n", f);
}

static void no_data(FILE *f, const struct panel *p, const char *text)
{
	fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">", LEFT + PW / 2, p->y + p->h / 2);
	put_text(f, text);
	fputs("</text>\n", f);
}

static void memory_panel(FILE *f, const struct plot_view *v)
{
	struct panel p = { "memory", "resident per tier", "B", 60, 230, 1, 0 };
	double vmax = 0;
	char id[32], title[96];

	for (int i = 0; i < v->nmem; i++)
		for (int k = 0; k < v->mem[i].n; k++)
			vmax = fmax(vmax, v->mem[i].p[k].v);
	frame(f, v, &p, vmax);
	for (int i = 0; i < v->nmem; i++) {
		const char *c = colors[i % 8];
		snprintf(id, sizeof id, "memory-%d", i);
		snprintf(title, sizeof title, "memory: %s", v->mem[i].label);
		step_line(f, v, &p, &v->mem[i], id, title, c);
		legend(f, &p, i, c, v->mem[i].label);
	}
	if (!v->nmem)
		no_data(f, &p, "no per-tier memory counters in this input");
	fputs("</g>\n", f);
}

static void io_panel(FILE *f, const struct plot_view *v)
{
	static const char *dir[2] = { "read", "write" };
	int busy = v->io_kind == IO_BUSY;
	struct panel p = { "io", busy ? "I/O lane busy" : "I/O bandwidth", busy ? "%" : "B/s", 350, 210, 1, 0 };
	struct plot_point pts[2][512];
	struct plot_line lines[2];
	double vmax = 0;

	for (int d = 0; d < 2; d++) {
		if (v->nbins) {
			int n = v->nbins < 512 ? v->nbins : 512;
			double w = (v->t1 - v->t0) / n;
			for (int k = 0; k < n; k++)
				pts[d][k] = (struct plot_point){ v->t0 + k * w, v->bins[d][k] };
			lines[d] = (struct plot_line){ dir[d], pts[d], n };
		} else {
			lines[d] = v->bw[d];
			lines[d].label = dir[d];
		}
		for (int k = 0; k < lines[d].n; k++)
			vmax = fmax(vmax, lines[d].p[k].v);
	}
	frame(f, v, &p, vmax);
	for (int d = 0; v->io_kind != IO_NONE && d < 2; d++) {
		char id[16], title[64];
		snprintf(id, sizeof id, "io-%s", dir[d]);
		snprintf(title, sizeof title, "%s: %s", busy ? "io busy" : "io bandwidth", dir[d]);
		step_line(f, v, &p, &lines[d], id, title, colors[d]);
		legend(f, &p, d, colors[d], busy ? (d ? "write (busy)" : "read (busy)") : dir[d]);
	}
	if (v->io_kind == IO_NONE)
		no_data(f, &p, "no I/O in this input");
	else if (busy)
		no_data(f, &p, "I/O spans carry no byte counts: time busy shown");
	fputs("</g>\n", f);
}

/* The training loss per step (a --log-json of hpdlf-exec --train). */
static void loss_panel(FILE *f, const struct plot_view *v)
{
	struct panel p = { "loss", "loss", "", 620, 180, 1, 0 };
	double vmax = -INFINITY;

	for (int k = 0; k < v->loss.n; k++) {
		vmax = fmax(vmax, v->loss.p[k].v);
		p.vmin = fmin(p.vmin, v->loss.p[k].v);
	}
	frame(f, v, &p, vmax);
	step_line(f, v, &p, &v->loss, "loss-0", "loss", colors[2]);
	legend(f, &p, 0, colors[2], "loss");
	fputs("</g>\n", f);
}

void insp_svg_write(FILE *f, const struct plot_view *v)
{
	int h = v->loss.n ? H_LOSS : H;

	fputs("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
	      "<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" "
	      "\"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd\">\n", f);
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, h, W, h);
	fputs("<title>", f);
	put_text(f, v->title);
	fputs("</title>\n", f);
	fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, h);
	fprintf(f, "<text x=\"%d\" y=\"30\" text-anchor=\"middle\" font-size=\"16\">", W / 2);
	put_text(f, v->title);
	fputs("</text>\n", f);
	memory_panel(f, v);
	io_panel(f, v);
	if (v->loss.n)
		loss_panel(f, v);
	fputs("</svg>\n", f);
}
