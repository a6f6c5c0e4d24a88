// DeviceRace's AMX bf16 GEMM (see bf16_amx_gemm.h).
//
// c is computed in blocks of 32 rows x 32 columns, four tiles of 16 x 16 sums (tmm0-3), from two
// tiles of a's rows (16 rows x 32 values of k, tmm4-5) and two of b's pairs (16 pairs x 16
// columns, tmm6-7): four `tdpbf16ps` per 32 values of k. Per block of k (up to 512 values) b is
// packed into panels of 32 columns, [pair][column] of 32-bit pairs (bf16_tile.h's packB, zero past
// n and past k), which are what a b tile reads, 128 bytes a row; a is read in place where its rows
// hold k as they are (a not transposed, k a multiple of 32, a whole block of 32 rows), else packed
// per block of 32 rows, [row][k] with zeros past m and k (a transposed: b's pair packing, then
// 16 x 16 words transposed). Blocks at c's edges go through a 32 x 32 scratch. Each thread takes a
// range of c's row blocks or of its panels (whichever splits more evenly) and packs what it reads
// itself: one parallel region a call, no buffer shared.
// Only functions with the AMX target use its instructions: the binary runs anywhere and takes this
// route only where haveAmxBf16Gemm().
#include "kernels/bf16_amx_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/bf16_gemm.h"
#include "kernels/bf16_tile.h" // defines DR_BF16_GEMM where the target attributes exist

#if defined(DR_BF16_GEMM) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define DR_AMX_GEMM 1
#define DR_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#endif

