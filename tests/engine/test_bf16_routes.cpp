// The bf16 GEMM routes of the fused steps: every route computes the product, the fastest by
// measurement wins (a fake timer picks each one), the choice is kept per CPU and read back
// without timing again, and DEVICERACE_BF16_ROUTE forces one route or is refused clearly.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "devices/bf16_route_cache.h"
#include "kernels/bf16_amx_gemm.h"
#include "devices/cpu_info.h"
#include "kernels/bf16_gemm.h"
#include "kernels/bf16_routes.h"
#include "kernels/cpu_kernels.h"
#include "test_util.h"

using namespace devicerace::detail;
using cpu::Bf16Route;

namespace {

struct CacheDir {
    devicerace::test::TempDir dir;
    CacheDir() { ::setenv("DEVICERACE_CACHE_DIR", dir.path().c_str(), 1); }
    ~CacheDir() { ::unsetenv("DEVICERACE_CACHE_DIR"); }
};

struct ForcedRoute {
    explicit ForcedRoute(const char* value) { ::setenv("DEVICERACE_BF16_ROUTE", value, 1); }
    ~ForcedRoute() { ::unsetenv("DEVICERACE_BF16_ROUTE"); }
};

// A timer that makes `fastest` take 1 ms a call and every other route 3 ms.
cpu::Bf16Router::Timer fastestIs(Bf16Route fastest, int* calls = nullptr) {
    return [fastest, calls](Bf16Route r, const cpu::GemmShape&) {
        if (calls) {
            ++*calls;
        }
        return r == fastest ? 1e-3 : 3e-3;
    };
}

// A route other than fp32 that a router times here: MKL's where LibTorch exports it, else oneDNN's
// on a CPU with bf16 units (without them oneDNN's emulation is not a candidate).
Bf16Route otherTimedRoute() { return cpu::timedBf16Routes().front(); }

std::vector<cpu::Bf16> bf16Values(const std::vector<float>& v) {
    std::vector<cpu::Bf16> out(v.size());
    cpu::toBf16(v.data(), out.data(), static_cast<std::int64_t>(v.size()));
    return out;
}

std::vector<float> floats(const std::vector<cpu::Bf16>& v) {
    std::vector<float> out(v.size());
    cpu::toFloat(v.data(), out.data(), static_cast<std::int64_t>(v.size()));
    return out;
}

// Whether /proc/cpuinfo's first "flags" line holds every one of `words`.
bool cpuFlagsHave(std::initializer_list<const char*> words) {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, flags;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind("flags", 0) == 0) {
            flags = " " + line.substr(line.find(':') + 1) + " ";
            break;
        }
    }
    bool has = !flags.empty();
    for (const char* word : words) {
        has = has && flags.find(" " + std::string(word) + " ") != std::string::npos;
    }
    return has;
}

} // namespace

TEST(Bf16Routes, TheFastestByTheMedianOfTrialsWins) {
    const std::vector<Bf16Route> all = {Bf16Route::Mkl, Bf16Route::OneDnn, Bf16Route::Avx512, Bf16Route::Fp32};
    for (const auto fastest : all) {
        const auto choice = cpu::pickBf16Route(all, [&](Bf16Route r) { return r == fastest ? 1e-3 : 2e-3; });
        EXPECT_EQ(choice.route, fastest) << cpu::bf16RouteName(fastest);
        ASSERT_EQ(choice.timings.size(), 4u);
        EXPECT_EQ(choice.timings[1].route, Bf16Route::OneDnn);
        EXPECT_EQ(choice.timings[2].route, Bf16Route::Avx512);
    }
    // One slow trial (a neighbour's burst) does not decide: the median does.
    int trial = 0;
    const auto choice = cpu::pickBf16Route({Bf16Route::OneDnn, Bf16Route::Fp32}, [&](Bf16Route r) {
        ++trial;
        if (r == Bf16Route::OneDnn) {
            return trial == 1 ? 9e-3 : 1e-3;
        }
        return 2e-3;
    });
    EXPECT_EQ(choice.route, Bf16Route::OneDnn);
    EXPECT_DOUBLE_EQ(choice.timings[0].seconds, 1e-3);
    // A tie goes to the earlier candidate.
    EXPECT_EQ(cpu::pickBf16Route({Bf16Route::Fp32, Bf16Route::OneDnn}, [](Bf16Route) { return 1e-3; }).route,
              Bf16Route::Fp32);
    EXPECT_THROW(cpu::pickBf16Route({}, [](Bf16Route) { return 1.0; }), std::invalid_argument);
}

