// gemm_avxvnni.c: the repacked matrix kernels for AVX-VNNI (gemm_ymm.h with the
// VEX-encoded vpdpbusd), for CPUs that have it without AVX-512 (and used on
// AVX-512 CPUs only when asked for). gemm.c calls them only when CPUID has it.
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif

#define YMM_VNNI 1
#define YMM_NAME(x) x##_avxvnni
#include "cpu/gemm_ymm.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif
