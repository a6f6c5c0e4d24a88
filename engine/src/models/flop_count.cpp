// FLOPs per training example, counted from the dispatcher's matrix products (models/flop_count.h).
#include "models/flop_count.h"
#include "models/flops_per_sample.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <tuple>

namespace devicerace::detail {

namespace {

// The count in progress (one at a time: countMutex), written by whichever thread runs an op of
// the counting pass (autograd may run the backward on its own threads with the caller's
// thread-local callbacks).
std::mutex countMutex;
std::mutex totalsMutex;
FlopCount* current = nullptr;
bool inBackward = false;
double batchSize = 1;
// Counted ops open at this thread: an op inside a counted one (addmm inside sdpa's math path,
// mkldnn_convolution inside convolution) is part of its parent's count.
thread_local int countedDepth = 0;

std::vector<std::int64_t> sizesOf(const c10::IValue& v) {
    return v.isTensor() ? v.toTensor().sizes().vec() : std::vector<std::int64_t>{};
}

double product(const std::vector<std::int64_t>& s, std::size_t from = 0, std::size_t to = SIZE_MAX) {
    double p = 1;
    const std::size_t end = std::min(to, s.size());
    for (std::size_t i = from; i < end; ++i) {
        p *= static_cast<double>(s[i]);
    }
    return p;
}

void add(const char* op, double flops) {
    std::lock_guard lock(totalsMutex);
    if (!current) {
        return;
    }
    const double perExample = flops / batchSize;
    (inBackward ? current->backward : current->forward) += perExample;
    current->byOp[op] += perExample;
}

// Forward FLOPs of attention from q [..., L, E], k [..., S, E], v [..., S, Ev]: Q K^T and P V.
double attentionFlops(const std::vector<std::int64_t>& q, const std::vector<std::int64_t>& k,
                      const std::vector<std::int64_t>& v) {
    if (q.size() < 2 || k.size() < 2 || v.size() < 2) {
        return 0;
    }
    const double batch = product(q, 0, q.size() - 2);
    const double l = static_cast<double>(q[q.size() - 2]), e = static_cast<double>(q.back());
    const double s = static_cast<double>(k[k.size() - 2]), ev = static_cast<double>(v.back());
    return 2 * batch * l * s * e + 2 * batch * l * s * ev;
}

// A convolution's forward FLOPs from its output (or grad_output) and weight shapes.
double convFlops(const std::vector<std::int64_t>& out, const std::vector<std::int64_t>& weight, bool transposed,
                 const std::vector<std::int64_t>& in) {
    if (weight.size() < 3) {
        return 0;
    }
    if (transposed) { // weight [Cin, Cout/groups, k...]: every input element meets Cout/groups x k
        return 2 * product(in) * product(weight, 1);
    }
    return 2 * product(out) * product(weight, 1); // weight [Cout, Cin/groups, k...]
}

// One direction of one recurrent layer (CPU LSTMs run as oneDNN's mkldnn_rnn_layer): input
// [T, B, I] (or batch first), W_ih [G·H, I], W_hh [G·H, H], both products at every step.
double recurrentFlops(const std::vector<std::int64_t>& input, const std::vector<std::int64_t>& wIh,
                      const std::vector<std::int64_t>& wHh) {
    if (input.empty() || wIh.size() != 2 || wHh.size() != 2) {
        return 0;
    }
    const double steps = product(input) / static_cast<double>(input.back()); // T x B
    return 2 * steps * (product(wIh) + product(wHh));
}

struct Counted : at::ObserverContext {
    bool outermost = false;
    std::vector<std::int64_t> weight, input; // convolution: counted at its end, from the output
    bool transposed = false;
};

bool startsWith(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

bool isCounted(const char* name) {
    static const char* const kOps[] = {"aten::mm",
                                       "aten::addmm",
                                       "aten::bmm",
                                       "aten::baddbmm",
                                       "aten::convolution",
                                       "aten::convolution_backward",
                                       "aten::scaled_dot_product_attention",
                                       "aten::mkldnn_rnn_layer",
                                       "aten::mkldnn_rnn_layer_backward"};
    for (const char* op : kOps) {
        if (std::strcmp(name, op) == 0) {
            return true;
        }
    }
    return startsWith(name, "aten::_scaled_dot_product") && std::strstr(name, "_backward") != nullptr;
}

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn) {
    const char* name = fn.name();
    if (!isCounted(name)) {
        return nullptr;
    }
    auto ctx = std::make_unique<Counted>();
    ctx->outermost = countedDepth++ == 0;
    if (!ctx->outermost) {
        return ctx;
    }
    const auto in = fn.inputs();
    auto at = [&](std::size_t i) { return i < in.size() ? sizesOf(in[i]) : std::vector<std::int64_t>{}; };
    if (std::strcmp(name, "aten::mm") == 0 || std::strcmp(name, "aten::bmm") == 0 ||
        std::strcmp(name, "aten::addmm") == 0 || std::strcmp(name, "aten::baddbmm") == 0) {
        const bool withBias = name[6] == 'a' || (name[6] == 'b' && name[7] == 'a'); // addmm, baddbmm
        const auto a = at(withBias ? 1 : 0), b = at(withBias ? 2 : 1);
        if (a.size() >= 2 && b.size() >= 2) {
            add(name, 2 * product(a) * static_cast<double>(b.back()));
        }
    } else if (std::strcmp(name, "aten::convolution") == 0) {
        ctx->input = at(0);
        ctx->weight = at(1);
        ctx->transposed = in.size() > 6 && in[6].isBool() && in[6].toBool();
    } else if (std::strcmp(name, "aten::convolution_backward") == 0) {
        const bool transposed = in.size() > 7 && in[7].isBool() && in[7].toBool();
        const double forward = convFlops(at(0), at(2), transposed, at(1));
        int grads = 2; // input and weight gradients unless output_mask says otherwise
        if (in.size() > 10 && in[10].isBoolList()) {
            const auto mask = in[10].toBoolList();
            grads = (mask.size() > 0 && mask.get(0) ? 1 : 0) + (mask.size() > 1 && mask.get(1) ? 1 : 0);
        }
        add(name, forward * grads);
    } else if (std::strcmp(name, "aten::scaled_dot_product_attention") == 0) {
        add(name, attentionFlops(at(0), at(1), at(2)));
    } else if (std::strcmp(name, "aten::mkldnn_rnn_layer") == 0) {
        add(name, recurrentFlops(at(0), at(1), at(2)));
    } else if (std::strcmp(name, "aten::mkldnn_rnn_layer_backward") == 0) {
        add(name, 2 * recurrentFlops(at(0), at(1), at(2))); // input and weight gradients
    } else { // an attention kernel's backward (grad_out, query, key, value, ...): dQ, dK, dV, dP
        add(name, 2 * attentionFlops(at(1), at(2), at(3)));
    }
    return ctx;
}

void onEnd(const at::RecordFunction& fn, at::ObserverContext* base) {
    auto* ctx = static_cast<Counted*>(base);
    if (!ctx) {
        return;
    }
    --countedDepth;
    if (ctx->outermost && !ctx->weight.empty() && !fn.outputs().empty()) {
        add(fn.name(), convFlops(sizesOf(fn.outputs()[0]), ctx->weight, ctx->transposed, ctx->input));
    }
}

torch::Tensor exampleInput(const WorkloadImpl& w, const ModelOptions& options, std::int64_t batch, at::Generator& gen) {
    std::vector<std::int64_t> shape{batch};
    if (w.info.input == DataKind::Images) {
        shape.insert(shape.end(), w.info.inputShape.begin(), w.info.inputShape.end());
        return torch::randn(shape, gen);
    }
    auto t = w.info.inputShape.empty() ? 1 : w.info.inputShape[0];
    if (w.task == Task::LanguageModel) {
        --t; // T+1 tokens per example: the network sees T
    }
    const auto vocabulary = options.vocabulary > 0 ? options.vocabulary : std::max(2, w.info.vocabulary);
    return torch::randint(vocabulary, {batch, t}, gen, torch::kLong);
}

} // namespace

FlopCount countTrainingFlops(const std::string& workload, const ModelOptions& options, std::int64_t batch) {
    const auto& w = workloadImpl(workload);
    std::lock_guard one(countMutex);
    auto gen = at::detail::createCPUGenerator(1);
    // Counted on ATen's plain ops: the CPU's one-pass paths (tokenLstm's gather, the fused
    // pool) compute the same network, in ops the counter has no formula for.
    auto plain = options;
    plain.fast = FastPaths{};
    auto net = w.makeModel(gen, plain);
    net->gen = gen;
    net->train();
    const auto x = exampleInput(w, options, batch, gen);
    FlopCount count;
    {
        std::lock_guard lock(totalsMutex);
        current = &count;
        inBackward = false;
        batchSize = static_cast<double>(batch);
    }
    const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(onStart, onEnd)
                                                       .needsInputs(true)
                                                       .needsOutputs(true)
                                                       .scopes({at::RecordScope::FUNCTION}));
    try {
        const auto logits = net->forward(x).to(torch::kFloat32);
        const auto loss = logits.square().mean();
        {
            std::lock_guard lock(totalsMutex);
            inBackward = true;
        }
        loss.backward();
    } catch (...) {
        at::removeCallback(handle);
        std::lock_guard lock(totalsMutex);
        current = nullptr;
        throw;
    }
    at::removeCallback(handle);
    std::lock_guard lock(totalsMutex);
    current = nullptr;
    return count;
}

