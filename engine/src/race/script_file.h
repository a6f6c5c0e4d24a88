#pragma once
// The script a Python command would run (`python3 -u train.py --epochs 1` runs train.py), checked
// before a race starts: a missing file, a Jupyter notebook or a binary would otherwise start every
// lane only for Python to fail in it. Thread-safe.
#include <optional>
#include <string>
#include <vector>

namespace devicerace::detail {

/// The script argument of `command` when its program is a Python interpreter (python, python3,
/// python3.11, with or without a folder), after Python's own options; none for `-c`, `-m`, `-`
/// (stdin) and any other program.
std::optional<std::string> pythonScriptOf(const std::vector<std::string>& command);

/// What is wrong with the Python script of `command`, run in folder `dir` ("" : the current
/// one), in the words a user needs ("notebook.ipynb is a Jupyter notebook, …"), or none: no
/// script, or one that Python can run (a file of text, or a folder with a __main__.py).
std::optional<std::string> scriptFileProblem(const std::vector<std::string>& command, const std::string& dir);

} // namespace devicerace::detail
