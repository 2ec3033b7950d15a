/* crc32c (Castagnoli, the iSCSI polynomial) of chunk data and metadata. */
#ifndef HPDLF_STORE_CRC_H
#define HPDLF_STORE_CRC_H

#include <stddef.h>
#include <stdint.h>

/* Standard crc32c: crc32c("123456789") == 0xE3069283. */
uint32_t hs_crc32c(const void *buf, size_t len);

#endif
