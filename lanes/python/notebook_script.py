"""A Jupyter notebook raced as it is: `devicerace-cli race --lane cpu -- python3 train.ipynb`.

Python cannot run a notebook (it would read its JSON as one dict and exit, having trained
nothing), so the script lane (script_lane.py, `check_command`) writes a script that runs the
notebook's code cells in order, as "Run All" in Jupyter would, and races that instead:
  - each cell is compiled under the name "train.ipynb, cell N" (its source kept for tracebacks),
    so a failure names the cell and its line;
  - it runs in the notebook's folder, which is also first on sys.path, as Jupyter's kernel does
    (its data paths and sibling modules resolve as they did there);
  - `%run script.py args` runs as IPython runs it: the script as __main__ with its arguments in
    sys.argv, its names then the notebook's (-i: in the notebook's names; -m module; -n; -e
    ignores its sys.exit; -t runs it untimed);
  - what only IPython can run is left out and named in the lane's execution text: other line
    magics (%matplotlib inline, %pip install), shell escapes (!nvidia-smi, files = !ls), help
    (model?), a %run of a notebook or with $variables, and cell magics other than %%time,
    %%timeit and %%capture, whose bodies run as plain code;
  - `display` is IPython's when it is installed, else print.
Standard library only.
"""
import json
import os
import re
import shlex

# Cell magics whose body is plain Python: the body runs, the magic line is left out.
BODY_MAGICS = ("time", "timeit", "capture")
# A line only IPython can run: a line magic, a shell escape, one assigned (x = !ls, y = %sx ls),
# or a help request (model?, model??).
IPYTHON_LINE = re.compile(r"^\s*(?:[%!]|[\w.\[\], ]+=\s*[%!]|[\w.]+\?{1,2}\s*$)")
# `%run [options] target [args]` on a line of its own.
RUN_LINE = re.compile(r"^(\s*)%run\s+(.*?)\s*$")
RUN_FLAGS = ("-i", "-n", "-e", "-t")
# What a %run line becomes: IPython's %run (IPython.core.magics.execution) for the options above.
RUN_HELPER = '''\
def _devicerace_run(words, namespace):
    # A notebook's %run line, as IPython runs it: the script (or -m module) as __main__ (-n: under
    # its own name) with its arguments in sys.argv, in names of its own (-i: a copy of the
    # notebook's), which then join the notebook's; -e ignores its sys.exit.
    import os, runpy, sys
    flags, rest, module = set(), list(words), None
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag == "-m":
            module = rest.pop(0)
            break
        flags.add(flag)
    target = module or rest.pop(0)
    if not module and not os.path.exists(target) and os.path.exists(target + ".py"):
        target += ".py"
    name = "__main__" if "-n" not in flags else (module or os.path.splitext(os.path.basename(target))[0])
    names = dict(namespace) if "-i" in flags else {}
    saved, sys.argv = sys.argv, [target] + rest
    try:
        if module:
            names.update(runpy.run_module(module, init_globals=names, run_name=name, alter_sys=True))
        else:
            with open(target, "rb") as f:
                code = compile(f.read(), target, "exec")
            names.update(__name__=name, __file__=target, __builtins__=__builtins__)
            exec(code, names)
    except SystemExit as e:
        if "-e" not in flags and e.code not in (None, 0):
            raise
    finally:
        sys.argv = saved
        # What the script defined joins the notebook's names, as IPython's %run leaves them, also
        # after it failed.
        namespace.update({k: v for k, v in names.items() if not k.startswith("__")})
'''
# The start of the generated script; the cells follow as JSON.
PREAMBLE = '''\
# Written by DeviceRace: the code cells of {notebook}, run in order as Jupyter's "Run All" would
# (lanes/python/notebook_script.py). Edit the notebook, not this file.
import json as _devicerace_json
import linecache as _devicerace_linecache
import os as _devicerace_os
import sys as _devicerace_sys
_devicerace_os.chdir({folder!r})
_devicerace_sys.path.insert(0, {folder!r})
try:
    from IPython.display import display
except ImportError:
    def display(*objects, **_options):
        for _object in objects:
            print(_object)
{run_helper}
_devicerace_cells = _devicerace_json.loads({cells!r})
for _devicerace_name, _devicerace_source in _devicerace_cells:
    _devicerace_linecache.cache[_devicerace_name] = (
        len(_devicerace_source), None, _devicerace_source.splitlines(True), _devicerace_name)
    exec(compile(_devicerace_source, _devicerace_name, "exec"), globals())
'''


