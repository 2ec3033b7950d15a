/* The case generator of fuzz_struct.c (fuzz_gen.c): a byte reader, a
 * protobuf writer and the makers of models, --shape texts and .npy files. */
#ifndef HPDLF_TESTS_FUZZ_STRUCT_H
#define HPDLF_TESTS_FUZZ_STRUCT_H

#include <stddef.h>
#include <stdint.h>

#define FZ_CASE_BYTES 512

/* Reads bytes of a case; past its end every byte is 0 (a valid case). */
struct fz_rd {
	const uint8_t *p;
	size_t n, at;
};
uint8_t fz_byte(struct fz_rd *r);
/* Mostly small (-2..4), one time in five extreme (2^31, 2^62, INT64_MIN...). */
int64_t fz_int(struct fz_rd *r);

struct fz_buf {
	uint8_t *p;
	size_t n, cap;
};

/* One operator as an ONNX model: input x (float), output y. */
void fz_model(struct fz_rd *r, struct fz_buf *out);
/* "AxBxC" as --shape takes it, extreme dims among them. */
void fz_shape_text(struct fz_rd *r, char *text, size_t len);
/* A .npy file: header with extreme shapes, descr and data maybe short. */
void fz_npy(struct fz_rd *r, struct fz_buf *out);
/* The bytes of case `index` of `seed`. */
void fz_case_bytes(uint64_t seed, long index, uint8_t *buf);

#endif
