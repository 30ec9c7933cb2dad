// host.h: the project's C headers as the GPU sources' host code sees them.
#ifndef STRATA_GPU_HOST_H
#define STRATA_GPU_HOST_H

extern "C" {
#include "gpu.h"
}
#include "util.h"

#endif
