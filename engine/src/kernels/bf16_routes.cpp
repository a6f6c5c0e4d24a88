// bf16 GEMM routes and their choice by measurement (see bf16_routes.h).
#include "kernels/bf16_routes.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include "devices/bf16_route_cache.h"
#include "devices/cpu_info.h"
#include "kernels/bf16_amx_gemm.h"
#include "kernels/bf16_gemm.h"
#include "kernels/cpu_kernels.h"
#include "kernels/mkl_gemm.h"
#include "devicerace/environment.h"
#include "devicerace/peak_flops.h"

namespace devicerace::detail::cpu {

namespace {

struct RouteRow {
    Bf16Route route;
    const char* name; // shown
    const char* key;  // the cache's and DEVICERACE_BF16_ROUTE's
};
// In the enum's order.
constexpr std::array<RouteRow, 5> kRoutes = {
    RouteRow{Bf16Route::Mkl, "MKL bf16", "mkl"}, RouteRow{Bf16Route::OneDnn, "oneDNN bf16", "onednn"},
    RouteRow{Bf16Route::Fp32, "fp32", "fp32"}, RouteRow{Bf16Route::Avx512, "AVX-512 BF16 kernel", "avx512"},
    RouteRow{Bf16Route::Amx, "AMX kernel", "amx"}};

constexpr double kTrialSeconds = 0.002; // one trial's calls last about this long
constexpr int kMaxCallsPerTrial = 1000;

// Scratch of the calling thread: the oneDNN route's bf16 result, the fp32 route's inputs.
struct Scratch {
    std::vector<Bf16> result;
    std::vector<float> a, b;
};
Scratch& scratch() {
    thread_local Scratch s;
    return s;
}

at::Tensor bf16View(const Bf16* p, std::int64_t rows, std::int64_t cols, std::int64_t ld, bool trans) {
    // Stored [rows x cols] (or [cols x rows] when transposed), row stride ld.
    auto t = trans ? at::from_blob(const_cast<Bf16*>(p), {cols, rows}, {ld, 1}, at::kBFloat16)
                   : at::from_blob(const_cast<Bf16*>(p), {rows, cols}, {ld, 1}, at::kBFloat16);
    return trans ? t.t() : t;
}

} // namespace

void widenRows(const Bf16* src, std::int64_t lds, std::int64_t rows, std::int64_t cols, float* dst, std::int64_t ldd) {
    if (lds == cols && ldd == cols) {
        toFloat(src, dst, rows * cols);
        return;
    }
    at::parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, cols)),
                     [&](std::int64_t b, std::int64_t e) {
                         for (std::int64_t r = b; r < e; ++r) {
                             toFloat(src + r * lds, dst + r * ldd, cols);
                         }
                     });
}

namespace {

// The fp32 route's operand: stored [rows x cols] (row stride ld), widened into a packed buffer.
at::Tensor widen(const Bf16* src, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::vector<float>& dst) {
    dst.resize(static_cast<std::size_t>(rows * cols));
    widenRows(src, ld, rows, cols, dst.data(), cols);
    return at::from_blob(dst.data(), {rows, cols}, at::kFloat);
}

std::optional<Bf16Route> forcedRoute() {
    const char* env = devicerace::environmentSwitch("DEVICERACE_BF16_ROUTE");
    if (!env || !*env || std::string_view(env) == "measure") {
        return std::nullopt;
    }
    const auto r = bf16RouteFromKey(env);
    if (!r) {
        throw std::invalid_argument(
            fmt::format("DEVICERACE_BF16_ROUTE={}: expected mkl, onednn, amx, avx512, fp32 or measure", env));
    }
    if (*r == Bf16Route::Mkl && !haveMklBf16Gemm()) {
        throw std::invalid_argument("DEVICERACE_BF16_ROUTE=mkl: this LibTorch has no MKL bf16 GEMM");
    }
    if (*r == Bf16Route::Avx512 && !haveAvx512Bf16Gemm()) {
        throw std::invalid_argument("DEVICERACE_BF16_ROUTE=avx512: this CPU has no AVX-512 BF16");
    }
    if (*r == Bf16Route::Amx && !haveAmxBf16Gemm()) {
        throw std::invalid_argument("DEVICERACE_BF16_ROUTE=amx: this CPU has no AMX (or Linux did not grant it)");
    }
    return r;
}

} // namespace

const char* bf16RouteName(Bf16Route route) { return kRoutes[static_cast<std::size_t>(route)].name; }

const char* bf16RouteKey(Bf16Route route) { return kRoutes[static_cast<std::size_t>(route)].key; }

