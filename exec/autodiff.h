/* Training graph construction (internal include): the declarations are
 * public in hpdlf/train.h (hp_train_spec, hp_autodiff). */
#ifndef HPDLF_EXEC_AUTODIFF_H
#define HPDLF_EXEC_AUTODIFF_H

#include "hpdlf/train.h"

#endif
