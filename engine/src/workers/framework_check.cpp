#include "devicerace/frameworks.h"

#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <mutex>

#include "devicerace/errors.h"
#include "devicerace/lane_spec.h"
#include "util/text_util.h"
#include "workers/child_process.h"
#include "workers/worker_connection.h"

namespace devicerace {
namespace {

std::mutex g_mutex;
std::map<std::string, std::string, std::less<>> g_answers;

// The modules of `needs` that the lane Python cannot find, or throws Error when it cannot ask.
std::string missingModules(const std::vector<std::string>& needs) {
    std::vector<std::string> argv{detail::pythonProgram(), "-c",
                                  "import importlib.util, sys\n"
                                  "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"};
    argv.insert(argv.end(), needs.begin(), needs.end());
    detail::ChildProcess child(argv); // throws UsageError when the Python is missing
    child.closeStdin();
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            throw Error(fmt::format("{} did not answer within 10 s", detail::pythonProgram()));
        }
        pollfd p{child.stdoutFd(), POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
            continue;
        }
        char buf[512];
        const auto n = ::read(child.stdoutFd(), buf, sizeof buf);
        if (n <= 0) {
            break;
        }
        out.append(buf, static_cast<std::size_t>(n));
        if (out.size() > 4096) {
            break;
        }
    }
    for (int i = 0; i < 200; ++i) { // the child exits right after its line
        if (auto status = child.tryWait()) {
            if (*status != 0) {
                throw Error(fmt::format("{} could not check its modules ({})", detail::pythonProgram(),
                                        detail::describeWaitStatus(*status)));
            }
            return std::string(trim(out));
        }
        ::usleep(10000);
    }
    throw Error(fmt::format("{} did not exit after answering", detail::pythonProgram()));
}

std::string ask(std::string_view framework) {
    const auto program = frameworkProgram(framework);
    if (!program) {
        return fmt::format("framework={}: no such lane program (expected devicerace, pytorch, keras-jax, "
                           "keras-tensorflow or keras-torch)",
                           framework);
    }
    std::string missing;
    try {
        missing = missingModules(program->needs);
    } catch (const std::exception& e) {
        return fmt::format("framework={}: cannot ask the lane programs' Python: {}", framework, e.what());
    }
    if (missing.empty()) {
        return {};
    }
    const auto names = splitString(missing, ' ');
    std::string list;
    for (std::size_t i = 0; i < names.size(); ++i) {
        list += (i ? ", " : "") + std::string(names[i]);
    }
    const bool torch = framework == "pytorch";
    return fmt::format("framework={}: {} {} not installed for {}; run {}", framework, list,
                       names.size() == 1 ? "is" : "are", detail::pythonProgram(),
                       torch ? "scripts/setup (it installs the pinned torch into .venv)"
                             : "scripts/setup --frameworks (it installs the pinned keras, jax and tensorflow-cpu "
                               "into .venv)");
}

} // namespace

std::string localFrameworkProblem(const LaneSpec& spec) {
    if (!spec.framework || spec.cmd || !spec.host.empty() || !spec.members.empty()) {
        return {};
    }
    return frameworkProblem(*spec.framework);
}

std::string frameworkProblem(std::string_view framework) {
    if (framework.empty() || framework == "devicerace") {
        return {};
    }
    {
        std::lock_guard lock(g_mutex);
        if (auto it = g_answers.find(framework); it != g_answers.end()) {
            return it->second;
        }
    }
    // Asked without the lock: knownFrameworkProblem (the window's GUI thread) never waits on
    // a Python start-up. Two threads asking at once both ask; the first answer is kept.
    auto answer = ask(framework);
    std::lock_guard lock(g_mutex);
    return g_answers.emplace(std::string(framework), std::move(answer)).first->second;
}

std::optional<std::string> knownFrameworkProblem(const LaneSpec& spec) {
    if (!spec.framework || spec.cmd || !spec.host.empty() || !spec.members.empty() || *spec.framework == "devicerace") {
        return std::string();
    }
    std::lock_guard lock(g_mutex);
    if (auto it = g_answers.find(*spec.framework); it != g_answers.end()) {
        return it->second;
    }
    return std::nullopt;
}

void forgetFrameworkAnswers() {
    std::lock_guard lock(g_mutex);
    g_answers.clear();
}

} // namespace devicerace
