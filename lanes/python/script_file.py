"""The script a Python command runs, and what stops Python from running it.

A script lane checks its command before the race (script_lane.py, `check_command`), here or on an
ssh:// host: `python3 -u train.py --epochs 1` runs train.py, and a file that is not there, a
binary or a folder without __main__.py would otherwise start the lane only for Python to fail in
it. (A Jupyter notebook is run through a script of its cells: notebook_script.py.)
"""
import os
import re

PYTHON = re.compile(r"python[0-9.]*")


def python_script_index(command):
    """Where in `command` the script is when its program is a Python interpreter (python, python3,
    python3.11, with or without a folder), after Python's own options; None for `-c`, `-m`, `-`
    (stdin), `--help`-like options and any other program."""
    if not command or not PYTHON.fullmatch(os.path.basename(command[0])):
        return None
    i = 1
    while i < len(command):
        a = command[i]
        if a == "--":
            return i + 1 if i + 1 < len(command) else None
        if len(a) < 2 or not a.startswith("-"):
            return None if a == "-" else i  # "-": the script comes on stdin
        if a.startswith("--"):  # --check-hash-based-pycs MODE takes a value; --help, --version run nothing
            if a != "--check-hash-based-pycs":
                return None
            i += 2
            continue
        for k, flag in enumerate(a[1:], start=1):  # short options, combined as in -uB or -Wignore
            if flag in "cm":
                return None  # code or a module, not a file
            if flag in "WX":
                i += k + 1 == len(a)  # the value is the next word unless it is joined on
                break
        i += 1
    return None


def python_script_of(command):
    """The script a Python `command` runs (python_script_index), or None."""
    i = python_script_index(command)
    return None if i is None else command[i]


def script_file_problem(script, path, program):
    """What stops `program` (python3) from running `script`, found at `path`, in the words a user
    needs, or None: a file of text, a compiled file, a zip archive or a folder with a __main__.py
    is what Python runs. A missing file is the caller's to word (it knows where it looked), and a
    notebook is not a problem (notebook_script.py)."""
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "__main__.py")):
            return None
        return f"{script}: a folder without a __main__.py, which {program} cannot run; name the training script in it"
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        return f"{script}: cannot be read ({e.strerror})"
    if path.endswith(".pyc") or head.startswith(b"PK\x03\x04"):
        return None  # Python runs compiled files and zip archives (with a __main__.py inside)
    if b"\0" in head:
        return (f"{script}: a binary file, not a Python script; a program of its own is raced without an "
                f"interpreter (-- ./{os.path.basename(script)})")
    return None
