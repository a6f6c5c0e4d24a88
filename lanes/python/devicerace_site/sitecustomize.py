"""DeviceRace's start-up hook for a script lane's Python (on PYTHONPATH only inside a race,
and only with instrument=on, the default): instruments PyTorch and Keras when the script imports
them (devicerace/_torch.py, devicerace/_keras.py), then runs the sitecustomize this one shadows,
if any. Imports nothing heavy: a script that imports neither pays a few microseconds.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys


def _chain():
    """Runs the next sitecustomize on sys.path (Debian's, a virtualenv's), as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or not spec.origin or os.path.dirname(spec.origin) == here:
        return
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # as site.py treats a failing sitecustomize: a warning, not an end
        sys.stderr.write(f"devicerace: the shadowed sitecustomize failed: {type(e).__name__}: {e}\n")


# The frameworks instrumented, by module name: (devicerace's module that does it, what to call it).
_WATCHED = {"torch": ("_torch", "PyTorch"), "keras": ("_keras", "Keras")}
_instrumented = set()  # the names done (each install runs once a process, in a race's lane only)


def _instrument(name, module):
    if name in _instrumented:
        return
    _instrumented.add(name)
    part, label = _WATCHED[name]
    try:
        devicerace = __import__("devicerace", fromlist=[part])
        if devicerace.lane().in_race:
            getattr(devicerace, part).install(module)
    except Exception as e:
        sys.stderr.write(f"devicerace: {label} could not be instrumented: {type(e).__name__}: {e}\n")


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when a watched framework is imported, it lets the other finders find
    it and instruments the module once its own import has finished (each once)."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        self.names.discard(name)
        if not self.names:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_instrument(module):
            exec_module(module)
            _instrument(name, module)

        spec.loader.exec_module = exec_and_instrument
        return spec


def _install():
    if os.environ.get("DEVICERACE_REPORT_FD") and os.environ.get("DEVICERACE_INSTRUMENT", "on") != "off":
        waiting = []
        for name in _WATCHED:
            if name in sys.modules:
                _instrument(name, sys.modules[name])
            else:
                waiting.append(name)
        if waiting:
            sys.meta_path.insert(0, _ImportWatcher(waiting))


_chain()
_install()
