// A data-parallel rank: rendezvous, process group, bucketed gradient averaging (dist_group.h).
#include "train/dist_group.h"
#include "train/rank_liveness.h"

#include <cstdlib>
#include <ATen/Functions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#ifdef DEVICERACE_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DEVICERACE_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <fmt/format.h>

#include <map>
#include <thread>

#include <unistd.h>

#include "devicerace/environment.h"
#include "devicerace/errors.h"
#include "train/store_holder.h"
#include "util/host_name.h"

namespace devicerace::detail {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// DDP's bucket sizes: a small first bucket (the last layers' gradients are ready first, so
// communication starts early), then ~25 MB buckets.
constexpr std::int64_t kFirstBucketBytes = 1 << 20;
constexpr std::int64_t kBucketBytes = 25 << 20;
// Flags appended to the first bucket: report, stop, pause.
constexpr std::int64_t kFlags = 3;
// How long one collective may take before Gloo gives up (rank 0's evaluation runs while the
// others wait in their next step's allreduce). A rank that dies usually ends the others'
// collectives at once (its sockets close), but not always: a send waiting for the dead rank's
// receive stays (train/rank_liveness.h watches for that); a rank that hangs is caught by the
// parent's supervision first.
constexpr auto kCollectiveTimeout = std::chrono::minutes(30);
// How often a rank waiting in a Gloo collective looks whether its peers' processes still exist:
// Gloo does not always notice a dead peer (train/rank_liveness.h).
constexpr auto kLivenessPoll = std::chrono::milliseconds(200);
// Store keys (each lane has its own store).
const std::string kGo = "devicerace/go";
std::string joinedKey(int rank) { return fmt::format("devicerace/joined/{}", rank); }

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

} // namespace

std::string peerLostMessage(const std::string& what) { return "lost a peer rank: " + what; }

std::shared_ptr<void> serveRendezvousStore(double timeoutSeconds, int* port) {
    c10d::TCPStoreOptions opts;
    opts.port = 0; // a free port; the parent passes it on to the other ranks
    opts.isServer = true;
    opts.waitWorkers = false;
    opts.timeout = milliseconds(static_cast<std::int64_t>(timeoutSeconds * 1000));
    try {
        auto holder = std::make_shared<StoreHolder>();
        holder->store = c10::make_intrusive<c10d::TCPStore>("0.0.0.0", opts);
        *port = holder->store->getPort();
        return holder;
    } catch (const std::exception& e) {
        throw Error(fmt::format("rank 0 cannot start the rendezvous store: {}", e.what()));
    }
}

struct DistGroup::Impl {
    struct Bucket {
        std::vector<std::size_t> params; // indices into `params`
        std::vector<std::int64_t> offsets;
        std::int64_t numel = 0; // gradient elements (flags come after, bucket 0)
        at::Tensor flat;
        std::size_t pending = 0; // gradients still to arrive this step
        c10::intrusive_ptr<c10d::Work> work;
    };

    c10::Device device{c10::kCPU};
    std::string backendName;
    c10::intrusive_ptr<c10d::TCPStore> store;
    c10::intrusive_ptr<c10d::Backend> pg;
    std::unique_ptr<RankLiveness> liveness; // Gloo: the other ranks' processes, watched
    bool abandoned = false;                 // a collective still waits on a dead rank: the group cannot be destroyed
    std::vector<at::Tensor> params;
    std::vector<std::size_t> bucketOf, slotOf;
    std::vector<char> arrived;
    std::vector<Bucket> buckets;
    std::size_t nextLaunch = 0;
    double waited = 0;
    // CUDA: the flags travel to the host without blocking; read two steps later.
    std::array<at::Tensor, 2> hostFlags;
    std::array<bool, 2> hostFlagsSet{false, false};
    int flagSlot = 0;

    // Waits for a collective; with Gloo, gives up once a rank it may wait on has ended (Gloo
    // may not notice). Throws what the collective threw, or Error naming the rank that ended.
    void await(const c10::intrusive_ptr<c10d::Work>& work) {
        if (!liveness) {
            work->wait();
            return;
        }
        while (true) {
            try {
                work->wait(kLivenessPoll);
                return;
            } catch (const std::exception&) {
                if (work->isCompleted()) {
                    throw; // the collective's own failure
                }
            }
            if (const auto lost = liveness->lostRank()) {
                abandoned = true;
                throw Error(fmt::format("rank {}'s process ended while rank {} waited for it in a collective", *lost,
                                        liveness->rank()));
            }
        }
    }

