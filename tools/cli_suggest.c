/* "did you mean": the edit distance of a mistyped long option to each
 * known one (Levenshtein; names are short, so a plain table will do). */
#include <stdio.h>
#include <string.h>

#include "tools/cli_suggest.h"

static int distance(const char *a, const char *b)
{
	int la = (int)strlen(a), lb = (int)strlen(b), d[40][40];

	if (la > 38 || lb > 38)
		return 9;
	for (int i = 0; i <= la; i++)
		d[i][0] = i;
	for (int j = 0; j <= lb; j++)
		d[0][j] = j;
	for (int i = 1; i <= la; i++)
		for (int j = 1; j <= lb; j++) {
			int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1, z = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			d[i][j] = x < y ? (x < z ? x : z) : (y < z ? y : z);
		}
	return d[la][lb] < 9 ? d[la][lb] : 9;
}

const char *cli_nearest(const char *arg, const struct option *opts)
{
	char name[64];
	const char *best = NULL;
	int bd = 9;

	snprintf(name, sizeof name, "%s", arg + strspn(arg, "-"));
	name[strcspn(name, "=")] = 0;
	for (const struct option *o = opts; o->name; o++) {
		int d = distance(name, o->name);
		if (d < bd) {
			bd = d;
			best = o->name;
		}
	}
	return best && bd > 0 && bd <= ((int)strlen(name) > 6 ? 2 : 1) ? best : NULL;
}

int cli_bad_option(const char *prog, const char *arg, int missing, const struct option *opts)
{
	const char *near = missing ? NULL : cli_nearest(arg, opts);
	int n = (int)strcspn(arg, "=");

	if (missing)
		fprintf(stderr, "%s: missing the argument of option '%s'\n", prog, arg);
	else if (near)
		fprintf(stderr, "%s: unknown option '%.*s' (did you mean --%s?)\n", prog, n, arg, near);
	else
		fprintf(stderr, "%s: unknown option '%.*s'\n", prog, n, arg);
	fprintf(stderr, "(see %s --help)\n", prog);
	return 2;
}
