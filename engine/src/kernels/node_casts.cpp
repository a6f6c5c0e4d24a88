// What the autograd nodes' bf16 paths share (see node_casts.h).
#include "kernels/node_casts.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <utility>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail {

NoAutocast::NoAutocast() : m_was(at::autocast::is_autocast_enabled(at::kCPU)) {
    at::autocast::set_autocast_enabled(at::kCPU, false);
}

NoAutocast::~NoAutocast() { at::autocast::set_autocast_enabled(at::kCPU, m_was); }

namespace {
// A new tensor of type `type` shaped and strided as `t` where `t` is dense (element i of the one is
// element i of the other in memory), else as `t` made contiguous; with that source.
std::pair<at::Tensor, at::Tensor> denseSourceAndOut(const at::Tensor& t, at::ScalarType type) {
    auto src = t.is_non_overlapping_and_dense() ? t : t.contiguous();
    auto out = at::empty_like(src, src.options().dtype(type));
    return {std::move(src), std::move(out)};
}
} // namespace

at::Tensor bf16ValuesInF32(const at::Tensor& t) {
    if (t.scalar_type() == at::kBFloat16) {
        return castFloat(t, false);
    }
    const auto [src, out] = denseSourceAndOut(t, at::kFloat);
    cpu::roundToBf16(src.data_ptr<float>(), reinterpret_cast<cpu::Bf16InF32*>(out.data_ptr<float>()), src.numel());
    return out;
}

at::Tensor castFloat(const at::Tensor& t, bool toBf16) {
    const auto want = toBf16 ? at::kBFloat16 : at::kFloat;
    const auto from = t.scalar_type();
    if (from == want || (from != at::kFloat && from != at::kBFloat16)) {
        return t.to(want);
    }
    const auto [src, out] = denseSourceAndOut(t, want);
    if (toBf16) {
        cpu::toBf16(src.data_ptr<float>(), reinterpret_cast<cpu::Bf16*>(out.data_ptr<at::BFloat16>()), src.numel());
    } else {
        cpu::toFloat(reinterpret_cast<const cpu::Bf16*>(src.data_ptr<at::BFloat16>()), out.data_ptr<float>(),
                     src.numel());
    }
    return out;
}

at::Tensor reluToBf16(const at::Tensor& t) {
    const auto [src, out] = denseSourceAndOut(t.scalar_type() == at::kFloat ? t : t.to(at::kFloat), at::kBFloat16);
    cpu::reluToBf16(src.data_ptr<float>(), reinterpret_cast<cpu::Bf16*>(out.data_ptr<at::BFloat16>()), src.numel());
    return out;
}

at::Tensor reluGradToFloat(const at::Tensor& dy, const at::Tensor& y) {
    const auto [yd, dx] = denseSourceAndOut(y, at::kFloat);
    // dy element i beside y's element i in memory
    const auto g = dy.scalar_type() == at::kBFloat16 && dy.sizes() == yd.sizes() && dy.strides() == yd.strides()
                       ? dy
                       : at::empty_like(yd).copy_(dy);
    const auto* gp = reinterpret_cast<const cpu::Bf16*>(g.data_ptr<at::BFloat16>());
    cpu::reluGradToFloat(gp, reinterpret_cast<const cpu::Bf16*>(yd.data_ptr<at::BFloat16>()), dx.data_ptr<float>(),
                         yd.numel());
    return dx;
}

} // namespace devicerace::detail