TEST(Bf16Routes, ARouterKeepsEachShapesChoiceAndReadsItBack) {
    CacheDir cache;
    const auto other = otherTimedRoute();
    if (other == Bf16Route::Fp32) {
        GTEST_SKIP() << "no route but fp32 is timed here";
    }
    const cpu::GemmShape forward{768, 384, 128, false, true}, weightGrad{384, 128, 768, true, false};
    int calls = 0;
    {
        cpu::Bf16Router router(2, 1, fastestIs(Bf16Route::Fp32, &calls));
        EXPECT_EQ(router.route(forward), Bf16Route::Fp32);
        EXPECT_EQ(router.route(forward), Bf16Route::Fp32); // known: not timed again
        EXPECT_EQ(calls, 3 * static_cast<int>(cpu::timedBf16Routes().size()));
    }
    {
        cpu::Bf16Router router(2, 1, fastestIs(other, &calls));
        calls = 0;
        EXPECT_EQ(router.route(forward), Bf16Route::Fp32); // from the cache file
        EXPECT_EQ(calls, 0);
        EXPECT_EQ(router.route(weightGrad), other); // a new shape is timed
        EXPECT_GT(calls, 0);
        EXPECT_EQ(router.summary(), fmt::format("{} for 1 of 2 GEMM shapes, fp32 for 1 (the fastest timed on this "
                                                "CPU at 2 threads)",
                                                cpu::bf16RouteName(other)));
    }
    // Another thread count is another choice.
    cpu::Bf16Router one(1, 1, fastestIs(other));
    EXPECT_EQ(one.route(forward), other);
    const auto counts = cachedBf16RouteCounts();
    ASSERT_EQ(counts.size(), 2u);
    EXPECT_EQ(counts.at("2 threads").at("fp32"), 1);
    EXPECT_EQ(counts.at("2 threads").at(cpu::bf16RouteKey(other)), 1);
    EXPECT_EQ(counts.at("1 thread").at(cpu::bf16RouteKey(other)), 1);
    std::ifstream in(bf16RouteCacheFile());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("768x384x128 NT"), std::string::npos) << text;
    EXPECT_NE(text.find("seconds_per_call"), std::string::npos) << text;
}

TEST(Bf16Routes, ABrokenCacheIsTimedOverNotAnError) {
    CacheDir cache;
    const auto other = otherTimedRoute();
    if (other == Bf16Route::Fp32) {
        GTEST_SKIP() << "no route but fp32 is timed here";
    }
    { std::ofstream(cache.dir / "bf16-routes.json") << "{ not json"; }
    cpu::Bf16Router router(1, 1, fastestIs(other));
    EXPECT_EQ(router.route({64, 64, 64, false, false}), other);
    EXPECT_EQ(cachedBf16RouteCounts().at("1 thread").at(cpu::bf16RouteKey(other)), 1);
}

// A step that keeps its GEMM inputs in fp32 storage where every shape takes fp32: on a CPU without
// bf16 units another route is taken only where it beats fp32 by the margin of the bf16 copies it
// makes the step write; with bf16 units the fastest route wins as ever.
TEST(Bf16Routes, WithoutBf16UnitsAnotherRouteMustBeatFp32ByTheCopiesMargin) {
    CacheDir cache;
    const auto other = otherTimedRoute();
    if (other == Bf16Route::Fp32) {
        GTEST_SKIP() << "no route but fp32 is timed here";
    }
    const bool units = !readHostCpu().bf16Units.empty();
    // `other` faster than fp32 by `lead` (0.10: 10%).
    const auto leadOf = [other](double lead) {
        return [other, lead](Bf16Route r, const cpu::GemmShape&) {
            return r == other ? 1e-3 : r == Bf16Route::Fp32 ? 1e-3 * (1 + lead) : 9e-3;
        };
    };
    const cpu::GemmShape shape{512, 256, 128, false, true};
    {
        cpu::Bf16Router router(1, 1, leadOf(0.10), cpu::TrialCaches::Cold, cpu::GemmInputs::Fp32WhereAllFp32);
        EXPECT_EQ(router.route(shape), units ? other : Bf16Route::Fp32);
        EXPECT_EQ(router.summary().find("must beat fp32") != std::string::npos, !units) << router.summary();
    }
    {
        cpu::Bf16Router router(2, 1, leadOf(0.30), cpu::TrialCaches::Cold, cpu::GemmInputs::Fp32WhereAllFp32);
        EXPECT_EQ(router.route(shape), other);
    }
    // A step that writes bf16 copies whatever the routes takes the fastest, by any lead.
    cpu::Bf16Router copies(1, 1, leadOf(0.10), cpu::TrialCaches::Cold, cpu::GemmInputs::Bf16Copies);
    EXPECT_EQ(copies.route({256, 256, 256, false, false}), other);
}

