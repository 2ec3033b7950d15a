/* Test helper: a persistent store tier file holding N named tensors,
 * committed through the public API (hs_store_commit), as a program using
 * libhpdlf would leave it.
 *   make_committed_store PATH N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "hpdlf/store.h"

int main(int argc, char **argv)
{
	struct hs_store_opts o;
	struct hs_store *st = NULL;
	int n = argc == 3 ? atoi(argv[2]) : -1, rc;

	if (n < 0)
		return fprintf(stderr, "usage: make_committed_store PATH N\n"), 2;
	hs_store_opts_init(&o, sizeof o);
	o.budget = 1 << 20;
	o.chunk_size = 1 << 16;
	o.ntiers = 1;
	o.tiers[0] = (struct hs_tier_spec){ .kind = HS_TIER_NVME, .path = argv[1], .size = 8 << 20 };
	rc = hs_store_open(&o, &st);
	for (int i = 0; rc == 0 && i < n; i++) {
		char name[32];
		struct hs_tensor_info ti = { .bytes = 4096, .dtype = HP_F32, .name = name };
		struct hs_tensor *t;
		float *p;

		snprintf(name, sizeof name, "saved%d", i);
		rc = hs_tensor_create(st, &ti, &t);
		if (rc == 0 && (rc = hs_pin(t, 0, HS_ALL, HS_PIN_OVERWRITE, (void **)&p)) == 0) {
			for (int k = 0; k < 1024; k++)
				p[k] = (float)(i + k);
			rc = hs_unpin(t, 0, HS_ALL);
		}
	}
	if (rc == 0)
		rc = hs_store_commit(st);
	if (rc < 0)
		fprintf(stderr, "make_committed_store: %s\n", hp_errmsg());
	hs_store_close(st);
	return rc < 0 ? 1 : 0;
}
