/* Kernel path "avxvnni": AVX2 + FMA + AVX-VNNI: the AVX2 kernels with 256-bit u8 x s8 dot products. */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("no-avx512f,avx,avx2,fma,f16c,avxvnni")
#endif
#define KERNEL_PATH avxvnni
#include "kernels.c"
#endif
