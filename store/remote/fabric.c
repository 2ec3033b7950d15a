/* libfabric RDM endpoint setup: provider choice, mr_mode bits, registration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hpdlf/error.h"
#include "store/remote/fabric.h"
#include "store/remote/wire.h"

#define FIVERSION FI_VERSION(1, 9)

int hs_fab_unsafe(const char *prov)
{
	return prov && (!strncmp(prov, "shm", 3) || strstr(prov, ";shm") != NULL);
}

/* Providers that work but are slow or deprecated: used only when asked for. */
static int slow(const char *prov)
{
	return !strcmp(prov, "sockets") || strstr(prov, "ofi_rxd") != NULL || !strcmp(prov, "udp");
}

static struct fi_info *make_hints(const char *prov, int target, const char *src_host)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_RMA | (target ? FI_REMOTE_READ | FI_REMOTE_WRITE : FI_READ | FI_WRITE);
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode = HS_FAB_MR_MODES;
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->addr_format = src_host ? FI_SOCKADDR : FI_FORMAT_UNSPEC;
	if (prov)
		h->fabric_attr->prov_name = strdup(prov);
	return h;
}

static struct fi_info *pick(struct fi_info *list, const char *prov)
{
	if (prov || getenv("FI_PROVIDER"))
		return list;
	for (struct fi_info *i = list; i; i = i->next)
		if (!hs_fab_unsafe(i->fabric_attr->prov_name) && !slow(i->fabric_attr->prov_name))
			return i;
	for (struct fi_info *i = list; i; i = i->next)
		if (!hs_fab_unsafe(i->fabric_attr->prov_name))
			return i;
	return NULL;
}

static int getinfo(struct hs_fab *f, const char *prov, int target, const char *src_host)
{
	struct fi_info *hints = make_hints(prov, target, src_host), *list = NULL, *chosen;
	int rc;

	if (!hints)
		return -ENOMEM;
	rc = fi_getinfo(FIVERSION, src_host, src_host ? "0" : NULL, src_host ? FI_SOURCE : 0, hints, &list);
	fi_freeinfo(hints);
	if (rc)
		return hp_error(-EPROTONOSUPPORT, "libfabric: no RDM provider with RMA%s%s%s: %s",
				prov ? " named '" : "", prov ? prov : "", prov ? "'" : "", fi_strerror(-rc));
	chosen = pick(list, prov);
	if (!chosen) {
		fi_freeinfo(list);
		return hp_error(-EPROTONOSUPPORT, "libfabric: only shm offers RMA here, and shm checks no keys "
				"(pass --provider shm to accept that)");
	}
	f->info = fi_dupinfo(chosen);
	fi_freeinfo(list);
	return f->info ? 0 : -ENOMEM;
}

static int open_objects(struct hs_fab *f)
{
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_UNSPEC, .size = 1024 };
	struct fi_av_attr ava = { .type = FI_AV_TABLE };
	int rc;

	if ((rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL)))
		return hp_error(-EIO, "libfabric %s: fi_fabric: %s", f->prov, fi_strerror(-rc));
	if ((rc = fi_domain(f->fabric, f->info, &f->domain, NULL)))
		return hp_error(-EIO, "libfabric %s: fi_domain: %s", f->prov, fi_strerror(-rc));
	if ((rc = fi_cq_open(f->domain, &cqa, &f->cq, NULL)))
		return hp_error(-EIO, "libfabric %s: fi_cq_open: %s", f->prov, fi_strerror(-rc));
	if ((rc = fi_av_open(f->domain, &ava, &f->av, NULL)))
		return hp_error(-EIO, "libfabric %s: fi_av_open: %s", f->prov, fi_strerror(-rc));
	if ((rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)))
		return hp_error(-EIO, "libfabric %s: fi_endpoint: %s", f->prov, fi_strerror(-rc));
	if ((rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_ep_bind(f->ep, &f->av->fid, 0)) || (rc = fi_enable(f->ep)))
		return hp_error(-EIO, "libfabric %s: endpoint setup: %s", f->prov, fi_strerror(-rc));
	f->addrlen = sizeof f->addr;
	if ((rc = fi_getname(&f->ep->fid, f->addr, &f->addrlen)))
		return hp_error(-EIO, "libfabric %s: fi_getname: %s", f->prov, fi_strerror(-rc));
	return 0;
}

