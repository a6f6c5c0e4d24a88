// CPU lanes install a caching CPU allocator (engine/src/host_allocator.cpp): the large blocks
// a training step frees are reused by the next step instead of being returned to the kernel
// and page-faulted in again. Each case runs in a child process (gtest's death-test machinery)
// so the process-wide allocator starts fresh; DEVICERACE_KEEP_MALLOC=1 is the control that
// shows the probe can fail.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "devicerace/dataset.h"
#include "devicerace/lane.h"
#include "devicerace/workload.h"
#include "lane_runs.h"

using namespace devicerace;

namespace {

long processMinorFaults() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

// One CPU lane on synthetic data, run to its end.
LaneSummary runCpuLane(const std::string& workload, std::int64_t steps, const std::string& spec = "cpu,threads=1") {
    const auto& w = findWorkload(workload);
    auto data = syntheticDataset(w.input, w.inputShape, w.classes, w.vocabulary, 4096, 64);
    auto run = test::runEveryStep(w.name, parseLaneSpec(spec), data, steps, 7);
    if (run.summary.state != LaneState::Finished) {
        std::fprintf(stderr, "lane did not finish: %s\n", run.summary.error.c_str());
        std::exit(2);
    }
    return run.summary;
}

// Pages a charlstm lane faults in per training step, from two lanes of different lengths after
// a warm-up lane. It runs torch::nn::LSTM over one-hot vectors (oneDNN's LSTM frees a 38 MiB
// block every step; the token LSTM's largest blocks are ~10 MiB): DEVICERACE_TOKEN_LSTM=0 with
// the other fast paths on, or fused=false (plain LibTorch: no block is kept).
long charLstmPagesPerStep(const std::string& spec = "cpu,threads=1") {
    setenv("DEVICERACE_TOKEN_LSTM", "0", 1);
    runCpuLane("charlstm", 4, spec);
    const long before = processMinorFaults();
    runCpuLane("charlstm", 4, spec);
    const long shortRun = processMinorFaults() - before;
    const long middle = processMinorFaults();
    runCpuLane("charlstm", 14, spec);
    const long longRun = processMinorFaults() - middle;
    return (longRun - shortRun) / 10;
}

} // namespace

TEST(HostAllocator, CharLstmStepsReuseTheirMemory) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // ASan's and TSan's allocators replace glibc's (ASan's quarantines freed memory): page
    // faults per step then measure the sanitizer, not the cache (scripts/test --sanitize).
    GTEST_SKIP() << "page faults under a sanitizer measure its allocator, not the cache";
#endif
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            unsetenv("DEVICERACE_KEEP_MALLOC");
            const long pages = charLstmPagesPerStep();
            std::fprintf(stderr, "charlstm pages faulted per step: %ld\n", pages);
            std::exit(pages < 1000 ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
    EXPECT_EXIT(
        {
            setenv("DEVICERACE_KEEP_MALLOC", "1", 1);
            const long pages = charLstmPagesPerStep();
            std::fprintf(stderr, "charlstm pages faulted per step, LibTorch's allocator: %ld\n", pages);
            std::exit(pages > 4000 ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
    EXPECT_EXIT(
        {
            unsetenv("DEVICERACE_KEEP_MALLOC");
            const long pages = charLstmPagesPerStep("cpu,threads=1,fused=false");
            std::fprintf(stderr, "charlstm pages faulted per step, plain LibTorch lane: %ld\n", pages);
            std::exit(pages > 4000 ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
}

// The lane says which allocator it ran on, and its peak-memory figure still comes through
// (every block is reported to the memory profiler as LibTorch's allocator does), unchanged.
TEST(HostAllocator, LaneReportsItAndKeepsItsMemoryFigure) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    // In a child: the lane's peak in MiB as the exit code (fashion-cnn at batch 32: ~100), or 0
    // where the execution text does not match the allocator in use.
    auto peakOf = [](bool keepMalloc) {
        keepMalloc ? setenv("DEVICERACE_KEEP_MALLOC", "1", 1) : unsetenv("DEVICERACE_KEEP_MALLOC");
        // oneDNN's weight gradients: the first process on a machine to meet a shape times both paths
        // (scratch that raised its peak from 70 to 102 MiB), later ones read the pick from the
        // machine's file, so the two children would not do the same work.
        setenv("DEVICERACE_CONV_WGRAD", "0", 1);
        const auto summary = runCpuLane("fashion-cnn", 3);
        const bool said = summary.execution.find("caching host allocator") != std::string::npos;
        std::fprintf(stderr, "execution: %s; peak %llu bytes\n", summary.execution.c_str(),
                     static_cast<unsigned long long>(summary.peakMemoryBytes.value_or(0)));
        const auto mib = summary.peakMemoryBytes.value_or(0) >> 20;
        std::exit(said == !keepMalloc ? static_cast<int>(std::min<std::uint64_t>(mib, 255)) : 0);
    };
    int cached = -1;
    int plain = -1;
    auto exitCodeInto = [](int& code) {
        return [&code](int status) {
            code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
            return code > 0;
        };
    };
    EXPECT_EXIT(peakOf(false), exitCodeInto(cached), "");
    EXPECT_EXIT(peakOf(true), exitCodeInto(plain), "");
    EXPECT_GT(cached, 10);
    EXPECT_EQ(cached, plain);
}
