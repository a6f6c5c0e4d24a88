// DeviceRace's AVX-512 BF16 GEMM (see bf16_gemm.h).
//
// `vdpbf16ps` multiplies 16 pairs of bf16 by 16 pairs and adds each pair's two products to one
// fp32 sum, so both operands are read as pairs along k: a tile of 8 rows x 32 columns of c keeps
// 16 vectors of sums; each step over a pair of k broadcasts one pair of a's row per row and loads
// b's 32 columns' pairs as two vectors. Per block of k (kPairs pairs), b is packed into panels
// of 32 columns ([pair][column] of 32-bit pairs, zero past n and past k; 16 KB, kept in L1 while
// the tiles of up to 64 rows of a pass it), and a is read in place where its rows hold k's pairs
// (a not transposed, k even), else packed per tile of 8 rows. Each thread takes a range of c's
// tiles or of its panels (whichever splits more evenly) and packs what it reads itself: one
// parallel region a call, no buffer shared.
// Only functions with the AVX-512 target use its instructions: the binary runs anywhere and
// takes this route only where haveAvx512Bf16Gemm().
#include "kernels/bf16_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/bf16_tile.h" // defines DR_BF16_GEMM where the target attributes exist

namespace devicerace::detail::cpu {

#ifdef DR_BF16_GEMM

namespace {

struct Buffers {
    std::vector<std::uint32_t> b; // this thread's packed b panels of the block
    std::vector<std::uint32_t> a; // this thread's packed a tiles of the block
};
Buffers& buffers() {
    thread_local Buffers s;
    return s;
}

// c's tiles [t0, t1) x panels [q0, q1), every block of k, on the calling thread.
void gemmPart(const Problem& g, std::int64_t t0, std::int64_t t1, std::int64_t q0, std::int64_t q1) {
    const bool inPlaceA = !g.transA && g.k % 2 == 0; // a's rows hold k's pairs as they are
    auto& buf = buffers();
    for (std::int64_t k0 = 0; k0 < g.k; k0 += 2 * kPairs) {
        const auto pairs = std::min(kPairs, (g.k - k0 + 1) / 2);
        const auto panelSize = pairs * kCols, tileSize = pairs * kRows;
        buf.b.resize(static_cast<std::size_t>((q1 - q0) * panelSize));
        for (auto q = q0; q < q1; ++q) {
            packB(g.transB, g.b, g.ldb, g.k, k0, pairs, q * kCols, std::min(kCols, g.n - q * kCols),
                  buf.b.data() + (q - q0) * panelSize);
        }
        const bool accumulate = k0 > 0;
        for (auto tb = t0; tb < t1; tb += kTilesPerBlock) {
            const auto te = std::min(t1, tb + kTilesPerBlock);
            if (!inPlaceA) {
                buf.a.resize(static_cast<std::size_t>(kTilesPerBlock * tileSize));
                for (auto t = tb; t < te; ++t) {
                    packA(g.transA, g.a, g.lda, g.k, k0, pairs, t * kRows, std::min(kRows, g.m - t * kRows),
                          buf.a.data() + (t - tb) * tileSize);
                }
            }
            for (auto q = q0; q < q1; ++q) {
                const std::uint32_t* panel = buf.b.data() + (q - q0) * panelSize;
                const auto cols = std::min(kCols, g.n - q * kCols);
                for (auto t = tb; t < te; ++t) {
                    const auto i0 = t * kRows;
                    const auto rows = std::min(kRows, g.m - i0);
                    float* c = g.c + i0 * g.ldc + q * kCols;
                    if (inPlaceA) {
                        kTiles[rows - 1](reinterpret_cast<const char*>(g.a + i0 * g.lda + k0), g.lda * 2, 4, panel,
                                         pairs, c, g.ldc, cols, accumulate);
                    } else {
                        kTiles[rows - 1](reinterpret_cast<const char*>(buf.a.data() + (t - tb) * tileSize), 4,
                                         kRows * 4, panel, pairs, c, g.ldc, cols, accumulate);
                    }
                }
            }
        }
    }
}

} // namespace

bool haveAvx512Bf16Gemm() {
    static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    return have;
}

void gemmBf16Avx512(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const Bf16* a,
                    std::int64_t lda, const Bf16* b, std::int64_t ldb, float* c, std::int64_t ldc) {
    runGemm({transA, transB, m, n, k, reinterpret_cast<const std::uint16_t*>(a), lda,
             reinterpret_cast<const std::uint16_t*>(b), ldb, c, ldc},
            kRows, gemmPart);
}

#else

bool haveAvx512Bf16Gemm() { return false; }

void gemmBf16Avx512(bool, bool, std::int64_t, std::int64_t, std::int64_t, const Bf16*, std::int64_t, const Bf16*,
                    std::int64_t, float*, std::int64_t) {}

#endif

namespace {
// How much longer the slowest of `parts` even shares of `units` runs than an exact share.
double imbalance(std::int64_t units, std::int64_t parts) {
    parts = std::min(parts, units);
    return static_cast<double>((units + parts - 1) / parts * parts) / static_cast<double>(units);
}
} // namespace

bool gemmWithoutProduct(std::int64_t m, std::int64_t n, std::int64_t k, float* c, std::int64_t ldc) {
    if (m <= 0 || n <= 0) {
        return true;
    }
    if (k > 0) {
        return false;
    }
    for (std::int64_t i = 0; i < m; ++i) {
        std::fill_n(c + i * ldc, n, 0.0f);
    }
    return true;
}

void eachGemmPart(std::int64_t rowBlocks, std::int64_t panels,
                  const std::function<void(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>& part) {
    const std::int64_t threads = at::in_parallel_region() ? 1 : std::max(1, at::get_num_threads());
    const bool byPanels = imbalance(panels, threads) < imbalance(rowBlocks, threads);
    const auto units = byPanels ? panels : rowBlocks;
    const auto parts = std::min(threads, units);
    at::parallel_for(0, parts, 1, [&](std::int64_t begin, std::int64_t end) {
        for (auto p = begin; p < end; ++p) {
            const auto u0 = p * units / parts, u1 = (p + 1) * units / parts;
            if (byPanels) {
                part(0, rowBlocks, u0, u1);
            } else {
                part(u0, u1, 0, panels);
            }
        }
    });
}

} // namespace devicerace::detail::cpu
