// Recurrent networks of the Keras benchmark (../shared/seeds/003_*): imdb_bidirectional_lstm
// and lstm_text_generation. Each runs either as torch::nn::LSTM (one fused cuDNN kernel per
// layer on GPU) or as a loop of LSTMCells (lane key lstm=cells), the comparison seed 003 made.
#include <ATen/autocast_mode.h>
#include <cstdlib>

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>

#include "models/models.h"

namespace devicerace::detail {

namespace {

// One LSTM direction over (B, T, F) -> final hidden state (B, H), fused or as a cell loop.
struct LstmRunnerImpl : torch::nn::Module {
    LstmRunnerImpl(std::int64_t input, std::int64_t hidden, bool bidirectional, bool fused, bool onePassCells = false)
        : m_fused(fused), m_bi(bidirectional), m_onePassCells(!fused && onePassCells) {
        if (fused) {
            lstm = register_module(
                "lstm",
                torch::nn::LSTM(torch::nn::LSTMOptions(input, hidden).batch_first(true).bidirectional(bidirectional)));
        } else {
            fwd = register_module("fwd", torch::nn::LSTMCell(input, hidden));
            if (bidirectional) {
                bwd = register_module("bwd", torch::nn::LSTMCell(input, hidden));
            }
        }
    }
    /// Final hidden state(s): (B, H), or (B, 2H) forward ++ backward when bidirectional.
    torch::Tensor forward(const torch::Tensor& x) {
        if (m_fused) {
            auto hn = std::get<0>(std::get<1>(lstm->forward(x))); // (directions, B, H)
            return m_bi ? torch::cat({hn[0], hn[1]}, 1) : hn[0];
        }
        const bool onePass = m_onePassCells && x.is_cpu() && x.scalar_type() == at::kFloat &&
                             !at::autocast::is_autocast_enabled(at::kCPU);
        auto run = [&](torch::nn::LSTMCell& cell, bool reverse) {
            const auto steps = x.size(1);
            std::optional<std::tuple<torch::Tensor, torch::Tensor>> state;
            const auto bias = onePass ? cell->bias_ih + cell->bias_hh : torch::Tensor();
            for (std::int64_t i = 0; i < steps; ++i) {
                auto xt = x.select(1, reverse ? steps - 1 - i : i);
                state = onePass ? lstmCellOnePass(xt, state, cell->weight_ih, cell->weight_hh, bias)
                                : cell->forward(xt, state);
            }
            return std::get<0>(*state);
        };
        auto h = run(fwd, false);
        return m_bi ? torch::cat({h, run(bwd, true)}, 1) : h;
    }
    /// The final hidden state over token ids whose input is their one-hot vectors over `vocab`:
    /// with `tokens` (the lane's token-lstm fast path) on an fp32 CPU lane, tokenLstm; otherwise forward(one_hot).
    torch::Tensor forwardOneHot(const torch::Tensor& x, std::int64_t vocab, bool tokens) {
        if (tokens && m_fused && !m_bi && x.is_cpu() && !at::autocast::is_autocast_enabled(at::kCPU)) {
            const auto p = lstm->named_parameters(false);
            if (p["weight_ih_l0"].scalar_type() == at::kFloat) {
                return tokenLstm(x, p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"]);
            }
        }
        return forward(torch::one_hot(x, vocab).to(torch::kFloat32));
    }
    torch::nn::LSTM lstm{nullptr};
    torch::nn::LSTMCell fwd{nullptr}, bwd{nullptr};
    bool m_fused, m_bi;
    bool m_onePassCells; // lstm=cells on an fp32 CPU: lstmCellOnePass, not torch::nn::LSTMCell
};
TORCH_MODULE(LstmRunner);

// keras-team/keras examples/imdb_bidirectional_lstm.py: Embedding 20000 x 128, Bidirectional
// LSTM 64, Dropout 0.5, Dense 1 sigmoid; maxlen 100, batch 32, Adam.
struct ImdbBiLstm : Net {
    ImdbBiLstm(at::Generator initGen, bool fused, const FastPaths& fast) {
        gen = std::move(initGen);
        onePassCells = !fused && fast.onePassCells;
        hashedDropout = fast.hashedDropout;
        embed = register_module("embed", torch::nn::Embedding(20000, 128));
        rnn = register_module("rnn", LstmRunner(128, 64, true, fused, onePassCells));
        fc = register_module("fc", torch::nn::Linear(128, 1));
        torch::NoGradGuard noGrad;
        embed->weight.uniform_(-0.05, 0.05, gen); // Keras' embedding initialiser
        lstmInit(*rnn, 64, gen);
        glorotInit(*fc, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        auto h = rnn->forward(embed->forward(x));
        return fc->forward(laneDropout(h, 0.5, is_training(), gen, hashedDropout));
    }
    torch::nn::Embedding embed{nullptr};
    LstmRunner rnn{nullptr};
    torch::nn::Linear fc{nullptr};
};

// keras-team/keras examples/lstm_text_generation.py: one-hot characters, LSTM 128 over
// 40-character windows, Dense over the alphabet, RMSprop(lr=0.01), batch 128.
struct CharLstm : Net {
    CharLstm(at::Generator initGen, bool fused, const FastPaths& fast, std::int64_t vocabulary) : m_vocab(vocabulary) {
        gen = std::move(initGen);
        tokenLstm = fused && fast.tokenLstm;
        rnn = register_module("rnn", LstmRunner(vocabulary, 128, false, fused));
        fc = register_module("fc", torch::nn::Linear(128, vocabulary));
        lstmInit(*rnn, 128, gen);
        glorotInit(*fc, gen);
    }
    torch::Tensor forward(const torch::Tensor& x) override {
        return fc->forward(rnn->forwardOneHot(x, m_vocab, tokenLstm));
    }
    LstmRunner rnn{nullptr};
    torch::nn::Linear fc{nullptr};
    std::int64_t m_vocab;
};

} // namespace

std::vector<WorkloadImpl> rnnWorkloads() {
    return {
        {.info = {.name = "imdb-bilstm",
                  .description =
                      "Keras imdb_bidirectional_lstm: embedding, BiLSTM 64, dropout, sigmoid (IMDb sentiment)",
                  .dataset = "imdb",
                  .origin = "keras-team/keras examples/imdb_bidirectional_lstm.py",
                  .optimizer = "Adam(lr=1e-3)",
                  .defaultBatch = 32,
                  .defaultEpochs = 4,
                  .defaultTarget = 0.83,
                  .input = DataKind::Tokens,
                  .inputShape = {100}, // maxlen
                  .classes = 2,
                  .vocabulary = 20000,
                  .syntheticByDefault = true,
                  .hasLstm = true,
                  // cuDNN RNNs under graph capture are left to an explicit graph=true.
                  .cudaGraphByDefault = false},
         .task = Task::Binary,
         .makeModel =
             [](at::Generator g, const ModelOptions& o) {
                 return std::make_shared<ImdbBiLstm>(std::move(g), o.fusedLstm, o.fast);
             },
         .optimizer = {}}, // Adam
        {.info = {.name = "charlstm",
                  .description = "Keras lstm_text_generation: LSTM 128 over 40-character windows; samples text",
                  .dataset = "text",
                  .origin = "keras-team/keras examples/lstm_text_generation.py",
                  .optimizer = "RMSprop(lr=0.01)",
                  .defaultBatch = 128,
                  .defaultLr = 0.01,
                  .defaultEpochs = 5,
                  .defaultTarget = 0.45,
                  .input = DataKind::Tokens,
                  .inputShape = {40},
                  .classes = 60, // the alphabet of the corpus; 60 is typical of English text
                  .vocabulary = 60,
                  .hasLstm = true,
                  .samplesText = true,
                  .cudaGraphByDefault = false},
         .makeModel =
             [](at::Generator g, const ModelOptions& o) {
                 return std::make_shared<CharLstm>(std::move(g), o.fusedLstm, o.fast,
                                                   o.vocabulary > 0 ? o.vocabulary : 60);
             },
         // Keras RMSprop: rho 0.9, epsilon 1e-7.
         .optimizer = {.kind = OptimizerRecipe::Kind::RmsProp, .alpha = 0.9, .eps = 1e-7}},
    };
}

} // namespace devicerace::detail