    void launchReady() {
        while (nextLaunch < buckets.size() && buckets[nextLaunch].pending == 0) {
            auto& b = buckets[nextLaunch++];
            std::vector<at::Tensor> tensors{b.flat};
            b.work = pg->allreduce(tensors);
        }
    }

    void onGradient(std::size_t i, const at::Tensor& grad) {
        auto& b = buckets[bucketOf[i]];
        const auto& p = params[i];
        b.flat.narrow(0, b.offsets[slotOf[i]], p.numel()).copy_(grad.reshape({-1}));
        arrived[i] = 1;
        if (--b.pending == 0) {
            launchReady();
        }
    }
};

DistGroup::DistGroup(const DistConfig& config, const c10::Device& device) : m_impl(std::make_unique<Impl>()) {
    auto& d = *m_impl;
    m_rank = config.rank;
    m_world = config.world;
    d.device = device;
    d.backendName = config.backend;
    const auto timeout = milliseconds(static_cast<std::int64_t>(config.timeoutSeconds * 1000));
    const auto where = fmt::format("{}:{}", config.storeHost, config.storePort);
    if (m_rank == 0) {
        auto holder = std::static_pointer_cast<StoreHolder>(config.store);
        if (!holder || !holder->store) {
            throw Error("rank 0 has no rendezvous store");
        }
        d.store = holder->store;
    } else {
        c10d::TCPStoreOptions opts;
        opts.port = static_cast<std::uint16_t>(config.storePort);
        opts.isServer = false;
        opts.waitWorkers = false;
        opts.timeout = timeout;
        try {
            d.store = c10::make_intrusive<c10d::TCPStore>(config.storeHost, opts);
        } catch (const std::exception& e) {
            throw Error(fmt::format("rank {} cannot reach rank 0's rendezvous store at {} within {:.0f} s "
                                    "(is that address reachable from here? name it with master=ADDR): {}",
                                    m_rank, where, config.timeoutSeconds, e.what()));
        }
    }
    // Every rank says it arrived; rank 0 waits for all of them and names the missing ones.
    const auto host = hostName();
    d.store->set(joinedKey(m_rank), std::vector<std::uint8_t>(host.begin(), host.end()));
    if (m_rank == 0) {
        const auto deadline = Clock::now() + timeout;
        std::vector<int> missing;
        while (true) {
            missing.clear();
            for (int r = 1; r < m_world; ++r) {
                if (!d.store->check({joinedKey(r)})) {
                    missing.push_back(r);
                }
            }
            if (missing.empty() || Clock::now() > deadline) {
                break;
            }
            std::this_thread::sleep_for(milliseconds(50));
        }
        if (!missing.empty()) {
            std::string names;
            for (int r : missing) {
                names += (names.empty() ? "" : ", ") + std::to_string(r);
            }
            throw Error(fmt::format("rendezvous timed out after {:.0f} s: rank{} {} never arrived",
                                    config.timeoutSeconds, missing.size() > 1 ? "s" : "", names));
        }
        d.store->set(kGo, std::vector<std::uint8_t>{1});
    } else {
        try {
            d.store->wait({kGo}, timeout);
        } catch (const std::exception& e) {
            throw Error(fmt::format("rendezvous timed out after {:.0f} s: rank {} reached rank 0's store at {}, but "
                                    "not every rank did",
                                    config.timeoutSeconds, m_rank, where));
        }
    }
    if (config.backend != "nccl" && m_world > 1) {
        d.liveness = std::make_unique<RankLiveness>(*d.store, m_rank, m_world, config.storeHost, config.timeoutSeconds);
    }
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("devicerace/pg", d.store);
    try {
        if (config.backend == "nccl") {
#ifdef DEVICERACE_WITH_NCCL
            auto opts = c10d::ProcessGroupNCCL::Options::create();
            opts->timeout = kCollectiveTimeout;
            d.pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, m_rank, m_world, opts);
#else
            throw Error("this DeviceRace was built without NCCL (backend=gloo for CPU ranks)");
#endif
        } else {
#ifdef DEVICERACE_WITH_GLOO
            auto opts = c10d::ProcessGroupGloo::Options::create(kCollectiveTimeout);
            opts->devices.push_back(config.bindHost.empty()
                                        ? c10d::ProcessGroupGloo::createDefaultDevice()
                                        : c10d::ProcessGroupGloo::createDeviceForHostname(config.bindHost));
            d.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, m_rank, m_world, opts);
#else
            throw Error("this DeviceRace was built without gloo's headers (Debian: libgloo-dev), so it has no "
                        "data-parallel CPU lanes");
#endif
        }
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error(fmt::format("rank {} could not form the {} process group: {}", m_rank, config.backend, e.what()));
    }
}

