#pragma once
// One flat fp32 parameter buffer, its gradient and, for bf16 GEMMs, its bf16 mirror: what a fused
// step owns (its module's parameters become views of it) and the flat optimizer steps
// (makeFlatOptimizer). Lane thread only.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace devicerace::detail {

struct FlatParams {
    at::Tensor params; // fp32, every parameter in the step's order
    at::Tensor grads;  // fp32, zeroed once; the step writes every gradient each step
    at::Tensor mirror; // bf16 copy of params the GEMMs read; undefined for fp32

    FlatParams() = default;
    FlatParams(std::int64_t total, bool bf16);

    /// One parameter's slices, each shaped like it: its weights, gradient and (when mirrored) bf16 copy.
    struct Slice {
        at::Tensor w, g, wb;
    };
    /// Copies `moduleParam` into [offset, offset + its numel), makes the module's tensor a view of
    /// that slice (same tensor, new storage) and advances `offset`. `mirrored`: it gets a slice of
    /// the bf16 mirror too (when there is one).
    Slice adopt(const at::Tensor& moduleParam, std::int64_t& offset, bool mirrored);
    /// mirror := params, once every parameter is adopted (nothing for fp32).
    void syncMirror();
};

} // namespace devicerace::detail