namespace devicerace::detail::cpu {

#ifdef DR_AMX_GEMM

namespace {

constexpr std::int64_t kBlock = 32;   // rows and columns of c a block: 2 x 2 tiles
constexpr std::int64_t kKBlock = 512; // values of k a block: b's panel 32 KB, a's block 32 KB
static_assert(kBlock == kCols, "a block of c is one of b's panels wide");

struct alignas(64) TileConfig {
    std::uint8_t palette = 1, startRow = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colBytes[16] = {};
    std::uint8_t rows[16] = {};
};

// Eight tiles of 16 rows x 64 bytes. A static one: GCC 12 drops the stores that fill a
// configuration on the stack before `ldtilecfg` (its builtin does not read memory as far as the
// compiler knows), which then faults.
const TileConfig& tileConfig() {
    static const TileConfig config = [] {
        TileConfig t;
        for (int i = 0; i < 8; ++i) {
            t.colBytes[i] = 64;
            t.rows[i] = 16;
        }
        return t;
    }();
    return config;
}

struct Buffers {
    std::vector<std::uint32_t> b;         // this thread's packed b panels of the block
    std::vector<std::uint16_t> a;         // this thread's packed a block
    alignas(64) float c[kBlock * kBlock]; // an edge block of c
};
Buffers& buffers() {
    thread_local Buffers s;
    return s;
}

// a's rows [i0, i0 + rows) over k [k0, k0 + width) into out [32 rows][padded] (zeros past them).
DR_AMX void packRows(const Problem& g, std::int64_t i0, std::int64_t rows, std::int64_t k0, std::int64_t width,
                     std::int64_t padded, std::uint16_t* out) {
    std::memset(out, 0, static_cast<std::size_t>(kBlock * padded) * sizeof(std::uint16_t));
    if (!g.transA) {
        for (std::int64_t r = 0; r < rows; ++r) {
            std::memcpy(out + r * padded, g.a + (i0 + r) * g.lda + k0, static_cast<std::size_t>(width) * 2);
        }
        return;
    }
    // a stored [k x m]: its columns i0.. packed as b's panel ([pair][32 columns] of pairs of k),
    // then each 16 pairs x 16 columns transposed into 16 rows of 32 values.
    const std::int64_t pairs = (width + 1) / 2, padPairs = padded / 2;
    alignas(64) std::uint32_t panel[(kKBlock / 2) * kCols];
    packB(false, g.a, g.lda, k0 + width, k0, pairs, i0, rows, panel);
    std::memset(panel + pairs * kCols, 0, static_cast<std::size_t>((padPairs - pairs) * kCols) * 4);
    for (std::int64_t cb = 0; cb < kBlock; cb += 16) {
        for (std::int64_t p0 = 0; p0 < padPairs; p0 += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; ++i) {
                r[i] = _mm512_loadu_si512(panel + (p0 + i) * kCols + cb);
            }
            transpose16(r);
            for (int i = 0; i < 16; ++i) {
                _mm512_storeu_si512(out + (cb + i) * padded + 2 * p0, r[i]);
            }
        }
    }
}

// c's row blocks [t0, t1) x panels [q0, q1), every block of k, on the calling thread.
DR_AMX void gemmPart(const Problem& g, std::int64_t t0, std::int64_t t1, std::int64_t q0, std::int64_t q1) {
    _tile_loadconfig(&tileConfig());
    auto& buf = buffers();
    for (std::int64_t k0 = 0; k0 < g.k; k0 += kKBlock) {
        const auto width = std::min(kKBlock, g.k - k0);
        const auto padded = (width + 31) / 32 * 32, pairs = (width + 1) / 2, padPairs = padded / 2;
        const auto panelSize = padPairs * kCols;
        buf.b.resize(static_cast<std::size_t>((q1 - q0) * panelSize));
        for (auto q = q0; q < q1; ++q) {
            std::uint32_t* panel = buf.b.data() + (q - q0) * panelSize;
            packB(g.transB, g.b, g.ldb, g.k, k0, pairs, q * kCols, std::min(kCols, g.n - q * kCols), panel);
            std::memset(panel + pairs * kCols, 0, static_cast<std::size_t>((padPairs - pairs) * kCols) * 4);
        }
        const bool accumulate = k0 > 0;
        for (auto t = t0; t < t1; ++t) {
            const auto i0 = t * kBlock, rows = std::min(kBlock, g.m - i0);
            const std::uint16_t* a = nullptr;
            std::int64_t aStride = 0; // bytes
            if (!g.transA && width == padded && rows == kBlock) {
                a = g.a + i0 * g.lda + k0;
                aStride = g.lda * 2;
            } else {
                buf.a.resize(static_cast<std::size_t>(kBlock * padded));
                packRows(g, i0, rows, k0, width, padded, buf.a.data());
                a = buf.a.data();
                aStride = padded * 2;
            }
            for (auto q = q0; q < q1; ++q) {
                const std::uint32_t* panel = buf.b.data() + (q - q0) * panelSize;
                const auto cols = std::min(kCols, g.n - q * kCols);
                const bool whole = rows == kBlock && cols == kBlock;
                float* c = whole ? g.c + i0 * g.ldc + q * kCols : buf.c;
                const std::int64_t ldc = whole ? g.ldc : kBlock;
                if (!whole) {
                    std::fill_n(buf.c, kBlock * kBlock, 0.0f);
                    for (std::int64_t r = 0; accumulate && r < rows; ++r) {
                        std::memcpy(buf.c + r * kBlock, g.c + (i0 + r) * g.ldc + q * kCols,
                                    static_cast<std::size_t>(cols) * 4);
                    }
                }
                if (accumulate || !whole) {
                    _tile_loadd(0, c, ldc * 4);
                    _tile_loadd(1, c + 16, ldc * 4);
                    _tile_loadd(2, c + 16 * ldc, ldc * 4);
                    _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
                } else {
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                }
                const char* a0 = reinterpret_cast<const char*>(a);
                for (std::int64_t kk = 0; kk < padded; kk += 32) {
                    _tile_loadd(4, a0 + kk * 2, aStride);
                    _tile_loadd(5, a0 + 16 * aStride + kk * 2, aStride);
                    _tile_loadd(6, panel + (kk / 2) * kCols, kCols * 4);
                    _tile_loadd(7, panel + (kk / 2) * kCols + 16, kCols * 4);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                _tile_stored(0, c, ldc * 4);
                _tile_stored(1, c + 16, ldc * 4);
                _tile_stored(2, c + 16 * ldc, ldc * 4);
                _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
                if (!whole) {
                    for (std::int64_t r = 0; r < rows; ++r) {
                        std::memcpy(g.c + (i0 + r) * g.ldc + q * kCols, buf.c + r * kBlock,
                                    static_cast<std::size_t>(cols) * 4);
                    }
                }
            }
        }
    }
    _tile_release();
}

bool cpuHasAmxBf16() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
        return false;
    }
    constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
    return (edx & kAmxBf16) && (edx & kAmxTile);
}

} // namespace

bool haveAmxBf16Gemm() {
    static const bool have = [] {
        if (!haveAvx512Bf16Gemm() || !cpuHasAmxBf16()) {
            return false;
        }
        constexpr long kRequestPermission = 0x1023; // ARCH_REQ_XCOMP_PERM
        constexpr long kTileData = 18;              // XFEATURE_XTILEDATA
        return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
    }();
    return have;
}

void gemmBf16Amx(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const Bf16* a,
                 std::int64_t lda, const Bf16* b, std::int64_t ldb, float* c, std::int64_t ldc) {
    runGemm({transA, transB, m, n, k, reinterpret_cast<const std::uint16_t*>(a), lda,
             reinterpret_cast<const std::uint16_t*>(b), ldb, c, ldc},
            kBlock, gemmPart);
}

#else

bool haveAmxBf16Gemm() { return false; }

void gemmBf16Amx(bool, bool, std::int64_t, std::int64_t, std::int64_t, const Bf16*, std::int64_t, const Bf16*,
                 std::int64_t, float*, std::int64_t) {}

#endif

} // namespace devicerace::detail::cpu