DistGroup::~DistGroup() {
    if (m_impl->abandoned) {
        // Destroying the group joins its threads, one of which waits for the dead rank until the
        // collective timeout (30 minutes): the group is left to the process's end instead (a
        // rank's process is about to end: its lane failed).
        (void)m_impl->pg.release();
    }
}

std::string DistGroup::describe() const {
    if (m_world == 1) {
        return fmt::format("data-parallel: a {} group of 1 rank (no communication)", m_impl->backendName);
    }
    return fmt::format("data-parallel: {} over {} ranks, {} gradient bucket{}", m_impl->backendName, m_world,
                       m_impl->buckets.size(), m_impl->buckets.size() == 1 ? "" : "s");
}

void DistGroup::broadcast(const std::vector<at::Tensor>& tensors) {
    if (m_world == 1) {
        return;
    }
    // One broadcast per dtype, flattened (a model has dozens of small tensors).
    std::map<at::ScalarType, std::vector<at::Tensor>> byType;
    for (const auto& t : tensors) {
        if (t.defined() && t.numel() > 0) {
            byType[t.scalar_type()].push_back(t);
        }
    }
    try {
        for (auto& [type, group] : byType) {
            std::vector<at::Tensor> flats;
            for (const auto& t : group) {
                flats.push_back(t.detach().reshape({-1}));
            }
            std::vector<at::Tensor> flat{at::cat(flats)};
            m_impl->await(m_impl->pg->broadcast(flat, c10d::BroadcastOptions{}));
            std::int64_t offset = 0;
            at::NoGradGuard noGrad;
            for (auto& t : group) {
                t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
                offset += t.numel();
            }
        }
    } catch (const std::exception& e) {
        throw Error(peerLostMessage(fmt::format("the initial weights did not arrive from rank 0: {}", e.what())));
    }
}

void DistGroup::attach(const std::vector<at::Tensor>& params) {
    auto& d = *m_impl;
    if (m_world == 1) {
        return; // a group of one communicates nothing (the 1-worker baseline of a scaling race)
    }
    for (const auto& p : params) {
        if (p.requires_grad()) {
            d.params.push_back(p);
        }
    }
    if (d.params.empty()) {
        throw Error("a data-parallel lane needs trainable parameters");
    }
    const auto type = d.params.front().scalar_type();
    d.bucketOf.assign(d.params.size(), 0);
    d.slotOf.assign(d.params.size(), 0);
    d.arrived.assign(d.params.size(), 0);
    // Reverse order: the backward pass produces the last layers' gradients first.
    std::int64_t bytes = 0;
    for (std::size_t k = d.params.size(); k-- > 0;) {
        const auto& p = d.params[k];
        if (p.scalar_type() != type) {
            throw Error("a data-parallel lane needs parameters of one type");
        }
        const auto cap = d.buckets.size() <= 1 ? kFirstBucketBytes : kBucketBytes;
        if (d.buckets.empty() || (bytes > 0 && bytes + p.nbytes() > static_cast<std::size_t>(cap))) {
            d.buckets.emplace_back();
            bytes = 0;
        }
        auto& b = d.buckets.back();
        d.bucketOf[k] = d.buckets.size() - 1;
        d.slotOf[k] = b.params.size();
        b.params.push_back(k);
        b.offsets.push_back(b.numel);
        b.numel += p.numel();
        bytes += static_cast<std::int64_t>(p.nbytes());
    }
    for (std::size_t i = 0; i < d.buckets.size(); ++i) {
        auto& b = d.buckets[i];
        b.flat = at::zeros({b.numel + (i == 0 ? kFlags : 0)}, d.params.front().options().requires_grad(false));
    }
    for (std::size_t k = 0; k < d.params.size(); ++k) {
        d.params[k].register_hook([impl = m_impl.get(), k](const at::Tensor& grad) { impl->onGradient(k, grad); });
    }
    if (d.device.is_cuda()) {
        for (auto& h : d.hostFlags) {
            h = at::zeros({kFlags}, at::TensorOptions().dtype(type).pinned_memory(true));
        }
    }
}

