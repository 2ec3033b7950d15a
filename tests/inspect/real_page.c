/* Test page writer through the real store (built once store/statpage.c is
 * in the tree): opens a store with opts.stats_page, pages two tensors
 * larger than the budget in and out, then records hs_store_stats() as JSON
 * (tests/inspect/page_dump.h), prints "ready" and idles until killed.
 *
 *   real_page SEED RATE OUT.json      (SEED and RATE are ignored)
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"
#include "tests/inspect/page_dump.h"

#define CHUNK (64u << 10)
#define NCH 8

static int traffic(struct hs_store *st)
{
	struct hs_tensor_info ti = { .bytes = NCH * CHUNK, .dtype = HP_F32 };
	struct hs_tensor *t[2];
	struct hs_prefetch *pf;
	void *p;
	int rc = 0;

	for (int k = 0; k < 2 && rc == 0; k++)
		if ((rc = hs_tensor_create(st, &ti, &t[k])) == 0)
			rc = hs_tensor_set_label(t[k], k ? "real1" : "real0");
	for (int pass = 0; pass < 3 && rc == 0; pass++)
		for (int k = 0; k < 2 && rc == 0; k++)
			for (uint64_t i = 0; i < NCH && rc == 0; i++) {
				rc = hs_pin(t[k], i, 1, pass ? HS_PIN_READ : HS_PIN_OVERWRITE, &p);
				if (rc == 0 && !pass)
					memset(p, (int)(k * NCH + i), CHUNK);
				if (rc == 0)
					rc = hs_unpin(t[k], i, 1);
			}
	if (rc == 0 && (rc = hs_prefetch(t[0], 0, 2, &pf)) == 0)
		rc = hs_prefetch_wait(pf);
	/* End on an unpin more than 10 ms after the last publication: the page
	 * then holds the final counters. */
	if (rc == 0 && (rc = hs_pin(t[0], 0, 1, HS_PIN_READ, &p)) == 0) {
		usleep(30000);
		rc = hs_unpin(t[0], 0, 1);
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct hs_store_opts o;
	struct hs_store *st;
	struct hs_store_stats s;
	FILE *f;

	if (argc < 4) {
		fprintf(stderr, "usage: real_page SEED RATE OUT.json\n");
		return 2;
	}
	hs_store_opts_init(&o, sizeof o);
	o.chunk_size = CHUNK;
	o.budget = 4 * CHUNK;
	o.stats_page = 1;
	if (hs_store_open(&o, &st) < 0 || traffic(st) < 0 || hs_store_stats(st, &s) < 0) {
		fprintf(stderr, "real_page: %s\n", hp_errmsg());
		return 1;
	}
	if (!(f = fopen(argv[3], "w")))
		return 1;
	dump(f, &s, 2, 0); /* the store writes layout version 2 */
	fseek(f, -2, SEEK_END); /* dump ended with "}\n": add the tensors' size */
	fprintf(f, ",\"tensor_bytes\":%u}\n", NCH * CHUNK);
	if (fclose(f))
		return 1;
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