int hs_fab_open(struct hs_fab *f, const char *prov, int target, const char *src_host)
{
	int rc;

	memset(f, 0, sizeof *f);
	if ((rc = hs_remote_libs_load()) < 0)
		return rc;
	rc = getinfo(f, prov, target, src_host);
	if (rc < 0)
		return rc;
	snprintf(f->prov, sizeof f->prov, "%s", f->info->fabric_attr->prov_name);
	f->mr_mode = (uint64_t)f->info->domain_attr->mr_mode;
	f->max_msg = f->info->ep_attr->max_msg_size;
	f->key_bytes = f->info->domain_attr->mr_key_size;
	if (f->key_bytes == 0 || f->key_bytes > sizeof(uint64_t))
		f->key_bytes = sizeof(uint64_t);
	f->tx_size = f->info->tx_attr->size ? f->info->tx_attr->size : 64;
	rc = open_objects(f);
	if (rc < 0)
		hs_fab_close(f);
	return rc;
}

void hs_fab_close(struct hs_fab *f)
{
	if (f->ep)
		fi_close(&f->ep->fid);
	if (f->av)
		fi_close(&f->av->fid);
	if (f->cq)
		fi_close(&f->cq->fid);
	if (f->domain)
		fi_close(&f->domain->fid);
	if (f->fabric)
		fi_close(&f->fabric->fid);
	if (f->info)
		fi_freeinfo(f->info);
	f->ep = NULL;
	f->av = NULL;
	f->cq = NULL;
	f->domain = NULL;
	f->fabric = NULL;
	f->info = NULL;
}

/* A key nobody can guess: the provider's own (FI_MR_PROV_KEY), else random
 * bytes from the CSPRNG, as wide as the provider's keys; a collision with a
 * live key (-FI_ENOKEY) draws again. */
int hs_fab_mr_reg(struct hs_fab *f, void *buf, size_t len, uint64_t access, struct fid_mr **mr)
{
	int rc = -FI_ENOKEY;

	for (int tries = 0; tries < 8 && rc == -FI_ENOKEY; tries++) {
		uint64_t key = 0;
		if (!(f->mr_mode & FI_MR_PROV_KEY))
			hs_random(&key, f->key_bytes);
		rc = fi_mr_reg(f->domain, buf, len, access, 0, key, 0, mr, NULL);
	}
	if (rc)
		return hp_error(-EIO, "libfabric %s: cannot register %zu bytes: %s", f->prov, len, fi_strerror(-rc));
	if (f->mr_mode & FI_MR_ENDPOINT) {
		rc = fi_mr_bind(*mr, &f->ep->fid, 0);
		if (!rc)
			rc = fi_mr_enable(*mr);
		if (rc) {
			fi_close(&(*mr)->fid);
			return hp_error(-EIO, "libfabric %s: cannot bind a region to the endpoint: %s", f->prov,
					fi_strerror(-rc));
		}
	}
	return 0;
}

int hs_fab_av_insert(struct hs_fab *f, const void *addr, size_t len, fi_addr_t *out)
{
	int rc;

	if (len == 0 || len > sizeof f->addr)
		return hp_error(HP_EPROTO, "fabric address of %zu bytes", len);
	rc = fi_av_insert(f->av, addr, 1, out, 0, NULL);
	if (rc != 1)
		return hp_error(-EIO, "libfabric %s: fi_av_insert: %s", f->prov, fi_strerror(rc < 0 ? -rc : FI_EINVAL));
	return 0;
}

int hs_fab_cq_error(struct hs_fab *f, void **ctx, char *buf, size_t len)
{
	struct fi_cq_err_entry e = { 0 };
	ssize_t rc = fi_cq_readerr(f->cq, &e, 0);

	if (rc < 0) {
		*ctx = NULL;
		snprintf(buf, len, "fi_cq_readerr: %s", fi_strerror((int)-rc));
		return (int)rc;
	}
	*ctx = e.op_context;
	snprintf(buf, len, "%s (provider: %s)", fi_strerror(e.err),
		 fi_cq_strerror(f->cq, e.prov_errno, e.err_data, NULL, 0));
	return e.err ? -e.err : -EIO;
}
