#pragma once
// DR_BF16_GEMM where the compiler takes x86 target attributes (and then <immintrin.h> and
// DR_AVX512_BF16, the target of every function that uses AVX-512 BF16 instructions: only code that
// checked haveAvx512Bf16Gemm(), kernels/bf16_gemm.h, may call one).
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target)
#define DR_BF16_GEMM 1
#include <immintrin.h>
#define DR_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif
#endif