std::optional<Bf16Route> bf16RouteFromKey(std::string_view key) {
    for (const auto& r : kRoutes) {
        if (key == r.key) {
            return r.route;
        }
    }
    return std::nullopt;
}

std::vector<Bf16Route> availableBf16Routes() {
    std::vector<Bf16Route> out;
    if (haveMklBf16Gemm()) {
        out.push_back(Bf16Route::Mkl);
    }
    out.push_back(Bf16Route::OneDnn);
    if (haveAmxBf16Gemm()) {
        out.push_back(Bf16Route::Amx);
    }
    if (haveAvx512Bf16Gemm()) {
        out.push_back(Bf16Route::Avx512);
    }
    out.push_back(Bf16Route::Fp32);
    return out;
}

std::vector<Bf16Route> timedBf16Routes() {
    auto out = availableBf16Routes();
    if (hostBf16Units().empty()) {
        out.erase(std::remove(out.begin(), out.end(), Bf16Route::OneDnn), out.end());
    }
    return out;
}

std::string gemmShapeText(const GemmShape& s) {
    return fmt::format("{}x{}x{} {}{}", s.m, s.n, s.k, s.transA ? 'T' : 'N', s.transB ? 'T' : 'N');
}

void gemmBf16Routed(Bf16Route route, const GemmShape& s, const Bf16* a, std::int64_t lda, const Bf16* b,
                    std::int64_t ldb, float* c, std::int64_t ldc) {
    switch (route) {
    case Bf16Route::Mkl: gemmBf16F32(s.transA, s.transB, s.m, s.n, s.k, a, lda, b, ldb, 0.0f, c, ldc); return;
    case Bf16Route::Avx512: gemmBf16Avx512(s.transA, s.transB, s.m, s.n, s.k, a, lda, b, ldb, c, ldc); return;
    case Bf16Route::Amx: gemmBf16Amx(s.transA, s.transB, s.m, s.n, s.k, a, lda, b, ldb, c, ldc); return;
    case Bf16Route::OneDnn: {
        auto& result = scratch().result;
        result.resize(static_cast<std::size_t>(s.m * s.n));
        auto out = at::from_blob(result.data(), {s.m, s.n}, at::kBFloat16);
        at::mm_out(out, bf16View(a, s.m, s.k, lda, s.transA), bf16View(b, s.k, s.n, ldb, s.transB));
        widenRows(result.data(), s.n, s.m, s.n, c, ldc);
        return;
    }
    case Bf16Route::Fp32: {
        auto& sc = scratch();
        // Stored shapes: a is [m x k] or [k x m], b is [k x n] or [n x k].
        const auto aRows = s.transA ? s.k : s.m, aCols = s.transA ? s.m : s.k;
        const auto bRows = s.transB ? s.n : s.k, bCols = s.transB ? s.k : s.n;
        const auto ta = widen(a, aRows, aCols, lda, sc.a);
        const auto tb = widen(b, bRows, bCols, ldb, sc.b);
        gemmF32(s, ta.data_ptr<float>(), aCols, tb.data_ptr<float>(), bCols, c, ldc);
        return;
    }
    }
}

void gemmF32(const GemmShape& s, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
             std::int64_t ldc) {
    const auto aRows = s.transA ? s.k : s.m, aCols = s.transA ? s.m : s.k;
    const auto bRows = s.transB ? s.n : s.k, bCols = s.transB ? s.k : s.n;
    const auto ta = at::from_blob(const_cast<float*>(a), {aRows, aCols}, {lda, 1}, at::kFloat);
    const auto tb = at::from_blob(const_cast<float*>(b), {bRows, bCols}, {ldb, 1}, at::kFloat);
    auto out = at::from_blob(c, {s.m, s.n}, {ldc, 1}, at::kFloat);
    at::mm_out(out, s.transA ? ta.t() : ta, s.transB ? tb.t() : tb);
}

RouteChoice pickBf16Route(const std::vector<Bf16Route>& candidates, const std::function<double(Bf16Route)>& seconds,
                          int trials) {
    if (candidates.empty()) {
        throw std::invalid_argument("no bf16 GEMM route to choose from");
    }
    trials = std::max(1, trials);
    std::vector<std::vector<double>> times(candidates.size());
    for (int t = 0; t < trials; ++t) {
        for (std::size_t i = 0; i < candidates.size(); ++i) {
            times[i].push_back(seconds(candidates[i]));
        }
    }
    RouteChoice out;
    double best = 0;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        auto& v = times[i];
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        const double median = v[v.size() / 2];
        out.timings.push_back({candidates[i], median});
        if (i == 0 || median < best) {
            best = median;
            out.route = candidates[i];
        }
    }
    return out;
}

