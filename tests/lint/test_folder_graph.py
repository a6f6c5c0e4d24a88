"""The folders' include order holds, and `scripts/test --lint` fails on an include against it or
on a DEVICERACE_ variable read outside its one place.

Run by ctest as: python3 test_folder_graph.py
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAPH = os.path.join(ROOT, "scripts", "lib", "folder_graph.py")


def graph(root):
    return subprocess.run([sys.executable, GRAPH, "--root", root], capture_output=True, text=True)


class FolderOrder(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        for d in ("engine/src", "engine/include", "ui", "app", "scripts"):
            shutil.copytree(os.path.join(ROOT, d), os.path.join(self.root, d))
        shutil.copy(os.path.join(ROOT, ".clang-format"), self.root)

    def tearDown(self):
        self.tmp.cleanup()

    def add_include(self, path, include):
        full = os.path.join(self.root, path)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        first = text.index("#include")
        with open(full, "w", encoding="utf-8") as f:
            f.write(text[:first] + f'#include "{include}"\n' + text[first:])

    def test_the_tree_keeps_its_order(self):
        out = graph(self.root)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("loops: 0", out.stdout)

    def test_a_lower_folder_including_a_higher_one_is_a_loop_and_against_the_order(self):
        self.add_include("engine/src/util/file_util.cpp", "train/trainer.h")
        out = graph(self.root)
        self.assertEqual(out.returncode, 1, out.stdout)
        self.assertIn("engine/src/util/file_util.cpp:", out.stderr)
        self.assertIn("util includes train, which comes after it in the order", out.stderr)
        self.assertRegex(out.stderr, r"loop: .*train.*util")

    def test_a_public_header_including_the_engines_internals_is_refused(self):
        self.add_include("engine/include/devicerace/summary.h", "util/file_util.h")
        out = graph(self.root)
        self.assertEqual(out.returncode, 1, out.stdout)
        self.assertIn("devicerace includes util, which comes after it in the order", out.stderr)

    def test_a_chart_including_the_window_is_refused(self):
        self.add_include("ui/charts/metric_chart.cpp", "main_window.h")
        out = graph(self.root)
        self.assertEqual(out.returncode, 1, out.stdout)
        self.assertIn("ui/charts/metric_chart.cpp:", out.stderr)
        self.assertIn("charts includes ui, which comes after it in the order", out.stderr)

    def test_a_new_folder_must_take_its_place_in_the_order(self):
        os.makedirs(os.path.join(self.root, "engine/src/extras"))
        with open(os.path.join(self.root, "engine/src/extras/x.cpp"), "w", encoding="utf-8") as f:
            f.write('#include "util/file_util.h"\n')
        out = graph(self.root)
        self.assertEqual(out.returncode, 1, out.stdout)
        self.assertIn("folder extras is not in the documented order", out.stderr)

    def lint(self):
        subprocess.run(["git", "init", "-q", self.root], check=True)
        subprocess.run(["git", "-C", self.root, "add", "-A"], check=True)
        return subprocess.run(["bash", os.path.join(self.root, "scripts", "test"), "--lint"], capture_output=True,
                              text=True, cwd=self.root, timeout=600)

    def test_the_lint_fails_on_a_devicerace_variable_read_outside_its_table(self):
        with open(os.path.join(self.root, "engine/src/devices/cpu_info.cpp"), "a", encoding="utf-8") as f:
            f.write('\nconst char* sneaky() { return std::getenv("DEVICERACE_SNEAKY"); }\n')
        lint = self.lint()
        self.assertNotEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        self.assertIn("engine/src/devices/cpu_info.cpp", lint.stdout + lint.stderr)
        self.assertIn("read outside engine/src/util/environment.cpp", lint.stdout + lint.stderr)

    def test_the_lint_fails_on_a_fast_path_header_that_includes_torch(self):
        full = os.path.join(self.root, "engine/src/kernels/pool_kernels.h")
        with open(full, encoding="utf-8") as f:
            text = f.read()
        first = text.index("#include")
        with open(full, "w", encoding="utf-8") as f:
            f.write(text[:first] + "#include <ATen/core/Tensor.h>\n" + text[first:])
        lint = self.lint()
        self.assertNotEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        self.assertIn("engine/src/kernels/pool_kernels.h", lint.stdout + lint.stderr)
        self.assertIn("a kernels/ header includes torch", lint.stdout + lint.stderr)

    def test_the_lint_fails_on_an_include_against_the_order(self):
        self.add_include("engine/src/devices/cpu_info.cpp", "race/script_cpus.h")
        lint = self.lint()
        self.assertNotEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        self.assertIn("an include against the folders' order", lint.stdout + lint.stderr)
        self.assertIn("devices includes race", lint.stdout + lint.stderr)


class EnvironmentTable(unittest.TestCase):
    """Every DEVICERACE_ variable the C++ reads has its row in engine/src/util/environment.cpp, and
    every row is read somewhere (no stale documentation)."""

    def test_every_switch_read_has_a_row_and_every_row_is_read(self):
        import re
        with open(os.path.join(ROOT, "engine/src/util/environment.cpp"), encoding="utf-8") as f:
            rows = re.findall(r'EnvironmentSwitch\{\s*"(DEVICERACE_[A-Z0-9_]+)"', f.read())
        self.assertEqual(rows, sorted(rows), "the table is in name order")
        self.assertEqual(len(rows), len(set(rows)))
        read = set()
        for top in ("engine", "app", "ui"):
            for d, _, fs in os.walk(os.path.join(ROOT, top)):
                for name in fs:
                    if name.endswith((".cpp", ".h")):
                        with open(os.path.join(d, name), encoding="utf-8") as f:
                            read |= set(re.findall(r'environmentSwitch\(\s*"(DEVICERACE_[A-Z0-9_]+)"', f.read()))
        self.assertEqual(sorted(read - set(rows)), [], "read without a row in the table")
        self.assertEqual(sorted(set(rows) - read), [], "rows nothing reads")


if __name__ == "__main__":
    unittest.main()
