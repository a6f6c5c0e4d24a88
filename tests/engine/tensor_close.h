#pragma once
// One check for the model tests that compare a one-pass path with ATen's ops: the same tensor
// within a tolerance relative to the larger of 1e-3 and the expected tensor's largest element.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

namespace devicerace::test {

/// Both undefined (no gradient on either side), or the same shape and close.
inline void expectClose(const torch::Tensor& got, const torch::Tensor& want, const char* what,
                        double tolerance = 2e-5) {
    ASSERT_EQ(got.defined(), want.defined()) << what;
    if (!want.defined()) {
        return;
    }
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    const double scale = std::max(1e-3, want.abs().max().item<double>());
    const double worst = (got - want).abs().max().item<double>() / scale;
    EXPECT_LT(worst, tolerance) << what;
}

/// The four LSTM parameter gradients of two runs (structs with wIh, wHh, bIh, bHh).
template <class Run>
void expectLstmParameterGradsClose(const Run& got, const Run& want) {
    expectClose(got.wIh, want.wIh, "dW_ih");
    expectClose(got.wHh, want.wHh, "dW_hh");
    expectClose(got.bIh, want.bIh, "db_ih");
    expectClose(got.bHh, want.bHh, "db_hh");
}

} // namespace devicerace::test