namespace {

// What a cold trial reads between calls, per worker: past the L2 of the cores this project meets
// (1-2 MB), a short read from L3.
constexpr std::size_t kEvictFloats = std::size_t(1) << 20; // 4 MB
constexpr int kColdCalls = 12;

// Each of `workers` threads of one parallel region reads (and writes) its own part of a buffer
// past L2: the caches as a step's loops leave them for its next GEMM.
void evictCaches(int workers) {
    thread_local std::vector<float> buffer; // the calling lane's: two lanes may time at once
    buffer.resize(kEvictFloats * static_cast<std::size_t>(workers), 0.0f);
    float* data = buffer.data(); // (inside the region `buffer` would name each worker's own)
    at::parallel_for(0, workers, 1, [&](std::int64_t begin, std::int64_t end) {
        for (auto w = begin; w < end; ++w) {
            float* part = data + kEvictFloats * static_cast<std::size_t>(w);
            for (std::size_t i = 0; i < kEvictFloats; i += 16) { // a line in, a line dirty
                part[i] += 1.0f;
            }
        }
    });
}

} // namespace

double timeBf16Route(Bf16Route route, const GemmShape& shape, int workers, TrialCaches caches, bool fp32Operands) {
    workers = std::max(1, workers);
    const auto aRows = shape.transA ? shape.k : shape.m, aCols = shape.transA ? shape.m : shape.k;
    const auto bRows = shape.transB ? shape.n : shape.k, bCols = shape.transB ? shape.k : shape.n;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
    const bool inF32 = fp32Operands && route == Bf16Route::Fp32;
    std::vector<at::Tensor> as, bs, cs;
    for (int w = 0; w < workers; ++w) {
        as.push_back(at::randn({aRows, aCols}, gen).to(inF32 ? at::kFloat : at::kBFloat16));
        bs.push_back(at::randn({bRows, bCols}, gen).to(inF32 ? at::kFloat : at::kBFloat16));
        cs.push_back(at::empty({shape.m, shape.n}, at::kFloat));
    }
    const auto once = [&](int w) {
        if (inF32) {
            gemmF32(shape, as[w].data_ptr<float>(), aCols, bs[w].data_ptr<float>(), bCols, cs[w].data_ptr<float>(),
                    shape.n);
            return;
        }
        gemmBf16Routed(route, shape, reinterpret_cast<const Bf16*>(as[w].data_ptr<at::BFloat16>()), aCols,
                       reinterpret_cast<const Bf16*>(bs[w].data_ptr<at::BFloat16>()), bCols, cs[w].data_ptr<float>(),
                       shape.n);
    };
    const auto call = [&] {
        if (workers == 1) {
            once(0);
            return;
        }
        at::parallel_for(0, workers, 1, [&](std::int64_t begin, std::int64_t end) {
            const SerialMkl serial; // as the fused steps' workers run their GEMMs
            for (auto w = begin; w < end; ++w) {
                once(static_cast<int>(w));
            }
        });
    };
    using Clock = std::chrono::steady_clock;
    call(); // warm: packing buffers, the library's first-call set-up, the scratch
    if (caches == TrialCaches::Cold) {
        double total = 0;
        for (int i = 0; i < kColdCalls; ++i) {
            evictCaches(workers);
            const auto start = Clock::now();
            call();
            total += std::chrono::duration<double>(Clock::now() - start).count();
        }
        return total / kColdCalls;
    }
    auto t0 = Clock::now();
    call();
    const double first = std::chrono::duration<double>(Clock::now() - t0).count();
    const int calls = std::clamp(static_cast<int>(kTrialSeconds / std::max(first, 1e-7)), 1, kMaxCallsPerTrial);
    t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
        call();
    }
    return std::chrono::duration<double>(Clock::now() - t0).count() / calls;
}

Bf16Router::Bf16Router(int threads, int workers, Timer timer, TrialCaches caches, GemmInputs inputs)
    : m_threads(std::max(1, threads)), m_workers(std::max(1, workers)), m_caches(caches),
      m_allFp32Margin(inputs == GemmInputs::Fp32WhereAllFp32 && hostBf16Units().empty()), m_timer(std::move(timer)),
      m_forced(forcedRoute()) {
    if (!m_timer) {
        const int w = m_workers;
        const bool fp32Operands = m_allFp32Margin;
        m_timer = [w, caches, fp32Operands](Bf16Route r, const GemmShape& s) {
            return timeBf16Route(r, s, w, caches, fp32Operands);
        };
    }
}

