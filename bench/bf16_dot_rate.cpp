// The rate of a core's bf16 dot products (vdpbf16ps, AVX-512 BF16) against its fp32 FMAs
// (vfmadd231ps), both on 512-bit registers alone: 12 independent chains each, no memory. A CPU
// whose bf16 units run at half its FMAs' rate (an Intel Xeon without AMX: 86 against 175 GFLOP/s
// measured on an Emerald Rapids VM) cannot make a bf16 step faster than fp32, whatever the library.
// Usage: bench_bf16_dot_rate [seconds per trial, default 0.5]. Prints the median of 5 trials.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr int kChains = 12;

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Reads the sums, so the loops that made them are not dropped.
__attribute__((target("avx512f"))) void keepSums(const __m512 (&sums)[kChains]) {
    alignas(64) float lanes[16];
    float keep = 0;
    for (const auto& s : sums) {
        _mm512_store_ps(lanes, s);
        keep += lanes[0];
    }
    if (keep == 1.0f) {
        std::puts("");
    }
}

// FLOPs per second of `iterations` rounds of kChains dot products (64 FLOPs each: 16 lanes x 2
// products x multiply and add).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) double dotRate(long iterations) {
    __m512 sums[kChains];
    for (auto& s : sums) {
        s = _mm512_setzero_ps();
    }
    auto a = (__m512bh)_mm512_set1_epi16(0x3f80); // 1.0 in bf16
    const auto b = (__m512bh)_mm512_set1_epi16(0x3c00);
    const double t0 = seconds();
    for (long i = 0; i < iterations; ++i) {
        for (auto& s : sums) {
            s = _mm512_dpbf16_ps(s, a, b);
        }
        __asm__ volatile("" : "+v"(a)); // a is not loop-invariant to the compiler
    }
    const double t = seconds() - t0;
    keepSums(sums);
    return static_cast<double>(iterations) * kChains * 64 / t;
}

// The same for fused multiply-adds (32 FLOPs each: 16 lanes x multiply and add).
__attribute__((target("avx512f"))) double fmaRate(long iterations) {
    __m512 sums[kChains];
    for (auto& s : sums) {
        s = _mm512_setzero_ps();
    }
    auto a = _mm512_set1_ps(1.0f);
    const auto b = _mm512_set1_ps(1e-9f);
    const double t0 = seconds();
    for (long i = 0; i < iterations; ++i) {
        for (auto& s : sums) {
            s = _mm512_fmadd_ps(a, b, s);
        }
        __asm__ volatile("" : "+v"(a));
    }
    const double t = seconds() - t0;
    keepSums(sums);
    return static_cast<double>(iterations) * kChains * 32 / t;
}

template <class F>
double median(F&& rate, double trialSeconds) {
    long n = 1000;
    while (true) { // iterations for one trial
        const double t0 = seconds();
        (void)rate(n);
        if (seconds() - t0 > trialSeconds / 4) {
            n = static_cast<long>(static_cast<double>(n) * trialSeconds / (seconds() - t0));
            break;
        }
        n *= 4;
    }
    std::vector<double> rates;
    for (int i = 0; i < 5; ++i) {
        rates.push_back(rate(n));
    }
    std::sort(rates.begin(), rates.end());
    return rates[2];
}

std::string cpuModel() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            return line.substr(line.find(':') + 2);
        }
    }
    return "unknown CPU";
}

} // namespace

int main(int argc, char** argv) {
    const double trial = argc > 1 ? std::max(0.05, std::atof(argv[1])) : 0.5;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        std::printf("%s: no AVX-512, nothing to measure\n", cpuModel().c_str());
        return 0;
    }
    const double fma = median(fmaRate, trial);
    if (!__builtin_cpu_supports("avx512bf16")) {
        std::printf("%s, 1 core: fp32 FMAs %.1f GFLOP/s; no AVX-512 BF16\n", cpuModel().c_str(), fma / 1e9);
        return 0;
    }
    const double dot = median(dotRate, trial);
    std::printf("%s, 1 core, median of 5 trials: bf16 dot products (vdpbf16ps) %.1f GFLOP/s, fp32 FMAs "
                "(vfmadd231ps) %.1f GFLOP/s: bf16 / fp32 %.2f\n",
                cpuModel().c_str(), dot / 1e9, fma / 1e9, dot / fma);
    return 0;
}
