/* hpdlf-exec --train: placeholder until training lands. */
#include <stdio.h>

#include "tools/exec_cli.h"

int exec_train_main(struct cli *c)
{
	(void)c;
	fprintf(stderr, "hpdlf-exec: --train is not available in this version yet\n");
	return 2;
}
