#include "train/fault.h"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "devicerace/errors.h"

namespace devicerace::detail {

void injectFault(const Fault& fault) {
    if (fault.kind == "slow-data") {
        return;
    }
    if (fault.kind == "throw") {
        throw Error(fmt::format("injected fault at step {}", fault.step));
    }
    std::fprintf(stderr, "devicerace: injecting fault '%s' at step %lld\n", fault.kind.c_str(),
                 static_cast<long long>(fault.step));
    std::fflush(stderr);
    if (fault.kind == "abort") {
        std::abort();
    }
    if (fault.kind == "segv") {
        std::raise(SIGSEGV);
    }
    if (fault.kind == "exit") {
        std::_Exit(42);
    }
    while (fault.kind == "hang") {
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
}

} // namespace devicerace::detail