std::optional<double> countedFlopsPerSample(const std::string& workload, int vocabulary) {
    try {
        ModelOptions options;
        options.vocabulary = vocabulary;
        return trainingFlopsPerExample(workload, options);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

double trainingFlopsPerExample(const std::string& workload, const ModelOptions& options) {
    static std::mutex mutex;
    static std::map<std::tuple<std::string, bool, int>, double> known;
    const auto key = std::make_tuple(workload, options.fusedLstm, options.vocabulary);
    {
        std::lock_guard lock(mutex);
        if (auto it = known.find(key); it != known.end()) {
            return it->second;
        }
    }
    // Counted on a thread of its own: the model's forward and backward run OpenMP regions, and
    // a team made on a long-lived thread (the race's main thread) keeps its idle worker threads.
    // libgomp counts them against the CPUs and then stops spinning for every team (its
    // throttled spin count): a framework lane's count cost the 2-thread lane after it 25%.
    double flops = 0;
    std::exception_ptr failed;
    std::thread([&] {
        try {
            flops = countTrainingFlops(workload, options).perExample();
        } catch (...) {
            failed = std::current_exception();
        }
    }).join();
    if (failed) {
        std::rethrow_exception(failed);
    }
    std::lock_guard lock(mutex);
    known[key] = flops;
    return flops;
}

} // namespace devicerace::detail
