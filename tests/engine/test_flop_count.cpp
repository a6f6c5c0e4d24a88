// FLOPs per training example counted from the networks (models/flop_count.h), against the
// analytic MLP, nanoGPT's 6N + 12·L·T·C per token, and ResNet-50's published 4.1 GMACs.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>

#include "devicerace/workload.h"
#include "models/flop_count.h"

using namespace devicerace;
using namespace devicerace::detail;

TEST(FlopCount, TheMlpMatchesItsLayersExactly) {
    const auto c = countTrainingFlops("fashion-mlp", {});
    const double forward = 2.0 * (784 * 512 + 512 * 512 + 512 * 10);
    EXPECT_DOUBLE_EQ(c.forward, forward);
    // Backward: weight gradients of every layer, input gradients of all but the first.
    EXPECT_DOUBLE_EQ(c.backward, 2 * forward - 2.0 * 784 * 512);
    EXPECT_EQ(c.byOp.count("aten::addmm") + c.byOp.count("aten::mm"), 2u);
}

TEST(FlopCount, CharGptFollowsNanoGptsFormula) {
    // nanoGPT's estimate_mfu: 6N + 12·L·T·C per token, N without the position embeddings.
    struct Shape {
        const char* name;
        std::int64_t layers, width, context;
    };
    for (const Shape s : {Shape{"char-gpt", 4, 128, 64}, Shape{"char-gpt-6l", 6, 384, 256}}) {
        ModelOptions o;
        o.vocabulary = 65;
        const double n = static_cast<double>(gptParameterCount(s.layers, s.width, s.context, 65) - s.context * s.width);
        const double perToken = 6 * n + 12.0 * static_cast<double>(s.layers * s.context * s.width);
        const auto c = countTrainingFlops(s.name, o);
        EXPECT_NEAR(c.perExample() / static_cast<double>(s.context) / perToken, 1.0, 0.02) << s.name;
        EXPECT_GT(c.byOp.at("aten::scaled_dot_product_attention"), 0) << s.name;
    }
}

TEST(FlopCount, ResNet50IsTheFourGigaMacsEveryoneQuotes) {
    // torchvision's table (and fvcore): 4.09 GMACs forward at 224x224, i.e. 8.2 GFLOPs.
    const auto c = countTrainingFlops("imagenet-resnet50", {}, 1);
    EXPECT_NEAR(c.forward / 2 / 4.09e9, 1.0, 0.05) << c.forward;
    // Backward: both gradients of every convolution but the first (no input gradient there).
    EXPECT_GT(c.backward / c.forward, 1.9);
    EXPECT_LE(c.backward / c.forward, 2.0);
}

TEST(FlopCount, EveryWorkloadHasACount) {
    for (const auto& w : workloads()) {
        ModelOptions o;
        o.vocabulary = w.vocabulary > 0 ? w.vocabulary : 0;
        const auto c = countTrainingFlops(w.name, o);
        if (std::getenv("DEVICERACE_PRINT_FLOPS")) {
            std::cout << w.name << ": " << c.forward << " + " << c.backward << "\n";
            for (const auto& [op, f] : c.byOp) {
                std::cout << "    " << op << " " << f << "\n";
            }
        }
        EXPECT_GT(c.forward, 0) << w.name;
        // The backward of a product is two products (one when its input needs no gradient).
        EXPECT_GE(c.backward / c.forward, 0.9) << w.name;
        EXPECT_LE(c.backward / c.forward, 2.01) << w.name;
    }
}

TEST(FlopCount, TheCountIsRememberedAndDeterministic) {
    const double a = trainingFlopsPerExample("fashion-cnn", {});
    EXPECT_EQ(trainingFlopsPerExample("fashion-cnn", {}), a);
    EXPECT_EQ(countTrainingFlops("fashion-cnn", {}).perExample(), a);
}

TEST(FlopCount, AnLstmCountsTheSameFusedOrAsCells) {
    // oneDNN's fused layer and the LSTMCell loop run the same products forward; the cell loop
    // skips the input gradient that the fused backward always computes.
    for (const auto* name : {"charlstm", "imdb-bilstm"}) {
        ModelOptions cells;
        cells.fusedLstm = false;
        const auto fused = countTrainingFlops(name, {}), loop = countTrainingFlops(name, cells);
        EXPECT_NEAR(fused.forward / loop.forward, 1.0, 1e-9) << name;
        EXPECT_GT(fused.byOp.at("aten::mkldnn_rnn_layer"), 0.9 * fused.forward) << name;
        EXPECT_GE(fused.backward, loop.backward) << name;
    }
}
