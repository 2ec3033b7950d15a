/* Column tiles of a conv grid fixed by its geometry (see conv_impl.h).
 *
 * Outputs must not depend on how many workers share a node nor on how the
 * band pass (exec/split_band.c) cuts it: OpenBLAS's sgemm rounds a column
 * differently with the call's width and the column's place in it, while
 * the same call (same dims and operand values) gives the same bits
 * wherever the operands lie.  So every tile is a fixed group of planes,
 * rows or columns, in grid coordinates, of a power-of-two size; a band that
 * starts at a multiple of that size sees the very same tiles. */
#include "kernels/conv_impl.h"

int64_t hp_pow2_floor(int64_t x)
{
	int64_t p = 1;

	while (p <= x / 2)
		p *= 2;
	return p;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t cdiv(int64_t a, int64_t b)
{
	return (a + b - 1) / b;
}

void hp_ctile_plan(const int64_t grid[3], int64_t cap, struct hp_ctile *t)
{
	int64_t plane = grid[1] * grid[2];

	cap = cap < 1 ? 1 : cap;
	if (grid[0] > 1 && plane <= cap) {
		t->mode = 0;
		t->align = hp_pow2_floor(cap / plane);
		t->size = min64(t->align, grid[0]);
		t->per = cdiv(grid[0], t->align);
		t->maxcols = t->size * plane;
	} else if (grid[2] <= cap) {
		t->mode = 1;
		t->align = hp_pow2_floor(cap / grid[2]);
		t->size = min64(t->align, grid[1]);
		t->per = grid[0] * cdiv(grid[1], t->align);
		t->maxcols = t->size * grid[2];
	} else {
		t->mode = 2;
		t->align = hp_pow2_floor(cap);
		t->size = t->align;
		t->per = grid[0] * grid[1] * cdiv(grid[2], t->align);
		t->maxcols = t->size;
	}
}

void hp_ctile_range(const struct hp_ctile *t, const int64_t grid[3], int64_t i, int64_t *j0, int64_t *j1)
{
	int64_t plane = grid[1] * grid[2];

	if (t->mode == 0) {
		*j0 = i * t->align * plane;
		*j1 = min64((i + 1) * t->align, grid[0]) * plane;
	} else if (t->mode == 1) {
		int64_t np = cdiv(grid[1], t->align), d = i / np, h = i % np * t->align;
		*j0 = d * plane + h * grid[2];
		*j1 = d * plane + min64(h + t->align, grid[1]) * grid[2];
	} else {
		int64_t nc = cdiv(grid[2], t->align), row = i / nc, c = i % nc * t->align;
		*j0 = row * grid[2] + c;
		*j1 = row * grid[2] + min64(c + t->align, grid[2]);
	}
}

int64_t hp_ctile_align(const struct hp_ctile *t, int dim)
{
	if (dim == 0)
		return t->mode == 0 ? t->align : 1;
	if (dim == 1)
		return t->mode == 0 ? -1 : t->mode == 1 ? t->align : 1;
	return t->mode == 2 ? t->align : -1;
}