void DistGroup::beginStep(bool wantReport, bool wantStop, bool wantPause) {
    auto& d = *m_impl;
    if (m_world == 1) {
        m_agreed = {wantReport, wantStop, wantPause};
        return;
    }
    for (auto& b : d.buckets) {
        b.pending = b.params.size();
        b.work.reset();
    }
    std::fill(d.arrived.begin(), d.arrived.end(), 0);
    d.nextLaunch = 0;
    const std::array<float, kFlags> flags{m_rank == 0 && wantReport ? 1.0f : 0.0f, wantStop ? 1.0f : 0.0f,
                                          wantPause ? 1.0f : 0.0f};
    auto tail = d.buckets.front().flat.narrow(0, d.buckets.front().numel, kFlags);
    if (d.device.is_cuda()) {
        tail.copy_(at::tensor(std::vector<float>(flags.begin(), flags.end())).to(tail.scalar_type()), true);
    } else {
        for (std::int64_t i = 0; i < kFlags; ++i) {
            tail[i].fill_(flags[static_cast<std::size_t>(i)]);
        }
    }
}

void DistGroup::finishGradients() {
    auto& d = *m_impl;
    if (m_world == 1) {
        return; // alone: the gradients are the average; beginStep set the agreement
    }
    const auto t0 = Clock::now();
    try {
        // A parameter the step did not use has no gradient: zeros, as DDP would average.
        for (std::size_t k = 0; k < d.params.size(); ++k) {
            if (!d.arrived[k]) {
                auto& b = d.buckets[d.bucketOf[k]];
                b.flat.narrow(0, b.offsets[d.slotOf[k]], d.params[k].numel()).zero_();
                --b.pending;
            }
        }
        d.launchReady();
        for (auto& b : d.buckets) {
            d.await(b.work);
        }
    } catch (const std::exception& e) {
        throw Error(peerLostMessage(e.what()));
    }
    d.waited += seconds(Clock::now() - t0);
    at::NoGradGuard noGrad;
    const double scale = 1.0 / m_world;
    for (auto& b : d.buckets) {
        auto grads = b.flat.narrow(0, 0, b.numel);
        grads.mul_(scale);
        for (std::size_t j = 0; j < b.params.size(); ++j) {
            auto& p = d.params[b.params[j]];
            auto avg = grads.narrow(0, b.offsets[j], p.numel()).view(p.sizes());
            if (p.grad().defined()) {
                p.mutable_grad().copy_(avg);
            } else {
                p.mutable_grad() = avg.clone();
            }
        }
    }
    auto tail = d.buckets.front().flat.narrow(0, d.buckets.front().numel, kFlags);
    at::Tensor flags;
    if (d.device.is_cuda()) {
        // This step's flags go to a pinned slot; the agreement read is the one from two steps ago.
        const int slot = d.flagSlot;
        d.flagSlot = 1 - slot;
        if (d.hostFlagsSet[d.flagSlot]) {
            flags = d.hostFlags[d.flagSlot].clone();
        }
        d.hostFlags[slot].copy_(tail, true);
        d.hostFlagsSet[slot] = true;
        if (!flags.defined()) {
            m_agreed = {};
            return;
        }
    } else {
        flags = tail;
    }
    auto f = flags.to(at::kFloat).contiguous();
    const float* v = f.data_ptr<float>();
    m_agreed = {v[0] > 0.5f, v[1] > 0.5f, v[2] > 0.5f};
}

std::vector<DistGroup::Stats> DistGroup::gather(const Stats& mine) {
    auto& d = *m_impl;
    if (m_world == 1) {
        return {mine};
    }
    auto table = at::zeros({m_world, kStats}, at::TensorOptions().dtype(at::kDouble));
    for (int i = 0; i < kStats; ++i) {
        table[m_rank][i].fill_(mine[static_cast<std::size_t>(i)]);
    }
    std::vector<at::Tensor> tensors{d.device.is_cuda() ? table.to(d.device) : table};
    try {
        d.await(d.pg->allreduce(tensors));
    } catch (const std::exception& e) {
        throw Error(peerLostMessage(e.what()));
    }
    auto all = tensors[0].cpu().contiguous();
    const double* v = all.data_ptr<double>();
    std::vector<Stats> out(static_cast<std::size_t>(m_world));
    for (int r = 0; r < m_world; ++r) {
        for (int i = 0; i < kStats; ++i) {
            out[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] = v[r * kStats + i];
        }
    }
    return out;
}

double DistGroup::takeWaitSeconds() {
    const double w = m_impl->waited;
    m_impl->waited = 0;
    return w;
}

} // namespace devicerace::detail

namespace devicerace {

double rendezvousTimeout(bool remote) {
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_RENDEZVOUS_TIMEOUT"); env && *env) {
        try {
            const double v = std::stod(env);
            if (v >= 1 && v <= 3600) {
                return v;
            }
        } catch (const std::exception&) {
        }
    }
    return remote ? 120 : 60;
}

} // namespace devicerace
