/* libfabric and libsodium, loaded on first use (lazy.c).
 *
 * Debian's libfabric links libpsm_infinipath, whose load-time constructor
 * pins the thread to core 0, sleeps ~0.2 s and installs SIGSEGV/SIGINT/
 * SIGTERM handlers: every process linking libfabric paid that before main()
 * (issue 20), local runs included.  So the remote code does not link either
 * library: this header, included before <rdma/fabric.h> and <sodium.h>, renames
 * the few real functions it calls (every other libfabric call is an inline
 * through the provider's ops tables) to loaders that dlopen both libraries
 * the first time a remote tier, daemon, token or stat is opened.
 *
 * Only the functions listed here may be called; one missing shows up as an
 * undefined fi_ or sodium symbol at link time (libhpdlf links neither). */
#ifndef HPDLF_STORE_REMOTE_LAZY_H
#define HPDLF_STORE_REMOTE_LAZY_H

#define fi_getinfo hs_lz_fi_getinfo
#define fi_freeinfo hs_lz_fi_freeinfo
#define fi_dupinfo hs_lz_fi_dupinfo
#define fi_fabric hs_lz_fi_fabric
#define fi_strerror hs_lz_fi_strerror
#define sodium_init hs_lz_sodium_init
#define sodium_malloc hs_lz_sodium_malloc
#define sodium_free hs_lz_sodium_free
#define sodium_memzero hs_lz_sodium_memzero
#define sodium_memcmp hs_lz_sodium_memcmp
#define randombytes_buf hs_lz_randombytes_buf
#define crypto_auth hs_lz_crypto_auth
#define crypto_generichash hs_lz_crypto_generichash
#define crypto_generichash_init hs_lz_crypto_generichash_init
#define crypto_generichash_update hs_lz_crypto_generichash_update
#define crypto_generichash_final hs_lz_crypto_generichash_final

/* Load both libraries (once; thread-safe): 0, or HP_EUNSUPPORTED naming
 * the file and dlerror() (hp_errmsg()).  Every entry point of the remote
 * code calls it first; the renamed functions also load on their own and
 * fail (or abort, for randombytes_buf) when loading failed. */
int hs_remote_libs_load(void);

#endif
