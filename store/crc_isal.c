/* crc32c through ISA-L (SSE4.2 / AVX-512 code picked at run time). */
#include <isa-l/crc.h>

#include "store/crc.h"

uint32_t hs_crc32c(const void *buf, size_t len)
{
	/* ISA-L takes and returns the register without the final inversion. */
	return ~crc32_iscsi((unsigned char *)buf, (int)len, ~0u);
}
