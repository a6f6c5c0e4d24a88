#include "data/augment.h"

#include <ATen/Functions.h>

#include "devicerace/errors.h"

namespace devicerace::detail {

at::Tensor cropFlip(const at::Tensor& x, at::Generator& gen, std::int64_t pad) {
    if (x.dim() != 4) {
        throw Error("crop-flip augmentation takes batches of images [N, C, H, W]");
    }
    const auto n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const auto longs = at::TensorOptions().dtype(at::kLong);
    // The draws, on the host: row and column offsets into the padded image, and the flips.
    const auto oy = at::randint(0, 2 * pad + 1, {n, 1}, gen, longs);
    const auto ox = at::randint(0, 2 * pad + 1, {n, 1}, gen, longs);
    const auto flip = at::randint(0, 2, {n, 1}, gen, longs).to(at::kBool);
    const auto cols = at::arange(w, longs);
    const auto rowIndex = (oy + at::arange(h, longs)).to(x.device());                  // [N, H]
    const auto colIndex = (ox + at::where(flip, (w - 1) - cols, cols)).to(x.device()); // [N, W]
    const auto padded = at::constant_pad_nd(x, {pad, pad, pad, pad}, 0);               // [N, C, H+2p, W+2p]
    const auto rows = padded.gather(2, rowIndex.view({n, 1, h, 1}).expand({n, c, h, w + 2 * pad}));
    return rows.gather(3, colIndex.view({n, 1, 1, w}).expand({n, c, h, w}));
}

} // namespace devicerace::detail
