/* A --tier file that holds a committed persistent store (named tensors a
 * program saved with hs_store_commit, docs/store-format.md) is refused:
 * hpdlf-exec uses its tiers as scratch, so the run would overwrite them
 * and truncate the file at exit.  Files a run of hpdlf-exec leaves (its
 * scratch, generation 0, or nothing: they are truncated) pass. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store/crc.h"
#include "tools/exec_cli.h"

/* The superblock slot of format 1 (store/catalog.c, struct sb). */
struct sb1 {
	char magic[8];
	uint32_t version, sb_size;
	uint64_t uuid[2];
	uint32_t tier_index, tier_kind;
	uint64_t chunk_size, capacity, generation, cat_addr, cat_len;
	uint32_t cat_crc, sb_crc;
};
_Static_assert(sizeof(struct sb1) == 88 && offsetof(struct sb1, sb_crc) == 84, "docs/store-format.md");

/* Named tensors of the newest valid slot's catalog (0: none or no store);
 * the generation into *gen. */
static uint32_t committed_tensors(int fd, uint64_t *gen)
{
	struct sb1 best = { .generation = 0 }, s;
	char head[32];
	uint32_t n = 0;

	for (int slot = 0; slot < 2; slot++)
		if (pread(fd, &s, sizeof s, slot * 4096) == (ssize_t)sizeof s && !memcmp(s.magic, "HPDLFSB", 8) &&
		    s.version == 1 && s.sb_crc == hs_crc32c(&s, offsetof(struct sb1, sb_crc)) &&
		    s.generation > best.generation)
			best = s;
	*gen = best.generation;
	if (!best.generation || best.cat_len < sizeof head ||
	    pread(fd, head, sizeof head, (off_t)best.cat_addr) != (ssize_t)sizeof head || memcmp(head, "HPDLFCT", 8))
		return 0;
	memcpy(&n, head + 12, sizeof n);
	return n;
}

int exec_check_tier_files(const struct cli *c)
{
	for (int i = 0; i < c->ntiers; i++) {
		const char *eq = strchr(c->tiers[i], '='), *colon;
		char path[4096];
		uint64_t gen;
		size_t len;

		if (!eq)
			continue; /* parse_tier says what is wrong */
		colon = strrchr(eq + 1, ':');
		len = colon ? (size_t)(colon - (eq + 1)) : strlen(eq + 1);
		if (len >= sizeof path)
			continue;
		memcpy(path, eq + 1, len);
		path[len] = 0;
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0)
			continue;
		uint32_t n = committed_tensors(fd, &gen);
		close(fd);
		if (n) {
			fprintf(stderr, "hpdlf-exec: --tier %s holds a persistent store with %" PRIu32 " named tensor%s "
				"(commit %" PRIu64 "); hpdlf-exec uses its tiers as scratch and would overwrite them: "
				"give another path\n", path, n, n == 1 ? "" : "s", gen);
			return 2;
		}
	}
	return 0;
}
