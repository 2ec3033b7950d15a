/* Helpers shared by the store tests: scratch directories, tier
 * configurations, a deterministic PRNG. */
#ifndef HPDLF_TESTS_STORE_UTIL_H
#define HPDLF_TESTS_STORE_UTIL_H

#include <stdint.h>
#include <stdio.h>

#include "hpdlf/store.h"

/* The four tier configurations every store test runs over. */
enum cfg { CFG_DRAM = 0, CFG_PMEM, CFG_NVME, CFG_ALL, CFG_N };
extern const char *const cfg_names[CFG_N];

/* Scratch directories: a disk-backed one (O_DIRECT) under $TMPDIR or /tmp,
 * and one under /dev/shm for pmem pools.  Created on first use, removed
 * (with their files) by tu_cleanup(). */
const char *tu_disk_dir(void);
const char *tu_shm_dir(void);
void tu_cleanup(void);
/* "<dir>/<name>" in a static rotating buffer. */
const char *tu_path(const char *dir, const char *name);

/* Options for configuration c: chunk size cs, budget in chunks; tier files
 * named <prefix>.pmem / <prefix>.nvme of `tier_chunks` chunks each. */
void tu_opts(struct hs_store_opts *o, enum cfg c, uint64_t cs, uint64_t budget_chunks, uint64_t tier_chunks,
	     const char *prefix);

static inline uint64_t tu_rand(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Seed from HPDLF_TEST_SEED or the clock; printed so failures replay. */
uint64_t tu_seed(const char *test);
int tu_long(void); /* meson -Dlong_tests=true */

#endif
