// A GEMM run by a worker of a parallel region (the fused dense step's rows and units, the bf16
// routes' timing) holds kernels/mkl_gemm.h's SerialMkl: it gives the bits of the same GEMM run on
// one thread outside any region, so a row's bits do not follow how many rows its worker got.
// Without it MKL, called inside a region of a 2-thread lane, partitions a product of few rows for
// 2 threads and splits its sums (on an Emerald Rapids Xeon: 40 rows of 784 columns), and ATen's
// first parallel loop on a new OpenMP thread sets that thread's MKL count back to the lane's.
// This file is built with OpenMP, as the engine's region files are.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include "kernels/mkl_gemm.h"

namespace cpu = devicerace::detail::cpu;

namespace {

constexpr std::int64_t kRows = 128, kIn = 784, kOut = 512;

// Runs f on a new thread with `threads` intra-op threads: a new OpenMP team, as a new lane gets.
template <class F>
void onNewThread(int threads, const F& f) {
    std::thread t([&] {
        at::set_num_threads(threads);
        f();
    });
    t.join();
}

// x[rows] w^T for worker 0's rows [0, split) and worker 1's [split, kRows), each on its own
// worker of a 2-thread region, as the dense step's rows pass runs them.
at::Tensor inRegion(const at::Tensor& x, const at::Tensor& w, std::int64_t split, bool serial) {
    auto out = at::empty({kRows, kOut});
    onNewThread(2, [&] {
        at::parallel_for(0, 2, 1, [&](std::int64_t begin, std::int64_t end) {
            std::optional<cpu::SerialMkl> guard;
            if (serial) {
                guard.emplace();
            }
            // A loop of the engine's before the GEMM (the step's input conversion): ATen's first
            // parallel_for on this OpenMP thread.
            at::parallel_for(0, 1, 1, [](std::int64_t, std::int64_t) {});
            for (auto worker = begin; worker < end; ++worker) {
                const auto r0 = worker == 0 ? 0 : split, rows = worker == 0 ? split : kRows - split;
                auto part = out.narrow(0, r0, rows);
                at::mm_out(part, x.narrow(0, r0, rows), w.t());
            }
        });
    });
    return out;
}

// The same two products, each on one thread outside any region.
at::Tensor onOneThread(const at::Tensor& x, const at::Tensor& w, std::int64_t split) {
    auto out = at::empty({kRows, kOut});
    onNewThread(1, [&] {
        for (const auto& [r0, rows] : {std::pair{std::int64_t{0}, split}, std::pair{split, kRows - split}}) {
            auto part = out.narrow(0, r0, rows);
            at::mm_out(part, x.narrow(0, r0, rows), w.t());
        }
    });
    return out;
}

} // namespace

TEST(SerialMkl, ARegionWorkersGemmGivesTheBitsOfTheSameGemmOnOneThread) {
    auto gen = at::detail::createCPUGenerator(7);
    const auto x = at::randn({kRows, kIn}, gen), w = at::randn({kOut, kIn}, gen);
    bool unguardedDiffers = false;
    for (const std::int64_t split : {16, 40, 64, 88, 112}) {
        SCOPED_TRACE(split);
        const auto want = onOneThread(x, w, split);
        EXPECT_TRUE(at::equal(inRegion(x, w, split, true), want));
        unguardedDiffers = unguardedDiffers || !at::equal(inRegion(x, w, split, false), want);
    }
    std::printf("without SerialMkl, a region worker's GEMM here: %s\n",
                unguardedDiffers ? "other bits (MKL partitions it for the lane's threads)" : "the same bits");
}

// MKL's count for the calling thread (MKL_Get_Max_Threads, exported by the wheel's LibTorch).
int mklThreads() {
    using MaxThreads = int (*)();
    static const auto fn = reinterpret_cast<MaxThreads>(dlsym(RTLD_DEFAULT, "MKL_Get_Max_Threads"));
    return fn ? fn() : -1;
}

TEST(SerialMkl, TheThreadsOwnCountComesBackAfter) {
    if (mklThreads() < 0) {
        GTEST_SKIP() << "no MKL in this process";
    }
    onNewThread(2, [] {
        EXPECT_EQ(mklThreads(), 2);
        {
            const cpu::SerialMkl serial;
            EXPECT_EQ(mklThreads(), 1);
            {
                const cpu::SerialMkl nested;
                EXPECT_EQ(mklThreads(), 1);
            }
            EXPECT_EQ(mklThreads(), 1);
        }
        EXPECT_EQ(mklThreads(), 2);
    });
}
