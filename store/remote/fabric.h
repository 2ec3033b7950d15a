/* libfabric RDM endpoint setup shared by the daemon, the remote tier and the
 * benchmark: provider choice, mr_mode handling, registration. */
#ifndef HPDLF_STORE_REMOTE_FABRIC_H
#define HPDLF_STORE_REMOTE_FABRIC_H

#include <stddef.h>
#include <stdint.h>

#include "store/remote/lazy.h" /* first: renames the loaded functions */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

/* The mr_mode bits this code knows how to honour. */
#define HS_FAB_MR_MODES (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT)

struct hs_fab {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	uint64_t mr_mode;
	size_t max_msg;         /* largest single RMA */
	size_t tx_size;         /* transmit queue depth */
	char prov[64];
	uint8_t addr[256];
	size_t addrlen;
	size_t key_bytes;       /* width of the provider's MR keys (at most 8) */
};

/* Open an RDM endpoint.  target: accepts remote reads/writes (daemon), and
 * src_host binds it to that interface.  prov NULL: $FI_PROVIDER, else the
 * first provider that is not shm (no key or bounds checks) nor slow. */
int hs_fab_open(struct hs_fab *f, const char *prov, int target, const char *src_host);
void hs_fab_close(struct hs_fab *f);
/* Register buf under an unguessable key (the provider's with FI_MR_PROV_KEY,
 * else from the CSPRNG); access FI_REMOTE_READ|FI_REMOTE_WRITE (target) or
 * FI_READ|FI_WRITE (local).  Binds and enables it for FI_MR_ENDPOINT. */
int hs_fab_mr_reg(struct hs_fab *f, void *buf, size_t len, uint64_t access, struct fid_mr **mr);
/* Peer address -> fi_addr. */
int hs_fab_av_insert(struct hs_fab *f, const void *addr, size_t len, fi_addr_t *out);
/* Text of the last error completion of f->cq (after -FI_EAVAIL). */
int hs_fab_cq_error(struct hs_fab *f, void **ctx, char *buf, size_t len);
/* 1 if a provider is shm-like: it enforces neither keys nor bounds. */
int hs_fab_unsafe(const char *prov);

#endif
