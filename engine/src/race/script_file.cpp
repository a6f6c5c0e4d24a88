#include "race/script_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

namespace devicerace::detail {

namespace fs = std::filesystem;

std::optional<std::string> pythonScriptOf(const std::vector<std::string>& command) {
    static const std::regex python("python[0-9.]*");
    if (command.empty() || !std::regex_match(fs::path(command.front()).filename().string(), python)) {
        return std::nullopt;
    }
    for (std::size_t i = 1; i < command.size(); ++i) {
        const std::string& a = command[i];
        if (a == "--") {
            return i + 1 < command.size() ? std::optional(command[i + 1]) : std::nullopt;
        }
        if (a.size() < 2 || a[0] != '-') {
            return a == "-" ? std::nullopt : std::optional(a); // "-": the script is read from stdin
        }
        if (a[1] == '-') { // --check-hash-based-pycs MODE takes a value; --help, --version run nothing
            if (a != "--check-hash-based-pycs") {
                return std::nullopt;
            }
            ++i;
            continue;
        }
        for (std::size_t k = 1; k < a.size(); ++k) { // short options, combined as in -uB or -Wignore
            if (a[k] == 'c' || a[k] == 'm') {
                return std::nullopt; // code or a module, not a file
            }
            if (a[k] == 'W' || a[k] == 'X') {
                i += k + 1 == a.size(); // the value is the next word unless it is joined on
                break;
            }
        }
    }
    return std::nullopt;
}

std::optional<std::string> scriptFileProblem(const std::vector<std::string>& command, const std::string& dir) {
    const auto script = pythonScriptOf(command);
    if (!script) {
        return std::nullopt;
    }
    const fs::path path = dir.empty() || fs::path(*script).is_absolute() ? fs::path(*script) : fs::path(dir) / *script;
    std::error_code ec;
    const std::string where = dir.empty() ? fmt::format(" in {}", fs::current_path(ec).string())
                                          : fmt::format(" in {} (the lane's workdir)", dir);
    const auto status = fs::status(path, ec);
    if (!fs::exists(status)) {
        return fmt::format("{}: no such file{}, so {} would have nothing to run", *script,
                           fs::path(*script).is_absolute() ? "" : where, command.front());
    }
    if (fs::is_directory(status)) {
        return fs::exists(path / "__main__.py", ec)
                   ? std::nullopt
                   : std::optional(fmt::format("{}: a folder without a __main__.py, which {} cannot run; name the "
                                               "training script in it",
                                               *script, command.front()));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return fmt::format("{}: cannot be read{}", *script, where);
    }
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(in.gcount()));
    const auto first = head.find_first_not_of(" \t\r\n");
    const bool json = first != std::string::npos && head[first] == '{';
    if (path.extension() == ".ipynb" || (json && head.find("\"cells\"") != std::string::npos)) {
        const std::string stem = fs::path(*script).replace_extension(".py").string();
        return fmt::format("{} is a Jupyter notebook, which {} cannot run: export its code as a script (jupyter "
                           "nbconvert --to script {}, or in Jupyter: File > Save and Export Notebook As > "
                           "Executable Script) and race {}",
                           *script, command.front(), *script, stem);
    }
    // Python runs compiled files and zip archives too (a __main__.py inside).
    const bool runnableBinary = path.extension() == ".pyc" || head.rfind("PK\x03\x04", 0) == 0;
    if (!runnableBinary && head.find('\0') != std::string::npos) {
        return fmt::format("{}: a binary file, not a Python script; race a program of its own without an "
                           "interpreter (-- ./{} ...)",
                           *script, fs::path(*script).filename().string());
    }
    return std::nullopt;
}

} // namespace devicerace::detail
