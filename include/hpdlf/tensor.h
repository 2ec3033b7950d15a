/* hpdlf tensors: element types, shapes, host buffers and .npy files.
 *
 *   struct hp_tensor t;
 *   if (hp_npy_read("x.npy", &t) < 0) ...;        // t.data is malloc'd
 *   printf("%s %lld\n", hp_dtype_name(t.dtype), (long long)hp_shape_numel(&t.shape));
 *   hp_tensor_free(&t);
 *
 * A struct hp_tensor is a view: dtype, shape and a pointer to dense row-major
 * data.  Who owns `data` is said by the function that filled it in.
 */
#ifndef HPDLF_TENSOR_H
#define HPDLF_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values are ONNX's TensorProto.DataType codes. */
enum hp_dtype {
	HP_UNDEFINED = 0,
	HP_F32 = 1,
	HP_U8 = 2,
	HP_I8 = 3,
	HP_U16 = 4,
	HP_I16 = 5,
	HP_I32 = 6,
	HP_I64 = 7,
	HP_STRING = 8,
	HP_BOOL = 9,
	HP_F16 = 10,
	HP_F64 = 11,
	HP_U32 = 12,
	HP_U64 = 13,
	HP_BF16 = 16,
};

/* Rank limit of the IR; deeper tensors are refused with a clear error. */
#define HP_MAX_RANK 8

struct hp_shape {
	int rank;
	int64_t dims[HP_MAX_RANK]; /* -1: not known yet */
};

struct hp_tensor {
	enum hp_dtype dtype;
	struct hp_shape shape;
	void *data;
};

/* Bytes per element, 0 for unsupported/variable-size types. */
size_t hp_dtype_size(enum hp_dtype t);
const char *hp_dtype_name(enum hp_dtype t); /* "float32", "int64", ... */

int64_t hp_shape_numel(const struct hp_shape *s); /* -1 if a dim is unknown or the count overflows */
int hp_shape_equal(const struct hp_shape *a, const struct hp_shape *b);
/* "1x3x224x224" (scalar: "scalar"); returns buf. */
char *hp_shape_str(const struct hp_shape *s, char *buf, size_t len);
/* Parse "1x3x224x224" into s; -HP_EUSAGE style errors with message. */
int hp_shape_parse(const char *text, struct hp_shape *s);
/* No tensor may hold more bytes than this: 128 TiB, the user address space
 * of x86-64 and AArch64 with 4-level page tables.  Shapes beyond it are bad
 * input, refused before any size is computed from them. */
#define HP_TENSOR_MAX_BYTES ((uint64_t)1 << 47)
/* Bytes of a tensor of this dtype and shape: -1 if a dim is unknown or the
 * dtype has no fixed size, -2 if the count exceeds HP_TENSOR_MAX_BYTES (no
 * intermediate product can wrap). */
int64_t hp_shape_bytes(const struct hp_shape *s, enum hp_dtype dtype);
/* hp_shape_bytes of t; 0 when unknown, SIZE_MAX when too large (so any
 * allocation of it fails instead of wrapping). */
size_t hp_tensor_bytes(const struct hp_tensor *t);

/* Allocate zeroed, 64-byte aligned data for dtype/shape (caller frees with
 * hp_tensor_free). */
int hp_tensor_alloc(struct hp_tensor *t, enum hp_dtype dtype, const struct hp_shape *shape);
void hp_tensor_free(struct hp_tensor *t);

/* .npy (format 1.0/2.0/3.0, little-endian, C order). Read allocates t->data
 * (free with hp_tensor_free); errors name the file and what is wrong. */
int hp_npy_read(const char *path, struct hp_tensor *t);
/* Read only the header: dtype, shape and the byte offset of the data. */
int hp_npy_header(const char *path, enum hp_dtype *dtype, struct hp_shape *shape, uint64_t *data_offset);
int hp_npy_write(const char *path, const struct hp_tensor *t);

/* "16G" -> bytes (K/M/G/T binary suffixes, optional "iB"/"B"; decimals ok). */
int hp_parse_size(const char *text, uint64_t *out);
/* bytes -> "1.5 GiB"; returns buf. */
char *hp_format_size(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
