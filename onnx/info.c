/* hp_model_info: the ModelProto's own fields (IR version, opset imports,
 * producer), read from the top level of the file without the graph. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "hpdlf/error.h"
#include "hpdlf/graph.h"
#include "onnx/wire.h"

static void copy_str(char *dst, size_t cap, const uint8_t *p, size_t len)
{
	if (len >= cap)
		len = cap - 1;
	memcpy(dst, p, len);
	dst[len] = 0;
}

/* One OperatorSetIdProto (domain, version). */
static void opset_import(struct hp_model_info *mi, const uint8_t *p, size_t len)
{
	struct pb_reader r = { p, p + len };
	struct pb_field f;
	char domain[64] = "";
	int64_t version = 0;

	while (pb_next(&r, &f) == 1) {
		if (f.num == 1 && f.wt == PB_LEN)
			copy_str(domain, sizeof domain, f.data, f.len);
		else if (f.num == 2 && f.wt == PB_VARINT)
			version = (int64_t)f.v;
	}
	if (!domain[0] || !strcmp(domain, "ai.onnx")) {
		mi->opset = version;
	} else if (mi->ndomains < 8) {
		snprintf(mi->domains[mi->ndomains], sizeof mi->domains[0], "%s", domain);
		mi->domain_versions[mi->ndomains++] = version;
	}
}

static int walk(struct pb_src *s, struct hp_model_info *mi, const char *path)
{
	uint8_t buf[512];
	struct pb_sfield f;
	uint64_t pos = 0;
	int rc;

	while ((rc = pb_src_next(s, &pos, s->size, &f)) > 0) {
		int small = f.wt == PB_LEN && f.len <= sizeof buf;
		if (f.num == 1 && f.wt == PB_VARINT)
			mi->ir_version = (int64_t)f.v;
		if (!small || (f.num != 2 && f.num != 3 && f.num != 8))
			continue;
		if (pb_src_read(s, f.off, buf, (size_t)f.len) < 0)
			return hp_error(s->err ? s->err : -EIO, "%s: reading the model", path);
		if (f.num == 2)
			copy_str(mi->producer, sizeof mi->producer, buf, (size_t)f.len);
		else if (f.num == 3)
			copy_str(mi->producer_version, sizeof mi->producer_version, buf, (size_t)f.len);
		else
			opset_import(mi, buf, (size_t)f.len);
	}
	return rc < 0 ? hp_error(HP_EMODEL, "%s: truncated or corrupt protobuf (model)", path) : 0;
}

int hp_model_info(const char *path, struct hp_model_info *info)
{
	struct hp_model_info mi = { .size = sizeof mi };
	struct pb_src s;
	struct stat st;
	int fd, rc;

	if (!path || !info || info->size < offsetof(struct hp_model_info, producer))
		return hp_error(HP_EUSAGE, "hp_model_info: NULL argument or size not set");
	rc = hp_open_regular(path, NULL, &fd, &st);
	if (rc < 0)
		return rc;
	s = (struct pb_src){ .fd = fd, .size = (uint64_t)st.st_size, .win = malloc(PB_WINDOW) };
	rc = s.win ? walk(&s, &mi, path) : hp_error(-ENOMEM, "out of memory");
	if (rc == 0 && !mi.opset && !mi.ndomains && mi.ir_version && mi.ir_version < 3)
		mi.opset = 1; /* IR 1 and 2 had no opset imports */
	free(s.win);
	close(fd);
	if (rc == 0) {
		size_t n = info->size < sizeof mi ? info->size : sizeof mi;
		memcpy(info, &mi, n);
		info->size = n;
	}
	return rc;
}
