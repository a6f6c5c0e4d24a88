// MKL's bf16 GEMM through the loader (see mkl_gemm.h).
#include "kernels/mkl_gemm.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <limits>
#include <stdexcept>
#include <string_view>

#include "devicerace/environment.h"

namespace devicerace::detail::cpu {

namespace {

// MKL's CBLAS enums and LP64 integers (the symbol without the _64 suffix takes 32-bit ints).
constexpr int kRowMajor = 101;
constexpr int kNoTrans = 111;
constexpr int kTrans = 112;

using GemmBf16 = void (*)(int layout, int transA, int transB, int m, int n, int k, float alpha, const std::uint16_t* a,
                          int lda, const std::uint16_t* b, int ldb, float beta, float* c, int ldc);

GemmBf16 lookUp() {
    // RTLD_DEFAULT: libtorch_cpu.so is linked into the engine, so its exports are global.
    return reinterpret_cast<GemmBf16>(dlsym(RTLD_DEFAULT, "cblas_gemm_bf16bf16f32"));
}

GemmBf16 gemm() {
    static const GemmBf16 fn = lookUp();
    return fn;
}

// The C interface (MKL_SET_NUM_THREADS_LOCAL, the Fortran one, takes a pointer): the thread's new
// count, 0 for the global one; returns the previous.
using SetLocalThreads = int (*)(int);

SetLocalThreads setLocalThreads() {
    static const auto fn = reinterpret_cast<SetLocalThreads>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
    return fn;
}

int checked(std::int64_t v) {
    if (v < 0 || v > std::numeric_limits<int>::max()) {
        throw std::length_error("a GEMM dimension beyond MKL's 32-bit interface");
    }
    return static_cast<int>(v);
}

// DEVICERACE_SERIAL_MKL=0 (benchmarks): the guard does nothing.
bool serialMklOn() {
    static const bool on = [] {
        const char* v = devicerace::environmentSwitch("DEVICERACE_SERIAL_MKL");
        return !(v && std::string_view(v) == "0");
    }();
    return on;
}

} // namespace

SerialMkl::SerialMkl() {
    if (!serialMklOn()) {
        return;
    }
    // ATen sets a thread's MKL count to the intra-op count at the thread's first parallel_for
    // (at::init_num_threads): done first, or a region worker's first loop would undo the setting
    // below (the first step's GEMMs on a new OpenMP worker ran on 2 threads, MKL_VERBOSE showed).
    at::internal::lazy_init_num_threads();
    if (const auto fn = setLocalThreads()) {
        m_previous = fn(1);
        m_set = true;
    }
}

SerialMkl::~SerialMkl() {
    if (m_set) {
        setLocalThreads()(m_previous);
    }
}

bool haveMklBf16Gemm() { return gemm() != nullptr; }

void gemmBf16F32(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const Bf16* a,
                 std::int64_t lda, const Bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
    const auto fn = gemm();
    if (!fn) {
        throw std::logic_error("MKL's bf16 GEMM is not in this process");
    }
    fn(kRowMajor, transA ? kTrans : kNoTrans, transB ? kTrans : kNoTrans, checked(m), checked(n), checked(k), 1.0f,
       reinterpret_cast<const std::uint16_t*>(a), checked(lda), reinterpret_cast<const std::uint16_t*>(b), checked(ldb),
       beta, c, checked(ldc));
}

} // namespace devicerace::detail::cpu
