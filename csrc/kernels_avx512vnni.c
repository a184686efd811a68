/* Kernel path "avx512vnni": AVX-512 F/BW/VL + VNNI: 512-bit panels, two blocks per dot product. */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#endif
#define KERNEL_PATH avx512vnni
#include "kernels.c"
#endif
