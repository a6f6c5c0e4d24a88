#pragma once
// The routes a bf16 GEMM of a fused step (bf16 inputs, an fp32 result) can take on a CPU, and the
// choice among them by measurement. Which library is fastest at a shape differs between CPUs
// (MKL's bf16 GEMM uses AMX on an Intel Xeon; on an AMD EPYC with AVX-512 BF16 MKL's does not use
// the bf16 units, and oneDNN's or the engine's own kernel is the fast one) and between shapes (a
// small GEMM pays a library's fixed cost), so each shape a step uses is timed on every route once
// per CPU model, thread count and LibTorch version, and the fastest is kept
// (devices/bf16_route_cache.h) beside the GEMM peaks. Torch-free header.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

enum class Bf16Route {
    Mkl,    // MKL's cblas_gemm_bf16bf16f32: bf16 inputs, fp32 sums
    OneDnn, // at::mm on bf16 tensors (oneDNN): a bf16 result, widened to fp32
    Fp32,   // both inputs widened to fp32, at::mm in fp32 (MKL's sgemm)
    Avx512, // the engine's own AVX-512 BF16 GEMM (kernels/bf16_gemm.h): fp32 sums in place
    Amx,    // the engine's own AMX GEMM (kernels/bf16_amx_gemm.h): fp32 sums in place
};

/// "MKL bf16", "oneDNN bf16", "fp32", "AVX-512 BF16 kernel", "AMX kernel".
const char* bf16RouteName(Bf16Route route);
/// The lowercase names the cache and DEVICERACE_BF16_ROUTE use: "mkl", "onednn", "fp32", "avx512", "amx".
const char* bf16RouteKey(Bf16Route route);
std::optional<Bf16Route> bf16RouteFromKey(std::string_view key);

/// The routes this process can take, in order of preference on a tie: MKL's only where the
/// LibTorch in this process exports it (haveMklBf16Gemm), the engine's own kernel only on a CPU
/// with AVX-512 BF16 (haveAvx512Bf16Gemm), its AMX kernel only where AMX runs (haveAmxBf16Gemm).
std::vector<Bf16Route> availableBf16Routes();

/// The routes a shape is timed on: the available ones, less oneDNN's on a CPU without bf16 units
/// (AMX or AVX-512 BF16), where its emulation runs at ~1/80 of the fp32 GEMM (docs/ENGINEERING.md,
/// "bf16 on CPUs"): one trial of it would take seconds, and it never wins.
std::vector<Bf16Route> timedBf16Routes();

struct GemmShape {
    std::int64_t m = 0, n = 0, k = 0;
    bool transA = false, transB = false;
};

/// "768x384x128 NT" (m x n x k, then a' and b' as stored: N or T).
std::string gemmShapeText(const GemmShape& s);

/// Row-major c[m x n] (row stride ldc) = a' b', a' = a [m x k] or a^T (a stored [k x m]), b' = b
/// [k x n] or b^T (b stored [n x k]), leading dimensions as stored, by `route`. The oneDNN and fp32
/// routes use scratch buffers of the calling thread. Threads: the library's own (the lane's
/// intra-op count), one inside a parallel region.
void gemmBf16Routed(Bf16Route route, const GemmShape& s, const Bf16* a, std::int64_t lda, const Bf16* b,
                    std::int64_t ldb, float* c, std::int64_t ldc);

/// The same product of fp32 operands by MKL's sgemm (ATen's mm_out): the fp32 route's arithmetic
/// on operands already widened, such as bf16 values kept in fp32 storage (Bf16InF32).
void gemmF32(const GemmShape& s, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
             std::int64_t ldc);

/// Rows of bf16 (lds apart) widened into rows of fp32 (ldd apart) by the engine's vectorised loop
/// (the lane's intra-op threads), not ATen's generic copy (TensorIterator), which costs a large
/// share of the GEMMs' own time at the fused steps' shapes (docs/ENGINEERING.md, "bf16 GEMM routes").
void widenRows(const Bf16* src, std::int64_t lds, std::int64_t rows, std::int64_t cols, float* dst, std::int64_t ldd);

struct RouteTiming {
    Bf16Route route;
    double seconds = 0; // the median trial's
};

