#!/usr/bin/env python3
"""The source folders as include graphs, checked against their documented order.

Three graphs: the engine's folders (engine/src/*, with its public headers engine/include/devicerace
as the folder "devicerace"), and the window's (ui/, ui/charts/, ui/model/). A folder may include
only folders before it in its ORDER (and itself); anything else is a loop or an include against
the order, and this script exits 1 naming each one with its file and line. `scripts/test --lint`
runs it. The order is documented here and in docs/ENGINEERING.md ("Folders").

Usage: scripts/lib/folder_graph.py [--root DIR] [REVISION]
       (default: the working tree of this checkout; --root: another tree, as the tests do)
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Lowest first: each folder builds only on those before it.
ENGINE_ORDER = ["devicerace", "util", "devices", "data", "metrics", "record", "kernels", "models", "train",
                "lanes", "workers", "distributed", "cluster", "race", "serve"]
UI_ORDER = ["model", "charts", "ui"]


def sources(root, rev, top):
    """(path relative to root, text) of every .cpp and .h under `top`."""
    if rev:
        names = subprocess.run(["git", "-C", root, "ls-tree", "-r", "--name-only", rev, top],
                               capture_output=True, text=True, check=True).stdout.split()
        for n in names:
            if n.endswith((".cpp", ".h")):
                yield n, subprocess.run(["git", "-C", root, "show", f"{rev}:{n}"], capture_output=True, text=True,
                                        check=True).stdout
        return
    for d, _, fs in os.walk(os.path.join(root, top)):
        for f in sorted(fs):
            if f.endswith((".cpp", ".h")):
                p = os.path.join(d, f)
                with open(p, encoding="utf-8") as fh:
                    yield os.path.relpath(p, root), fh.read()


def engine_includes(root, rev):
    """(from folder, to folder, file, line) for each include between the engine's folders."""
    for top, folder_of in (("engine/src", lambda parts: parts[2] if len(parts) > 3 else None),
                           ("engine/include/devicerace", lambda parts: "devicerace")):
        for name, text in sources(root, rev, top):
            src = folder_of(name.split("/"))
            if src is None:
                continue  # engine/src/torch_pch.h
            for m in INCLUDE.finditer(text):
                dst = m.group(1).split("/")[0] if "/" in m.group(1) else None
                if dst and dst != src:
                    yield src, dst, name, text.count("\n", 0, m.start()) + 1


def ui_includes(root, rev):
    """The same for the window: a bare name is the including file's neighbour, else ui/'s."""
    names = {name for name, _ in sources(root, rev, "ui")}
    for name, text in sources(root, rev, "ui"):
        parts = name.split("/")
        src = parts[1] if len(parts) > 2 else "ui"
        for m in INCLUDE.finditer(text):
            inc = m.group(1)
            beside = os.path.normpath(os.path.join(os.path.dirname(name), inc))
            target = beside if beside in names else os.path.normpath(os.path.join("ui", inc))
            if target not in names:
                continue  # the engine's public headers, Qt's
            tparts = target.split("/")
            dst = tparts[1] if len(tparts) > 2 else "ui"
            if dst != src:
                yield src, dst, name, text.count("\n", 0, m.start()) + 1


def loops(edges):
    """Groups of folders that reach each other (each loop reported once, by its members)."""
    def reach(a):
        seen, todo = set(), [a]
        while todo:
            for b in edges.get(todo.pop(), ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen
    r = {a: reach(a) for a in edges}
    groups = set()
    for a in edges:
        if a in r[a]:
            groups.add(tuple(sorted(b for b in r[a] if a in r.get(b, set()))))
    return sorted(groups)


def check(title, includes, order):
    """Prints the graph; returns the problems (loops, includes against the order, unknown folders)."""
    edges, problems = {}, []
    for src, dst, name, line in includes:
        edges.setdefault(src, set()).add(dst)
        for f in (src, dst):
            if f not in order:
                problems.append(f"{name}:{line}: folder {f} is not in the documented order ({', '.join(order)})")
        if src in order and dst in order and order.index(dst) > order.index(src):
            problems.append(f"{name}:{line}: {src} includes {dst}, which comes after it in the order")
    print(f"{title} (order: {' < '.join(order)})")
    for src in sorted(edges, key=lambda f: order.index(f) if f in order else len(order)):
        print(f"  {src:12} -> {', '.join(sorted(edges[src]))}")
    found = loops(edges)
    print(f"  loops: {len(found)}")
    for g in found:
        print("    " + " <-> ".join(g))
        problems.append(f"loop: {' <-> '.join(g)}")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=ROOT, help="the tree to read (default: this checkout)")
    ap.add_argument("revision", nargs="?", help="a git revision instead of the working tree")
    args = ap.parse_args(argv)
    problems = check("engine", list(engine_includes(args.root, args.revision)), ENGINE_ORDER)
    problems += check("window", list(ui_includes(args.root, args.revision)), UI_ORDER)
    for p in dict.fromkeys(problems):
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(set(problems))} include problem(s) against the folder order", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
