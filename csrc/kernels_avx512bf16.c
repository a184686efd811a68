/* Kernel path "avx512bf16": avx512vnni's kernels, and BF16 matrices as bfloat16 pairs (W_BF16P)
 * multiplied by AVX-512 BF16's vdpbf16ps against inputs rounded to bfloat16. */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")
#endif
#define KERNEL_PATH avx512bf16
#include "kernels.c"
#endif
