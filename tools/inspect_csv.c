/* --csv: a --log-json file (one JSON object per line) as CSV, for people
 * who plot elsewhere.  Nested objects are flattened with dots
 * ("tiers.nvme0.bytes_read"); the columns are every key seen, in the order
 * first seen, so lines of different kinds (an older schema, a resumed run
 * appending) share one header and leave cells empty where they lack a key. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "hpdlf/error.h"
#include "tools/inspect.h"

struct columns {
	char **name;
	int n, cap;
};

static int column_of(struct columns *c, const char *name, int add)
{
	for (int i = 0; i < c->n; i++)
		if (!strcmp(c->name[i], name))
			return i;
	if (!add)
		return -1;
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 32;
		char **p = realloc(c->name, (size_t)cap * sizeof *p);
		if (!p)
			return -ENOMEM;
		c->name = p;
		c->cap = cap;
	}
	if (!(c->name[c->n] = strdup(name)))
		return -ENOMEM;
	return c->n++;
}

/* Every leaf of o under prefix: its column added (cells NULL) or its
 * value stored in cells (a row). */
static int walk(json_object *o, const char *prefix, struct columns *c, json_object **cells)
{
	json_object_object_foreach(o, k, v) {
		char name[512];
		int i;
		snprintf(name, sizeof name, "%s%s%s", prefix, prefix[0] ? "." : "", k);
		if (v && json_object_is_type(v, json_type_object)) {
			if ((i = walk(v, name, c, cells)) < 0)
				return i;
			continue;
		}
		if ((i = column_of(c, name, !cells)) < 0 && !cells)
			return i;
		if (cells && i >= 0)
			cells[i] = v;
	}
	return 0;
}

static void put_cell(FILE *f, json_object *v)
{
	const char *s;

	if (!v)
		return;
	if (json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
	} else if (json_object_is_type(v, json_type_boolean)) {
		fputs(json_object_get_boolean(v) ? "true" : "false", f);
		return;
	} else {
		s = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
	}
	if (!strpbrk(s, ",\"\n\r")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++)
		fputs(*s == '"' ? "\"\"" : (char[]){ *s, 0 }, f);
	fputc('"', f);
}

/* Pass 0 collects the columns, pass 1 writes the rows. */
static int csv_pass(char *text, const char *path, struct columns *c, FILE *f, int pass)
{
	int lineno = 0, rc = 0;
	json_object **cells = pass ? calloc((size_t)c->n + 1, sizeof *cells) : NULL;

	if (pass && !cells)
		return -ENOMEM;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && rc == 0;
	     line = strtok_r(NULL, "\n", &save)) {
		json_object *o = json_tokener_parse(line);
		lineno++;
		if (!o || !json_object_is_type(o, json_type_object))
			rc = hp_error(HP_EFORMAT, "%s:%d: not a JSON object (--csv reads hpdlf-exec --log-json files)",
				      path, lineno);
		else if (pass)
			memset(cells, 0, (size_t)c->n * sizeof *cells);
		if (rc == 0)
			rc = walk(o, "", c, cells);
		for (int i = 0; rc == 0 && pass && i < c->n; i++) {
			if (i)
				fputc(',', f);
			put_cell(f, cells[i]);
		}
		if (rc == 0 && pass)
			fputc('\n', f);
		json_object_put(o);
	}
	free(cells);
	return rc;
}

static int write_csv(const char *in_path, const char *out_path, char *text, struct columns *c)
{
	FILE *f = strcmp(out_path, "-") ? fopen(out_path, "w") : stdout;
	int rc;

	if (!f)
		return hp_error(-errno, "%s: %s", out_path, strerror(errno));
	for (int i = 0; i < c->n; i++)
		fprintf(f, "%s%s", i ? "," : "", c->name[i]);
	fputc('\n', f);
	rc = csv_pass(text, in_path, c, f, 1);
	if ((f == stdout ? fflush(f) : fclose(f)) != 0 && rc == 0)
		rc = hp_error(-EIO, "%s: write failed", out_path);
	return rc;
}

int insp_csv(const char *in_path, const char *out_path)
{
	struct columns c = { 0 };
	char *text = NULL, *copy = NULL;
	int rc = insp_read_file(in_path, &text);

	if (rc == 0 && !(copy = strdup(text)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = csv_pass(text, in_path, &c, NULL, 0);
	if (rc == 0 && !c.n)
		rc = hp_error(HP_EDATA, "%s: no lines to convert", in_path);
	if (rc == 0)
		rc = write_csv(in_path, out_path, copy, &c);
	for (int i = 0; i < c.n; i++)
		free(c.name[i]);
	free(c.name);
	free(text);
	free(copy);
	return rc;
}
