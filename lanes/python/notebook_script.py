"""A Jupyter notebook raced as it is: `devicerace-cli race --lane cpu -- python3 train.ipynb`.

Python cannot run a notebook (it would read its JSON as one dict and exit, having trained
nothing), so the script lane (script_lane.py, `check_command`) writes a script that runs the
notebook's code cells in order, as "Run All" in Jupyter would, and races that instead:
  - each cell is compiled under the name "train.ipynb, cell N" (its source kept for tracebacks),
    so a failure names the cell and its line;
  - it runs in the notebook's folder, which is also first on sys.path, as Jupyter's kernel does
    (its data paths and sibling modules resolve as they did there);
  - what only IPython can run is left out and named in the lane's execution text: line magics
    (%matplotlib inline, %pip install), shell escapes (!nvidia-smi, files = !ls), help (model?)
    and cell magics other than %%time, %%timeit and %%capture, whose bodies run as plain code;
  - `display` is IPython's when it is installed, else print.
Standard library only.
"""
import json
import os
import re

# Cell magics whose body is plain Python: the body runs, the magic line is left out.
BODY_MAGICS = ("time", "timeit", "capture")
# A line only IPython can run: a line magic, a shell escape, one assigned (x = !ls, y = %sx ls),
# or a help request (model?, model??).
IPYTHON_LINE = re.compile(r"^\s*(?:[%!]|[\w.\[\], ]+=\s*[%!]|[\w.]+\?{1,2}\s*$)")
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
            if IPYTHON_LINE.match(line):
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


def write_notebook_script(path, name, out_path):
    """Writes the script that runs the notebook at `path` to `out_path`; returns (code cells,
    lines left out). Raises NotebookError."""
    cells, skipped = notebook_cells(path, name)
    folder = os.path.dirname(os.path.abspath(path))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(PREAMBLE.format(notebook=name, folder=folder, cells=json.dumps(cells)))
    return len(cells), skipped