TEST(Bf16Routes, TheEnvironmentForcesOneRouteOrIsRefused) {
    CacheDir cache;
    {
        ForcedRoute forced("fp32");
        int calls = 0;
        cpu::Bf16Router router(1, 1, fastestIs(Bf16Route::OneDnn, &calls));
        EXPECT_EQ(router.route({64, 64, 64, false, false}), Bf16Route::Fp32);
        EXPECT_EQ(calls, 0);
        EXPECT_EQ(router.summary(), "fp32 for every GEMM (DEVICERACE_BF16_ROUTE)");
    }
    ForcedRoute bad("fastest");
    try {
        cpu::Bf16Router router(1);
        FAIL() << "a route name it does not know was taken";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(
                      "DEVICERACE_BF16_ROUTE=fastest: expected mkl, onednn, amx, avx512, fp32 or measure"),
                  std::string::npos)
            << e.what();
    }
}

// Each route's product equals the fp32 product of the same bf16 inputs (the MKL, AVX-512 BF16
// and fp32 routes sum in fp32; oneDNN's result is rounded to bf16 once), for every transpose and
// strided rows: an odd k within one block of the AVX-512 kernel's, an odd k over two blocks with n
// over three of its panels, and an even k over three blocks (its rows read in place); for the AMX
// kernel, whole blocks of 32 rows with k a multiple of 32 (a's rows read in place) over two blocks
// of k, with an edge panel of c, and with strided rows.
TEST(Bf16Routes, EveryRouteComputesTheProduct) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    struct Shape {
        std::int64_t m, n, k, pad;
    };
    for (const auto [m, n, k, pad] : {Shape{37, 29, 53, 3}, Shape{21, 70, 517, 1}, Shape{16, 33, 600, 0},
                                      Shape{64, 40, 544, 0}, Shape{96, 64, 128, 2}}) {
        SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
        for (const bool ta : {false, true}) {
            for (const bool tb : {false, true}) {
                // Stored shapes with `pad` extra columns per row (leading dimensions as stored).
                const auto aRows = ta ? k : m, aCols = ta ? m : k, bRows = tb ? n : k, bCols = tb ? k : n;
                std::vector<float> af(static_cast<std::size_t>(aRows * (aCols + pad))),
                    bf(static_cast<std::size_t>(bRows * (bCols + pad)));
                for (auto& v : af) {
                    v = normal(rng);
                }
                for (auto& v : bf) {
                    v = normal(rng);
                }
                const auto a = bf16Values(af), b = bf16Values(bf);
                const auto ar = floats(a), br = floats(b);
                std::vector<double> want(static_cast<std::size_t>(m * n));
                for (std::int64_t i = 0; i < m; ++i) {
                    for (std::int64_t j = 0; j < n; ++j) {
                        double sum = 0;
                        for (std::int64_t p = 0; p < k; ++p) {
                            const float x = ta ? ar[p * (aCols + pad) + i] : ar[i * (aCols + pad) + p];
                            const float y = tb ? br[j * (bCols + pad) + p] : br[p * (bCols + pad) + j];
                            sum += static_cast<double>(x) * y;
                        }
                        want[i * n + j] = sum;
                    }
                }
                for (const auto route : cpu::availableBf16Routes()) {
                    SCOPED_TRACE(std::string(cpu::bf16RouteName(route)) + (ta ? " T" : " N") + (tb ? "T" : "N"));
                    const std::int64_t ldc = n + 5;
                    std::vector<float> c(static_cast<std::size_t>(m * ldc), -1.0f);
                    cpu::gemmBf16Routed(route, {m, n, k, ta, tb}, a.data(), aCols + pad, b.data(), bCols + pad,
                                        c.data(), ldc);
                    const double tolerance = route == Bf16Route::OneDnn ? 1.0 / 128 : 1e-4; // one bf16 rounding
                    for (std::int64_t i = 0; i < m; ++i) {
                        for (std::int64_t j = 0; j < n; ++j) {
                            const double w = want[i * n + j];
                            ASSERT_NEAR(c[i * ldc + j], w, tolerance * std::max(1.0, std::abs(w))) << i << "," << j;
                        }
                        EXPECT_EQ(c[i * ldc + n], -1.0f) << "wrote past its columns";
                    }
                }
            }
        }
    }
}

// oneDNN's bf16 GEMM is timed only where the CPU has bf16 units (AMX or AVX-512 BF16, by its
// flags): elsewhere it is an emulation far slower than fp32. fp32 is always a candidate.
TEST(Bf16Routes, OneDnnIsTimedOnlyWhereTheCpuHasBf16Units) {
    const bool units = cpuFlagsHave({"amx_bf16"}) || cpuFlagsHave({"avx512_bf16"});
    const auto timed = cpu::timedBf16Routes();
    EXPECT_EQ(std::find(timed.begin(), timed.end(), Bf16Route::OneDnn) != timed.end(), units);
    EXPECT_EQ(timed.back(), Bf16Route::Fp32);
    const auto available = cpu::availableBf16Routes();
    EXPECT_NE(std::find(available.begin(), available.end(), Bf16Route::OneDnn), available.end()); // still forceable
}

