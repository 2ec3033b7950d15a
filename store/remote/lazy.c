/* libfabric and libsodium through dlopen on first use (see lazy.h): a local
 * run never maps them, so it never pays libpsm_infinipath's constructor. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <sodium.h>

#include "hpdlf/error.h"
#include "store/remote/lazy_sonames.h"

/* The real functions, typed from their own headers (before lazy.h renames
 * them).  All or none are set: load() fills a local table first. */
struct lz_table {
	__typeof__(fi_getinfo) *p_fi_getinfo;
	__typeof__(fi_freeinfo) *p_fi_freeinfo;
	__typeof__(fi_dupinfo) *p_fi_dupinfo;
	__typeof__(fi_fabric) *p_fi_fabric;
	__typeof__(fi_strerror) *p_fi_strerror;
	__typeof__(sodium_init) *p_sodium_init;
	__typeof__(sodium_malloc) *p_sodium_malloc;
	__typeof__(sodium_free) *p_sodium_free;
	__typeof__(sodium_memzero) *p_sodium_memzero;
	__typeof__(sodium_memcmp) *p_sodium_memcmp;
	__typeof__(randombytes_buf) *p_randombytes_buf;
	__typeof__(crypto_auth) *p_crypto_auth;
	__typeof__(crypto_generichash) *p_crypto_generichash;
	__typeof__(crypto_generichash_init) *p_crypto_generichash_init;
	__typeof__(crypto_generichash_update) *p_crypto_generichash_update;
	__typeof__(crypto_generichash_final) *p_crypto_generichash_final;
};

#include "common/keep.h"
#include "store/remote/lazy.h"

static struct lz_table lz;
static int lz_ok;
static char lz_why[512];
static pthread_once_t lz_once = PTHREAD_ONCE_INIT;

struct lz_sym {
	int lib;                /* 0: libfabric, 1: libsodium */
	const char *name;
	size_t off;
};
#define S(lib, f) { lib, #f, offsetof(struct lz_table, p_##f) }
static const struct lz_sym syms[] = {
	S(0, fi_getinfo), S(0, fi_freeinfo), S(0, fi_dupinfo), S(0, fi_fabric), S(0, fi_strerror),
	S(1, sodium_init), S(1, sodium_malloc), S(1, sodium_free), S(1, sodium_memzero), S(1, sodium_memcmp),
	S(1, randombytes_buf), S(1, crypto_auth), S(1, crypto_generichash), S(1, crypto_generichash_init),
	S(1, crypto_generichash_update), S(1, crypto_generichash_final),
};
#undef S

/* What the constructors of libpsm_infinipath and libpsm2 change in the
 * loading process (CPU affinity, the handlers tools/crash_signals.c lists)
 * is put back: loaded in the middle of a run, they must not pin the
 * caller's thread to core 0 nor keep SIGTERM (exit 1 instead of 143) or
 * SIGSEGV (no core dump).  Their handlers are not even installed during
 * the ~0.2 s the constructor sleeps inside dlopen (OpenBLAS's threads,
 * which exist already, would take a signal there): hp_keep_save sets
 * IPATH_NO_BACKTRACE and HFI_NO_BACKTRACE first (common/keep.c). */
static void load_once(void)
{
	static const char *const files[2] = { HS_LIBFABRIC_SONAME, HS_LIBSODIUM_SONAME };
	void *h[2] = { NULL, NULL };
	struct lz_table t;
	struct hp_keep saved;

	hp_keep_save(&saved);
	for (int i = 0; i < 2; i++)
		if (!(h[i] = dlopen(files[i], RTLD_NOW | RTLD_LOCAL))) {
			const char *e = dlerror();

			snprintf(lz_why, sizeof lz_why, "cannot load %s (the remote tier needs it): %s", files[i],
				 e ? e : "unknown error");
			hp_keep_restore(&saved);
			return; /* what was loaded stays: dlclose of libfabric is not safe to repeat */
		}
	hp_keep_restore(&saved);
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *p = dlsym(h[syms[i].lib], syms[i].name);

		if (!p) {
			snprintf(lz_why, sizeof lz_why, "%s has no %s (the remote tier needs it)", files[syms[i].lib],
				 syms[i].name);
			return;
		}
		memcpy((char *)&t + syms[i].off, &p, sizeof p);
	}
	lz = t;
	__atomic_store_n(&lz_ok, 1, __ATOMIC_RELEASE);
}

