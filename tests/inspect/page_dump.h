/* The test page writers' record of what they published, as JSON. */
#ifndef HPDLF_TESTS_INSPECT_PAGE_DUMP_H
#define HPDLF_TESTS_INSPECT_PAGE_DUMP_H

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "hpdlf/store.h"

static void dump(FILE *f, const struct hs_store_stats *s, uint32_t version, double rate)
{
	fprintf(f, "{\"pid\":%ld,\"version\":%u,\"rate\":%.17g,\"budget\":%" PRIu64 ",\"resident\":%" PRIu64
		",\"pinned\":%" PRIu64 ",\"staging\":%" PRIu64 ",\"chunk_size\":%" PRIu64 ",\"tensors\":%" PRIu64
		",\"tiers\":[", (long)getpid(), version, rate, s->budget, s->resident, s->pinned, s->staging,
		s->chunk_size, s->tensors);
	for (int k = 0; k < s->ntiers; k++) {
		const struct hs_tier_stats *t = &s->tier[k];
		fprintf(f, "%s{\"name\":\"%s\",\"capacity\":%" PRIu64 ",\"used\":%" PRIu64 ",\"chunks\":%" PRIu64
			",\"reads\":%" PRIu64 ",\"writes\":%" PRIu64 ",\"bytes_read\":%" PRIu64 ",\"bytes_written\":%" PRIu64
			",\"hits\":%" PRIu64 ",\"misses\":%" PRIu64 ",\"evictions\":%" PRIu64 ",\"promotions\":%" PRIu64
			",\"demotions\":%" PRIu64 ",\"prefetches\":%" PRIu64 ",\"prefetch_hits\":%" PRIu64
			",\"prefetch_late\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"crc_errors\":%" PRIu64 ",\"lat_hist\":[",
			k ? "," : "", t->name, t->capacity, t->used, t->chunks, t->reads, t->writes, t->bytes_read,
			t->bytes_written, t->hits, t->misses, t->evictions, t->promotions, t->demotions, t->prefetches,
			t->prefetch_hits, t->prefetch_late, t->errors, t->crc_errors);
		for (int b = 0; b < HS_LAT_BUCKETS; b++)
			fprintf(f, "%s%" PRIu64, b ? "," : "", t->lat_hist[b]);
		fprintf(f, "]}");
	}
	fprintf(f, "]}\n");
}

#endif
