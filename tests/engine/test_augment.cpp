// augment=crop-flip's transform: every output example is a crop of its own zero-padded input,
// flipped or not, with offsets and flips drawn from the lane's host generator (a seed repeats them).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <set>

#include "data/augment.h"

using devicerace::detail::cropFlip;

TEST(CropFlip, EveryExampleIsAPaddedCropOfItselfFlippedOrNot) {
    constexpr std::int64_t n = 64, pad = 2;
    auto gen = at::detail::createCPUGenerator(1);
    const auto x = at::randint(1, 256, {n, 3, 8, 8}, gen, at::TensorOptions().dtype(at::kByte));
    auto draws = at::detail::createCPUGenerator(42);
    const auto out = cropFlip(x, draws, pad);
    ASSERT_EQ(out.sizes(), x.sizes());
    ASSERT_EQ(out.scalar_type(), at::kByte);
    const auto padded = at::constant_pad_nd(x, {pad, pad, pad, pad}, 0);
    std::set<std::tuple<int, int, bool>> seen;
    for (std::int64_t i = 0; i < n; ++i) {
        bool found = false;
        for (int oy = 0; oy <= 2 * pad && !found; ++oy) {
            for (int ox = 0; ox <= 2 * pad && !found; ++ox) {
                const auto crop = padded[i].narrow(1, oy, 8).narrow(2, ox, 8);
                for (bool flip : {false, true}) {
                    if (at::equal(out[i], flip ? crop.flip({2}) : crop)) {
                        seen.insert({oy, ox, flip});
                        found = true;
                        break;
                    }
                }
            }
        }
        EXPECT_TRUE(found) << "example " << i << " is no crop of its padded input";
    }
    // 64 draws of 50 outcomes: many different offsets, both with and without a flip.
    EXPECT_GE(seen.size(), 25u);
    EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const auto& s) { return std::get<2>(s); }));
    EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](const auto& s) { return !std::get<2>(s); }));
    // The same seed draws the same crops; another seed others.
    auto again = at::detail::createCPUGenerator(42);
    EXPECT_TRUE(at::equal(cropFlip(x, again, pad), out));
    auto other = at::detail::createCPUGenerator(43);
    EXPECT_FALSE(at::equal(cropFlip(x, other, pad), out));
    // Not images: a clear refusal.
    auto g = at::detail::createCPUGenerator(1);
    EXPECT_THROW(cropFlip(at::zeros({4, 10}), g), std::exception);
}
