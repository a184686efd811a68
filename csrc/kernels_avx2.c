/* Kernel path "avx2": AVX2 + FMA: 256-bit registers, int8 dot products through maddubs. */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("no-avx512f,no-avxvnni,avx,avx2,fma,f16c")
#endif
#define KERNEL_PATH avx2
#include "kernels.c"
#endif