class NotebookError(ValueError):
    """A notebook that cannot be raced, in the words a user needs."""


def is_notebook(path):
    """Whether the file at `path` is a Jupyter notebook: named .ipynb, or JSON with cells."""
    if path.endswith(".ipynb"):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"cells"' in head


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def notebook_cells(path, name):
    """The notebook at `path` (called `name` in messages) as [(cell name, source)] of its code
    cells, and the lines left out as ["%matplotlib inline (cell 1)", ...]. Raises NotebookError."""
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise NotebookError(f"{name}: not a notebook Jupyter could open ({e})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        version = nb.get("nbformat") if isinstance(nb, dict) else None
        hint = " (nbformat 3: open and save it in Jupyter to bring it to version 4)" if version == 3 else ""
        raise NotebookError(f"{name}: a notebook without a list of cells{hint}")
    meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    language = ((meta.get("kernelspec") or {}).get("language") or (meta.get("language_info") or {}).get("name")
                or "python")
    if str(language).lower() != "python":
        raise NotebookError(f"{name}: a {language} notebook; a script lane runs Python notebooks")
    cells, skipped, number = [], [], 0
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number += 1
        lines = _source(cell).splitlines()
        first = lines[0].strip() if lines else ""
        if first.startswith("%%"):
            magic = first[2:].split()[0] if len(first) > 2 else ""
            if magic not in BODY_MAGICS:
                skipped.append(f"{first.split()[0]} (cell {number})")
                continue
            lines = [""] + lines[1:]  # the body keeps its line numbers
        kept = []
        for line in lines:
            run = run_call(line)
            if run is not None:
                kept.append(run)
            elif IPYTHON_LINE.match(line):
                skipped.append(f"{' '.join(line.split())[:40]} (cell {number})")
                indent = line[:len(line) - len(line.lstrip())]
                kept.append(indent + "pass")  # keeps a block that held only this line a block
            else:
                kept.append(line)
        source = "\n".join(kept) + "\n"
        label = f"{name}, cell {number}"
        try:
            compile(source, label, "exec")
        except SyntaxError as e:
            raise NotebookError(f"{label}, line {e.lineno}: {e.msg}") from None
        cells.append((label, source))
    if not cells:
        raise NotebookError(f"{name}: a notebook without code cells")
    return cells, skipped


def run_call(line):
    """The Python a `%run` line becomes (a call of RUN_HELPER's function), or None where it is not
    one or is one this does not run as IPython would (a notebook, $variables, other options)."""
    m = RUN_LINE.match(line)
    if not m or "$" in m.group(2) or "{" in m.group(2):
        return None
    try:
        words = shlex.split(m.group(2))
    except ValueError:
        return None
    i = 0
    while i < len(words) and words[i] in RUN_FLAGS:
        i += 1
    target = words[i + 1] if i + 1 < len(words) and words[i] == "-m" else words[i] if i < len(words) else ""
    if not target or target.startswith("-") or target.endswith(".ipynb"):
        return None
    return f"{m.group(1)}_devicerace_run({words!r}, globals())"


def write_notebook_script(path, name, out_path):
    """Writes the script that runs the notebook at `path` to `out_path`; returns (code cells,
    lines left out). Raises NotebookError."""
    cells, skipped = notebook_cells(path, name)
    folder = os.path.dirname(os.path.abspath(path))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(PREAMBLE.format(notebook=name, folder=folder, cells=json.dumps(cells), run_helper=RUN_HELPER))
    return len(cells), skipped
