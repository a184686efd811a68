/* Kernel path "avx512vnni": AVX-512 F/BW/VL + VNNI: 512-bit panels, two blocks per dot product; BF16
 * widened exactly (no-avx512bf16: a -march=native build on a CPU with AVX-512 BF16 would otherwise
 * give this path the pair kernel too, which avx512bf16 alone may run). */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,no-avx512bf16")
#endif
#define KERNEL_PATH avx512vnni
#include "kernels.c"
#endif
