// The peaks "% of peak" is measured against: the CPU's GEMM calibration (stable, cached, robust
// to a broken cache) and the GPU datasheet table (the right row for each name, nothing guessed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "devicerace/device_info.h"
#include "devicerace/peak_flops.h"
#include "test_util.h"

using namespace devicerace;

namespace {

struct CacheDir {
    test::TempDir dir;
    CacheDir() { ::setenv("DEVICERACE_CACHE_DIR", dir.path().c_str(), 1); }
    ~CacheDir() { ::unsetenv("DEVICERACE_CACHE_DIR"); }
};

} // namespace

// Two calibrations agree within 10% (this test runs alone: ctest RUN_SERIAL); the second call
// without remeasure reads the cache; a broken cache file is measured over, never an error.
TEST(CpuPeak, TheCalibrationIsStableAndCached) {
    CacheDir cache;
    EXPECT_EQ(peakCacheFile(), cache.dir / "peaks.json");
    const auto a = cpuPeakFlops(Precision::Fp32, 1, true);
    const auto b = cpuPeakFlops(Precision::Fp32, 1, true);
    EXPECT_TRUE(a.measured && !a.cached);
    EXPECT_GT(a.flopsPerSec, 1e8);  // a 1024-square sgemm at 0.1 GFLOP/s would be a broken BLAS
    EXPECT_LT(a.flopsPerSec, 1e14); // and 100 TFLOP/s on one CPU thread a broken clock
    EXPECT_LE(std::abs(a.flopsPerSec / b.flopsPerSec - 1), 0.10) << a.flopsPerSec << " vs " << b.flopsPerSec;
    EXPECT_NE(a.source.find("measured"), std::string::npos) << a.source;
    EXPECT_NE(a.source.find("1 thread,"), std::string::npos) << a.source;

    const auto c = cpuPeakFlops(Precision::Fp32, 1);
    EXPECT_TRUE(c.cached);
    EXPECT_DOUBLE_EQ(c.flopsPerSec, b.flopsPerSec);
    EXPECT_EQ(c.source, b.source);

    std::ofstream(cache.dir / "peaks.json") << "{ not json";
    const auto d = cpuPeakFlops(Precision::Fp32, 1);
    EXPECT_FALSE(d.cached);
    EXPECT_GT(d.flopsPerSec, 0);
    EXPECT_TRUE(cpuPeakFlops(Precision::Fp32, 1).cached); // rewritten

    if (!deviceReport().cpu.bf16Units.empty()) {
        const auto bf16 = cpuPeakFlops(Precision::Bf16, 1, true);
        EXPECT_GT(bf16.flopsPerSec, 1e8);
        EXPECT_NE(bf16.source.find("bf16"), std::string::npos);
    }
}

TEST(GpuPeak, DatasheetRowsFollowTheDeviceName) {
    const auto peak = [](const std::string& name, Precision p) {
        const auto r = gpuDatasheetPeak(name, p);
        return r ? r->flopsPerSec / 1e12 : -1.0;
    };
    EXPECT_DOUBLE_EQ(peak("NVIDIA H100 80GB HBM3", Precision::Bf16), 989.4);
    EXPECT_DOUBLE_EQ(peak("NVIDIA H100 80GB HBM3", Precision::Fp32), 494.7); // fp32 lanes run TF32
    EXPECT_DOUBLE_EQ(peak("NVIDIA H100 PCIe", Precision::Bf16), 756.5);
    EXPECT_DOUBLE_EQ(peak("NVIDIA H200", Precision::Fp16), 989.4);
    EXPECT_DOUBLE_EQ(peak("NVIDIA A100-SXM4-80GB", Precision::Bf16), 312.0);
    EXPECT_DOUBLE_EQ(peak("NVIDIA A10", Precision::Bf16), 125.0);
    EXPECT_DOUBLE_EQ(peak("NVIDIA L40S", Precision::Bf16), 362.05);
    EXPECT_DOUBLE_EQ(peak("NVIDIA L4", Precision::Bf16), 121.0);
    EXPECT_DOUBLE_EQ(peak("Tesla V100-SXM2-16GB", Precision::Fp16), 125.0);
    EXPECT_LT(peak("Tesla V100-SXM2-16GB", Precision::Bf16), 0); // no bf16 in Volta's hardware
    EXPECT_LT(peak("AMD Instinct MI300X", Precision::Bf16), 0);  // not in the table: no guess
    const auto h100 = gpuDatasheetPeak("NVIDIA H100 80GB HBM3", Precision::Bf16);
    ASSERT_TRUE(h100);
    EXPECT_FALSE(h100->measured);
    EXPECT_NE(h100->source.find("datasheet: NVIDIA H100 SXM5"), std::string::npos) << h100->source;
}