Bf16Route Bf16Router::route(const GemmShape& shape) {
    // A step's hot path: a known shape is one lookup, no text.
    const ShapeKey known{shape.m, shape.n, shape.k, shape.transA, shape.transB};
    if (const auto it = m_routes.find(known); it != m_routes.end()) {
        return it->second;
    }
    return m_routes[known] = decide(shape);
}

Bf16Route Bf16Router::decide(const GemmShape& shape) {
    if (m_forced) {
        return *m_forced;
    }
    // A cold trial's choice is kept apart from a warm one's at the same shape, and so is one made
    // against fp32 operands with the copies' margin.
    const auto key = bf16RouteCacheKey(m_threads, m_workers,
                                       gemmShapeText(shape) + (m_caches == TrialCaches::Cold ? " cold" : "") +
                                           (m_allFp32Margin ? " fp32-kept" : ""));
    const auto available = timedBf16Routes();
    if (const auto kept = cachedBf16Route(key)) {
        if (const auto r = bf16RouteFromKey(*kept);
            r && std::find(available.begin(), available.end(), *r) != available.end()) {
            return *r;
        }
    }
    auto choice = pickBf16Route(available, [&](Bf16Route r) { return m_timer(r, shape); });
    if (m_allFp32Margin && choice.route != Bf16Route::Fp32) {
        // Another route must beat the fp32 sgemm by the margin of the bf16 copies it makes the step write.
        const auto fp32 = std::find_if(choice.timings.begin(), choice.timings.end(),
                                       [](const RouteTiming& t) { return t.route == Bf16Route::Fp32; });
        const auto best = std::find_if(choice.timings.begin(), choice.timings.end(),
                                       [&](const RouteTiming& t) { return t.route == choice.route; });
        if (fp32 != choice.timings.end() && best->seconds * kBf16CopiesMargin > fp32->seconds) {
            choice.route = Bf16Route::Fp32;
        }
    }
    std::vector<std::pair<std::string, double>> seconds;
    for (const auto& t : choice.timings) {
        seconds.emplace_back(bf16RouteKey(t.route), t.seconds);
    }
    keepBf16Route(key, bf16RouteKey(choice.route), seconds);
    return choice.route;
}

bool Bf16Router::onlyFp32() const {
    return !m_routes.empty() &&
           std::all_of(m_routes.begin(), m_routes.end(), [](const auto& e) { return e.second == Bf16Route::Fp32; });
}

std::string Bf16Router::summary() const {
    if (m_routes.empty()) {
        return {};
    }
    const auto threads = fmt::format("{} thread{}{}", m_threads, m_threads == 1 ? "" : "s",
                                     m_workers > 1 ? fmt::format(" x {} workers", m_workers) : "");
    if (m_forced) {
        return fmt::format("{} for every GEMM (DEVICERACE_BF16_ROUTE)", bf16RouteName(*m_forced));
    }
    std::map<Bf16Route, int> byRoute;
    for (const auto& [shape, r] : m_routes) {
        ++byRoute[r];
    }
    // The route most shapes took first (a tie in the routes' order).
    std::vector<std::pair<Bf16Route, int>> counts(byRoute.begin(), byRoute.end());
    std::stable_sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    const auto total = m_routes.size();
    std::string out;
    for (const auto& [r, n] : counts) {
        if (out.empty()) {
            out = counts.size() == 1 ? fmt::format("{} for every GEMM shape ({})", bf16RouteName(r), total)
                                     : fmt::format("{} for {} of {} GEMM shapes", bf16RouteName(r), n, total);
        } else {
            out += fmt::format(", {} for {}", bf16RouteName(r), n);
        }
    }
    return out + fmt::format(" (the fastest timed on this CPU at {}{}{})", threads,
                             m_caches == TrialCaches::Cold ? ", caches cold as a step leaves them" : "",
                             m_allFp32Margin ? fmt::format("; with no bf16 units another route must beat fp32 on "
                                                           "fp32 inputs by {:.0f}%",
                                                           (kBf16CopiesMargin - 1) * 100)
                                             : "");
}

} // namespace devicerace::detail::cpu

namespace devicerace {

std::string bf16GemmRouteName(const std::string& key) {
    const auto route = detail::cpu::bf16RouteFromKey(key);
    return route ? detail::cpu::bf16RouteName(*route) : key;
}

} // namespace devicerace