int hs_remote_libs_load(void)
{
	pthread_once(&lz_once, load_once);
	if (__atomic_load_n(&lz_ok, __ATOMIC_ACQUIRE))
		return 0;
	return hp_error(HP_EUNSUPPORTED, "%s", lz_why);
}

/* Loaded, without touching the caller's error message. */
static int ready(void)
{
	pthread_once(&lz_once, load_once);
	return __atomic_load_n(&lz_ok, __ATOMIC_ACQUIRE);
}

int hs_lz_fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		     const struct fi_info *hints, struct fi_info **info)
{
	return ready() ? lz.p_fi_getinfo(version, node, service, flags, hints, info) : -FI_ENOSYS;
}

void hs_lz_fi_freeinfo(struct fi_info *info)
{
	if (ready())
		lz.p_fi_freeinfo(info);
}

struct fi_info *hs_lz_fi_dupinfo(const struct fi_info *info)
{
	return ready() ? lz.p_fi_dupinfo(info) : NULL;
}

int hs_lz_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	return ready() ? lz.p_fi_fabric(attr, fabric, context) : -FI_ENOSYS;
}

const char *hs_lz_fi_strerror(int errnum)
{
	return ready() ? lz.p_fi_strerror(errnum) : "libfabric is not loaded";
}

int hs_lz_sodium_init(void)
{
	return ready() ? lz.p_sodium_init() : -1;
}

void *hs_lz_sodium_malloc(const size_t size)
{
	return ready() ? lz.p_sodium_malloc(size) : NULL;
}

void hs_lz_sodium_free(void *ptr)
{
	if (ready())
		lz.p_sodium_free(ptr);
}

void hs_lz_sodium_memzero(void *const pnt, const size_t len)
{
	if (ready())
		lz.p_sodium_memzero(pnt, len);
	else
		explicit_bzero(pnt, len);
}

int hs_lz_sodium_memcmp(const void *const b1_, const void *const b2_, size_t len)
{
	return ready() ? lz.p_sodium_memcmp(b1_, b2_, len) : -1; /* nothing compares equal */
}

void hs_lz_randombytes_buf(void *const buf, const size_t size)
{
	if (!ready())
		abort(); /* no entropy source: nothing secure can be done (as hs_random) */
	lz.p_randombytes_buf(buf, size);
}

int hs_lz_crypto_auth(unsigned char *out, const unsigned char *in, unsigned long long inlen, const unsigned char *k)
{
	return ready() ? lz.p_crypto_auth(out, in, inlen, k) : -1;
}

int hs_lz_crypto_generichash(unsigned char *out, size_t outlen, const unsigned char *in, unsigned long long inlen,
			     const unsigned char *key, size_t keylen)
{
	return ready() ? lz.p_crypto_generichash(out, outlen, in, inlen, key, keylen) : -1;
}

int hs_lz_crypto_generichash_init(crypto_generichash_state *state, const unsigned char *key, const size_t keylen,
				  const size_t outlen)
{
	return ready() ? lz.p_crypto_generichash_init(state, key, keylen, outlen) : -1;
}

int hs_lz_crypto_generichash_update(crypto_generichash_state *state, const unsigned char *in,
				    unsigned long long inlen)
{
	return ready() ? lz.p_crypto_generichash_update(state, in, inlen) : -1;
}

int hs_lz_crypto_generichash_final(crypto_generichash_state *state, unsigned char *out, const size_t outlen)
{
	return ready() ? lz.p_crypto_generichash_final(state, out, outlen) : -1;
}

/* Each loader has exactly its library's signature. */
#define SAME(f) _Static_assert(__builtin_types_compatible_p(__typeof__(&hs_lz_##f), __typeof__(lz.p_##f)), #f)
SAME(fi_getinfo);
SAME(fi_freeinfo);
SAME(fi_dupinfo);
SAME(fi_fabric);
SAME(fi_strerror);
SAME(sodium_init);
SAME(sodium_malloc);
SAME(sodium_free);
SAME(sodium_memzero);
SAME(sodium_memcmp);
SAME(randombytes_buf);
SAME(crypto_auth);
SAME(crypto_generichash);
SAME(crypto_generichash_init);
SAME(crypto_generichash_update);
SAME(crypto_generichash_final);
