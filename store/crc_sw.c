/* crc32c without ISA-L (a build where libisal is missing): a bitwise loop,
 * correct but slow; meson reports the missing dependency. */
#include "store/crc.h"

uint32_t hs_crc32c(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t c = ~0u;

	for (size_t i = 0; i < len; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
	}
	return ~c;
}