// The engine's own AVX-512 BF16 kernel is a route exactly where the CPU's flags show AVX-512 BF16
// (with the AVX-512 parts it uses); forcing it elsewhere is refused with the reason.
TEST(Bf16Routes, TheOwnKernelIsARouteWhereTheCpuHasAvx512Bf16) {
    const bool has = cpuFlagsHave({"avx512f", "avx512bw", "avx512vl", "avx512_bf16"});
    EXPECT_EQ(cpu::haveAvx512Bf16Gemm(), has);
    const auto routes = cpu::availableBf16Routes();
    EXPECT_EQ(std::find(routes.begin(), routes.end(), Bf16Route::Avx512) != routes.end(), has);
    EXPECT_EQ(cpu::bf16RouteFromKey("avx512"), Bf16Route::Avx512);
    CacheDir cache;
    ForcedRoute forced("avx512");
    if (has) {
        cpu::Bf16Router router(1);
        EXPECT_EQ(router.route({64, 64, 64, false, true}), Bf16Route::Avx512);
        return;
    }
    try {
        cpu::Bf16Router router(1);
        FAIL() << "the AVX-512 BF16 kernel was forced on a CPU without it";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("this CPU has no AVX-512 BF16"), std::string::npos) << e.what();
    }
}

// The engine's AMX kernel is a route exactly where the CPU's flags show AMX-BF16 and AMX-TILE (with
// AVX-512 BF16 for its packing) and Linux grants the tiles; forcing it elsewhere is refused.
TEST(Bf16Routes, TheAmxKernelIsARouteWhereTheCpuHasAmx) {
    const bool has = cpuFlagsHave({"amx_bf16", "amx_tile", "avx512_bf16", "avx512bw"});
    EXPECT_EQ(cpu::haveAmxBf16Gemm(), has); // a Linux that refuses AMX would show no amx flags
    const auto routes = cpu::availableBf16Routes();
    EXPECT_EQ(std::find(routes.begin(), routes.end(), Bf16Route::Amx) != routes.end(), has);
    EXPECT_EQ(cpu::bf16RouteFromKey("amx"), Bf16Route::Amx);
    CacheDir cache;
    ForcedRoute forced("amx");
    if (has) {
        cpu::Bf16Router router(1);
        EXPECT_EQ(router.route({64, 64, 64, false, true}), Bf16Route::Amx);
        return;
    }
    try {
        cpu::Bf16Router router(1);
        FAIL() << "the AMX kernel was forced on a CPU without it";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("this CPU has no AMX"), std::string::npos) << e.what();
    }
}

// The timer the routers use by default runs the real GEMM, on one thread or split over workers.
TEST(Bf16Routes, TheRealTimerTimesEveryRoute) {
    for (const auto route : cpu::availableBf16Routes()) {
        for (const int workers : {1, 2}) {
            for (const auto caches : {cpu::TrialCaches::Warm, cpu::TrialCaches::Cold}) {
                const double s = cpu::timeBf16Route(route, {48, 64, 32, false, true}, workers, caches);
                EXPECT_TRUE(std::isfinite(s) && s > 0.0) << cpu::bf16RouteName(route) << ": " << s;
            }
        }
    }
}

// A step that times its routes with cold caches (the transformer's) keeps its choices apart from
// a warm-timed one's at the same shape, and says how it timed them.
TEST(Bf16Routes, AColdTrialIsAChoiceOfItsOwn) {
    CacheDir cache;
    const auto other = otherTimedRoute();
    if (other == Bf16Route::Fp32) {
        GTEST_SKIP() << "no route but fp32 is timed here";
    }
    const cpu::GemmShape shape{768, 384, 128, false, true};
    cpu::Bf16Router warm(2, 2, fastestIs(Bf16Route::Fp32));
    EXPECT_EQ(warm.route(shape), Bf16Route::Fp32);
    int calls = 0;
    cpu::Bf16Router cold(2, 2, fastestIs(other, &calls), cpu::TrialCaches::Cold);
    EXPECT_EQ(cold.route(shape), other); // timed, not the warm choice read back
    EXPECT_GT(calls, 0);
    EXPECT_EQ(cold.summary(), fmt::format("{} for every GEMM shape (1) (the fastest timed on this CPU at 2 threads x 2 "
                                          "workers, caches cold as a step leaves them)",
                                          cpu::bf16RouteName(other)));
    cpu::Bf16Router again(2, 2, fastestIs(Bf16Route::Fp32, &calls), cpu::TrialCaches::Cold);
    calls = 0;
    EXPECT_EQ(again.route(shape), other); // the cold choice read back
    EXPECT_EQ(calls, 0);
    std::ifstream in(bf16RouteCacheFile());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("768x384x128 NT cold"), std::string::npos) << text;
}
