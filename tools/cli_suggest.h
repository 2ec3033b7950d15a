/* "did you mean" for the programs' long options: one line for an option
 * getopt refused, naming the nearest known one when it is close. */
#ifndef HPDLF_TOOLS_CLI_SUGGEST_H
#define HPDLF_TOOLS_CLI_SUGGEST_H

#include <getopt.h>

/* The known option nearest to arg ("--itrations", "--itrations=3"), or
 * NULL when none is within 1 edit (2 for names longer than 6). */
const char *cli_nearest(const char *arg, const struct option *opts);
/* Say on stderr that `arg` (argv[optind - 1] after getopt returned '?' or
 * ':') was refused, "PROG: unknown option '--x' (did you mean --y?)" or
 * "PROG: missing the argument of option '--x'", and where help is;
 * returns 2, the usage exit status. */
int cli_bad_option(const char *prog, const char *arg, int missing, const struct option *opts);

#endif
