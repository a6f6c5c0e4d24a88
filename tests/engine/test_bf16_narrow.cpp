// fp32 narrowed to bf16 by AVX-512 BF16's conversion (engine kernels/bf16_narrow.h) rounds as the
// integer rounding does (to nearest even, ties both ways, infinities, NaN kept a NaN) at every
// length's tail, and its column sums with a bf16 copy sum and copy as the plain loop does. On a
// CPU without AVX-512 BF16 the same calls take the integer rounding, and the tests still hold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/bf16_narrow.h"
#include "kernels/gpt_kernels.h"

using namespace devicerace::detail;

namespace {

float fromBits(std::uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// kernel_inline.h's rounding, restated: nearest even, any NaN the quiet bf16 NaN.
std::uint16_t expected(float v) {
    if (std::isnan(v)) {
        return 0x7FC0;
    }
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

bool isBf16Nan(std::uint16_t bits) { return (bits & 0x7F80) == 0x7F80 && (bits & 0x7F) != 0; }

std::vector<float> samples(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 4.0f);
    std::vector<float> x(n);
    for (auto& v : x) {
        v = normal(gen);
    }
    const float specials[] = {fromBits(0x3F808000u), // 1 + half an ulp of bf16: a tie, to even (down)
                              fromBits(0x3F818000u), // a tie, to even (up)
                              fromBits(0xBF818000u), // the same, negative
                              fromBits(0x3F80FFFFu), // just under a tie above 1.0078125: up
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::max(), // rounds to infinity, as the integer rounding does
                              0.0f,
                              -0.0f};
    for (std::size_t i = 0; i < std::size(specials) && i < n; ++i) {
        x[(i * 7919) % n] = specials[i];
    }
    return x;
}

} // namespace

TEST(Bf16Narrow, RoundsAsTheIntegerRoundingAtEveryTail) {
    for (std::size_t n : {1, 15, 16, 17, 31, 32, 33, 64, 100, 513}) {
        SCOPED_TRACE("n " + std::to_string(n));
        const auto x = samples(n, static_cast<unsigned>(n));
        std::vector<cpu::Bf16> out(n + 1);
        out[n].bits = 0xABCD; // past the end: untouched
        cpu::narrowToBf16(x.data(), out.data(), static_cast<std::int64_t>(n));
        for (std::size_t i = 0; i < n; ++i) {
            if (std::isnan(x[i])) {
                EXPECT_TRUE(isBf16Nan(out[i].bits)) << i;
            } else {
                EXPECT_EQ(out[i].bits, expected(x[i])) << i << ": " << x[i];
            }
        }
        EXPECT_EQ(out[n].bits, 0xABCD);
    }
}

TEST(Bf16Narrow, ColumnSumsCopyAndSumAsThePlainLoop) {
    if (!cpu::haveBf16NarrowInstruction()) {
        GTEST_SKIP() << "this CPU has no AVX-512 BF16 (columnSums takes the plain loop)";
    }
    for (std::int64_t cols : {1, 13, 16, 64, 100, 203, 512}) {
        SCOPED_TRACE("cols " + std::to_string(cols));
        constexpr std::int64_t rows = 37;
        auto x = samples(static_cast<std::size_t>(rows * cols), static_cast<unsigned>(cols));
        for (auto& v : x) { // finite values: sums to compare
            v = std::isfinite(v) && std::abs(v) < 1e30f ? v : 1.5f;
        }
        std::vector<float> sums(cols + 1, -1.0f);
        std::vector<cpu::Bf16> copy(rows * cols + 1);
        copy[rows * cols].bits = 0xABCD;
        // two column ranges, as the parallel blocks split them
        const std::int64_t split = cols / 2;
        cpu::columnSumsNarrowing(x.data(), rows, cols, 0, split, sums.data(), copy.data());
        cpu::columnSumsNarrowing(x.data(), rows, cols, split, cols, sums.data(), copy.data());
        for (std::int64_t c = 0; c < cols; ++c) {
            double want = 0;
            for (std::int64_t r = 0; r < rows; ++r) {
                want += x[r * cols + c];
            }
            EXPECT_NEAR(sums[c], want, 1e-4 * (1 + std::abs(want))) << c;
        }
        EXPECT_EQ(sums[cols], -1.0f);
        for (std::int64_t i = 0; i < rows * cols; ++i) {
            EXPECT_EQ(copy[i].bits, expected(x[i])) << i;
        }
        EXPECT_EQ(copy[rows * cols].bits, 0xABCD);
    }
}
