/* Parsing helpers shared by the programs and the library. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdatomic.h>
#include <unistd.h>

#include "hpdlf/error.h"
#include "hpdlf/tensor.h"
#include "common/cpus.h"

int hp_parse_size(const char *text, uint64_t *out)
{
	char *end;
	double v;
	uint64_t mul = 1;

	errno = 0;
	v = strtod(text, &end);
	if (end == text || errno || v < 0)
		return hp_error(HP_EUSAGE, "'%s' is not a size (examples: 512M, 16G, 1.5T)", text);
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	case 't': case 'T': mul = 1ull << 40; end++; break;
	default: break;
	}
	if (!strcasecmp(end, "ib") || !strcasecmp(end, "b"))
		end += strlen(end);
	if (*end)
		return hp_error(HP_EUSAGE, "'%s' is not a size (examples: 512M, 16G, 1.5T)", text);
	if (v * (double)mul >= 18446744073709551615.0)
		return hp_error(HP_EUSAGE, "size '%s' is too large", text);
	*out = (uint64_t)(v * (double)mul);
	return 0;
}

char *hp_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

int hp_cpus_online(void)
{
	static _Atomic int cached;
	int n = atomic_load_explicit(&cached, memory_order_relaxed);

	if (n == 0) {
		long v = sysconf(_SC_NPROCESSORS_ONLN);
		n = v > 0 ? (int)v : 1;
		atomic_store_explicit(&cached, n, memory_order_relaxed);
	}
	return n;
}
