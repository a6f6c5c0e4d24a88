#!/usr/bin/env python3
"""The engine's folders as an include graph: which folder of engine/src includes which, and the
loops among them (a folder that, through its includes, includes itself). Reads a git revision's
tree or the working tree.

Usage: scripts/lib/folder_graph.py [REVISION]     (default: the working tree)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def files(rev):
    if rev:
        names = subprocess.run(["git", "-C", ROOT, "ls-tree", "-r", "--name-only", rev, "engine/src"],
                               capture_output=True, text=True, check=True).stdout.split()
        for n in names:
            if n.endswith((".cpp", ".h")):
                yield n, subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{n}"], capture_output=True, text=True,
                                        check=True).stdout
    else:
        for d, _, fs in os.walk(os.path.join(ROOT, "engine", "src")):
            for f in fs:
                if f.endswith((".cpp", ".h")):
                    p = os.path.join(d, f)
                    with open(p) as fh:
                        yield os.path.relpath(p, ROOT), fh.read()


def graph(rev):
    edges = {}
    for name, text in files(rev):
        parts = name.split("/")
        if len(parts) < 4:
            continue  # engine/src/torch_pch.h
        src = parts[2]
        for dst in INCLUDE.findall(text):
            if dst != src and dst != "devicerace":
                edges.setdefault(src, set()).add(dst)
    return edges


def loops(edges):
    """Pairs of folders that reach each other (each loop reported once, by its members)."""
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


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else None
    edges = graph(rev)
    for src in sorted(edges):
        print(f"{src:12} -> {', '.join(sorted(edges[src]))}")
    found = loops(edges)
    print(f"loops: {len(found)}")
    for g in found:
        print("  " + " <-> ".join(g))


if __name__ == "__main__":
    main()