struct RouteChoice {
    Bf16Route route = Bf16Route::Fp32;
    std::vector<RouteTiming> timings; // each candidate's, in the candidates' order
};

/// The fastest of `candidates` (not empty) by the median of `trials` calls of `seconds(route)`,
/// the routes interleaved trial by trial so that a drift of the machine's speed touches each
/// alike. The earlier candidate wins a tie.
RouteChoice pickBf16Route(const std::vector<Bf16Route>& candidates, const std::function<double(Bf16Route)>& seconds,
                          int trials = 3);

/// How a route's trial leaves the caches between its calls.
/// - Warm: call after call on the same operands (a dense step's GEMMs follow one another).
/// - Cold: before each call every worker reads a buffer past its core's L2, and only the calls are
///   timed (a transformer step's GEMMs sit between loops that take the caches: there the warm
///   timings gave MKL shapes that the step ran faster on the engine's kernel).
enum class TrialCaches { Warm, Cold };

/// Seconds of one trial of `route` at `shape`, per call: warm, enough calls on random operands to
/// last ~2 ms; cold, 12 calls. `workers` > 1 runs that many of the GEMMs at once, one per thread of
/// one parallel region (a fused step's split: each worker's share with one thread).
/// `fp32Operands`: the fp32 route's operands are fp32 already (a step that keeps its GEMM inputs in
/// fp32 storage once every shape takes fp32), so its trial times the sgemm alone, not the widening.
double timeBf16Route(Bf16Route route, const GemmShape& shape, int workers, TrialCaches caches = TrialCaches::Warm,
                     bool fp32Operands = false);

/// How the step stores a GEMM's inputs where every shape takes the fp32 route.
/// - Bf16Copies: bf16 copies whatever the routes (the fp32 route widens them at each call).
/// - Fp32WhereAllFp32: bf16 values in fp32 storage, read without widening (the transformer step).
///   On a CPU without bf16 units another route is then taken only where it beats the fp32 route's
///   sgemm alone by kBf16CopiesMargin: any shape on it makes the step write bf16 copies again,
///   which its trial does not count, and there MKL's bf16 GEMM is itself an emulation.
enum class GemmInputs { Bf16Copies, Fp32WhereAllFp32 };
constexpr double kBf16CopiesMargin = 1.15;

/// One step's bf16 GEMM routes: each shape's route, decided at its first use from the cache
/// (devices/bf16_route_cache.h), else by timing every available route (then cached), unless
/// DEVICERACE_BF16_ROUTE names one route for every shape (tests and benchmarks).
class Bf16Router {
public:
    using Timer = std::function<double(Bf16Route, const GemmShape&)>;
    /// `threads`: the intra-op threads the GEMMs run on (or, with `workers` > 1, the workers that
    /// each run one share with one thread); part of the cache key, as a cold trial is. `timer`:
    /// the trial a choice is made by (default: timeBf16Route with `caches`); tests pass a fake.
    explicit Bf16Router(int threads, int workers = 1, Timer timer = {}, TrialCaches caches = TrialCaches::Warm,
                        GemmInputs inputs = GemmInputs::Bf16Copies);

    Bf16Route route(const GemmShape& shape);
    /// The route DEVICERACE_BF16_ROUTE names for every shape, if it names one.
    std::optional<Bf16Route> forced() const { return m_forced; }
    /// "MKL bf16 for 12 of 14 GEMM shapes, oneDNN bf16 for 2 (timed on this CPU, 2 threads)";
    /// "fp32 for every GEMM (DEVICERACE_BF16_ROUTE)"; empty before the first shape.
    std::string summary() const;
    /// Every shape decided so far takes the fp32 route (false before the first).
    bool onlyFp32() const;

private:
    int m_threads;
    int m_workers;
    TrialCaches m_caches;
    bool m_allFp32Margin; // Fp32WhereAllFp32 on a CPU without bf16 units
    Timer m_timer;
    std::optional<Bf16Route> m_forced;
    using ShapeKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool>; // m, n, k, transA, transB
    Bf16Route decide(const GemmShape& shape); // a shape's first use: forced, kept, or timed now
    std::map<ShapeKey, Bf16Route> m_routes;
};

} // namespace devicerace::detail::cpu
