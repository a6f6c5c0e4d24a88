// The table of DEVICERACE_* environment variables (see devicerace/environment.h).
#include "devicerace/environment.h"

#include <array>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace devicerace {

namespace {

constexpr std::array kSwitches = {
    EnvironmentSwitch{"DEVICERACE_ATTACH_TOKEN", "users",
                      "the token an attach:// lane's ranks present (instead of its token_file= key's file)"},
    EnvironmentSwitch{"DEVICERACE_BF16_CONV", "tests",
                      "bf16 or fp32: a bf16 lane's convolutions on bf16 operands, or on their bf16 values in fp32, "
                      "instead of the arithmetic timed faster per shape where bf16 is slower than fp32 (measure)"},
    EnvironmentSwitch{"DEVICERACE_BF16_DENSE", "benchmarks",
                      "0: a bf16 lane's dense layers by autocast's linear (oneDNN's bf16 matmul), not each GEMM "
                      "shape's fastest route"},
    EnvironmentSwitch{"DEVICERACE_BF16_IN_F32", "benchmarks",
                      "0: a bf16 fused step (transformer, dense) whose GEMMs run in fp32 still writes their inputs "
                      "as bf16 and widens them, not as bf16 values in fp32 storage"},
    EnvironmentSwitch{"DEVICERACE_BF16_NARROW", "benchmarks",
                      "0: the fused transformer step's bf16 copies by the integer rounding, not AVX-512 BF16's "
                      "conversion instruction"},
    EnvironmentSwitch{"DEVICERACE_BF16_ROUTE", "tests",
                      "mkl, onednn, amx, avx512 or fp32: every bf16 GEMM of the fused steps and of a bf16 lane's dense "
                      "layers by that route instead of the fastest timed one (measure: time them)"},
    EnvironmentSwitch{"DEVICERACE_BREAKDOWN", "benchmarks", "0: no step breakdown timing (its cost measured alone)"},
    EnvironmentSwitch{"DEVICERACE_CACHE_DIR", "users",
                      "where measured GEMM peaks, bf16 GEMM routes and conv weight-gradient picks are kept "
                      "(default $XDG_CACHE_HOME/devicerace or ~/.cache/devicerace)"},
    EnvironmentSwitch{"DEVICERACE_CLI", "users",
                      "the devicerace-cli a worker lane starts (default: the one beside this)"},
    EnvironmentSwitch{"DEVICERACE_CONV_WGRAD", "tests",
                      "0: oneDNN's convolution weight gradient everywhere; gemm: the engine's for every shape "
                      "(im2col + GEMM in fp32, the AVX-512 BF16 kernel in bf16; default: the path timed faster "
                      "per shape)"},
    EnvironmentSwitch{"DEVICERACE_CONV_WGRAD_LOG", "benchmarks", "1: print each convolution weight-gradient pick"},
    EnvironmentSwitch{"DEVICERACE_CPU_ATTENTION", "benchmarks",
                      "tiles or bmm: the fused transformer step's attention by that path"},
    EnvironmentSwitch{"DEVICERACE_DENSE_BALANCE", "benchmarks",
                      "0: even thread shares in the fused dense step; a fraction in (0, 1): thread 0's fixed share"},
    EnvironmentSwitch{"DEVICERACE_DENSE_SPLIT", "benchmarks",
                      "0: the fused dense step runs each op on the whole batch (the GEMM library's threads)"},
    EnvironmentSwitch{"DEVICERACE_DENSE_STEP", "benchmarks", "0: no fused dense step (autograd, fused optimizer)"},
    EnvironmentSwitch{"DEVICERACE_FASHION_MNIST", "users", "the Fashion-MNIST folder (default: Debian's package)"},
    EnvironmentSwitch{"DEVICERACE_FUSED_CELL", "benchmarks", "0: torch::nn::LSTMCell instead of the one-pass cell"},
    EnvironmentSwitch{"DEVICERACE_FUSED_EVAL", "tests",
                      "0: a lane with the fused transformer step evaluates through its module (autograd-free "
                      "ATen ops, the dense layers' evaluation routes) instead of the step's own forward"},
    EnvironmentSwitch{"DEVICERACE_FUSED_NORM", "benchmarks",
                      "0: ATen's batch norm, add and relu instead of the one-pass ones"},
    EnvironmentSwitch{"DEVICERACE_GPT_SPLIT", "benchmarks",
                      "0: the fused transformer step runs the whole batch, each GEMM and loop on the lane's threads, "
                      "instead of each thread its share of the sequences"},
    EnvironmentSwitch{"DEVICERACE_HELLO_TIMEOUT", "users", "seconds a worker lane waits for its worker's hello"},
    EnvironmentSwitch{"DEVICERACE_HOST_MEMORY_LIMIT", "tests",
                      "the most host memory the lanes' tensors may take (bytes, or with K, M, G): a lane past it "
                      "fails as out of memory"},
    EnvironmentSwitch{"DEVICERACE_KEEP_DENORMALS", "benchmarks", "set: CPU lanes keep denormals (no flush to zero)"},
    EnvironmentSwitch{"DEVICERACE_KEEP_MALLOC", "benchmarks", "set: no caching host allocator (glibc's malloc)"},
    EnvironmentSwitch{"DEVICERACE_LANES", "users", "the folder of the lane programs (lanes/python)"},
    EnvironmentSwitch{"DEVICERACE_OMP_WAIT", "internal",
                      "the wait policy a race chose for its lanes' processes (spin or passive)"},
    EnvironmentSwitch{"DEVICERACE_POWERCAP_ROOT", "tests", "the powercap folder energy is read from (a fake one)"},
    EnvironmentSwitch{"DEVICERACE_PRESETS", "users", "a folder of preset files beside the shipped ones"},
    EnvironmentSwitch{"DEVICERACE_PYTHON", "users", "the Python the framework lanes run on"},
    EnvironmentSwitch{"DEVICERACE_RENDEZVOUS_TIMEOUT", "users",
                      "seconds data-parallel ranks wait for each other (1-3600; default 60, 120 with remote ranks)"},
    EnvironmentSwitch{"DEVICERACE_SERIAL_MKL", "benchmarks",
                      "0: MKL, called by a worker of a parallel region, keeps the lane's thread count (and splits "
                      "the sums of a product of few rows)"},
    EnvironmentSwitch{"DEVICERACE_SSH_CONFIG", "tests", "the ssh config file ssh lanes use (ssh -F)"},
    EnvironmentSwitch{"DEVICERACE_STARTUP_TIMING", "benchmarks",
                      "set: the window times its start to the first drawn frame (exit: then quits)"},
    EnvironmentSwitch{"DEVICERACE_TEST_HASHED_DROPOUT", "tests",
                      "1: fused=false lanes draw the fast paths' dropout masks (the two paths compared step by step)"},
    EnvironmentSwitch{"DEVICERACE_TEST_NO_DROPOUT", "tests", "1: no dropout (steps deterministic in the batch split)"},
    EnvironmentSwitch{"DEVICERACE_TEXT_CORPUS", "users", "the text file char-gpt and charlstm train on"},
    EnvironmentSwitch{"DEVICERACE_TOKEN_LSTM", "benchmarks", "0: torch::nn::LSTM over one-hot vectors"},
    EnvironmentSwitch{"DEVICERACE_WEIGHTS_DIGEST", "tests",
                      "a folder: each finished lane writes its parameters' digest"},
};

} // namespace

std::span<const EnvironmentSwitch> environmentSwitches() { return kSwitches; }

const char* environmentSwitch(std::string_view name) {
    for (const auto& s : kSwitches) {
        if (name == s.name) {
            return std::getenv(s.name);
        }
    }
    throw std::logic_error("no such DeviceRace environment switch: " + std::string(name));
}

} // namespace devicerace
