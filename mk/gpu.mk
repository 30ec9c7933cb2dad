# mk/gpu.mk: the GPU backend's build rules, included by the Makefile after it
# defines LIB_OBJ. Without GPU= nothing changes (the CPU-only build).
#
#   make GPU=cuda  [CUDA_ARCH="sm_90"] [NVCC=nvcc]          NVIDIA, CUDA
#   make GPU=hip   [HIP_ARCH="gfx90a gfx1100"] [HIPCC=hipcc] AMD, HIP (ROCm)
#   make GPU=spirv [HIPCC=<chipStar's hipcc>]                SPIR-V, HIP on chipStar
#                  [CHIPSTAR_PATH=<its installation>]         (default: HIPCC's ..)
#   STRATA_PORTABLE_INTRINSICS=1   the portable intrinsics on any target (the
#                                  SPIR-V arithmetic path, runnable on NVIDIA)
#   STRATA_SPIRV_DOT4=1            GPU=spirv: the native 4x8-bit dot product
#                                  (SPV_KHR_integer_dot_product; docs/BACKENDS.md)
#
# CUDA_ARCH and HIP_ARCH take a list: one binary holds code for each. The GPU
# sources are src/gpu/*.cu; they go into libstrata.a, host C is compiled with
# -DSTRATA_GPU (so it may call backend_gpu_init, src/gpu/gpu.h), and programs
# link the vendor runtime. Use a separate BUILD directory per GPU setting.

GPU       ?=
CUDA_ARCH ?= sm_90
HIP_ARCH  ?= gfx90a
NVCC      ?= nvcc
HIPCC     ?= hipcc
CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC) 2>/dev/null)))
ROCM_PATH ?= /opt/rocm

ifneq ($(GPU),)
GPU_SRC   := $(wildcard src/gpu/*.cu)
GPU_OBJ   := $(GPU_SRC:%.cu=$(BUILD)/%.o)
GPU_FLAGS := -std=c++17 -O3 -Isrc -Isrc/gpu
ifeq ($(STRATA_PORTABLE_INTRINSICS),1)
GPU_FLAGS += -DSTRATA_PORTABLE_INTRINSICS
endif
ifeq ($(STRATA_SPIRV_DOT4),1)
GPU_FLAGS += -DSTRATA_SPIRV_DOT4
endif

ifeq ($(GPU),cuda)
GPU_CC    := $(NVCC)
GPU_FLAGS += $(foreach a,$(CUDA_ARCH),-gencode=arch=compute_$(a:sm_%=%),code=$(a)) \
             -Werror all-warnings -Xcompiler -Wall,-Wextra
LDLIBS    += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
else ifeq ($(GPU),hip)
GPU_CC    := $(HIPCC)
GPU_FLAGS += -x hip $(foreach a,$(HIP_ARCH),--offload-arch=$(a)) -Wall -Wextra -Werror
LDLIBS    += -L$(ROCM_PATH)/lib -lamdhip64 -lstdc++
else ifeq ($(GPU),spirv)
# chipStar's headers are named first: clang's HIP driver searches its own
# include folder after /usr/include, where a ROCm HIP (Debian's libamdhip64-dev)
# would otherwise win.
CHIPSTAR_PATH ?= $(abspath $(dir $(shell command -v $(HIPCC) 2>/dev/null))..)
GPU_CC    := $(HIPCC)
GPU_FLAGS += -x hip -isystem $(CHIPSTAR_PATH)/include -Wall -Wextra -Werror
LDLIBS    += -L$(CHIPSTAR_PATH)/lib -Wl,-rpath,$(CHIPSTAR_PATH)/lib -lCHIP -lstdc++
else
$(error GPU=$(GPU): use cuda, hip or spirv)
endif

CFLAGS  += -DSTRATA_GPU
LIB_OBJ += $(GPU_OBJ)

$(BUILD)/src/gpu/%.o: src/gpu/%.cu
	@mkdir -p $(dir $@)
	$(GPU_CC) $(GPU_FLAGS) -MMD -MP -c $< -o $@
endif
