/* ONNX export of the trained model. */
#include "hpdlf/error.h"
#include "exec/train_internal.h"

int hp_trainer_export_onnx(struct hp_trainer *t, const char *path, int external)
{
	(void)t;
	(void)external;
	return hp_error(HP_EUNSUPPORTED, "%s: ONNX export is not implemented yet", path);
}
