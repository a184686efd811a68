/* Kernel path "portable": plain C loops (the compiler may still vectorise them for SSE): the path of a CPU none of the others fit, and the code ARM runs (its NEON/dotprod kernels are not written).
 * Built for aarch64 it is tested under QEMU user emulation (tests/test_arm_portable.py: F32, BF16 and the block formats
 * against the references, and against this path on x86); never on an ARM CPU, and its speed there is unmeasured. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("no-avx")
#endif
#define KERNEL_PATH portable
#include "kernels.c"
