#!/usr/bin/env python3
"""Every engine file that calls ATen's parallel_for is built with OpenMP.

ATen's at::parallel_for opens its OpenMP region in an inline template (ATen/ParallelOpenMP.h):
in a file built without -fopenmp the pragma is dropped and the whole range runs on the calling
thread, with no error and no warning. This test reads the engine's sources for parallel_for and
the built objects for the call into the OpenMP runtime (GOMP_parallel) that such a file must
hold, and names each file that lacks it.

Usage: test_openmp_objects.py BUILD_DIR   (ctest: lint_openmp_objects)
"""
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINE_SRC = os.path.join(ROOT, "engine", "src")
# parallel_for itself, or the fused steps' eachWorker (train/fused/each_worker.h), which opens one.
CALL = re.compile(r"\b(?:parallel_for|eachWorker)\s*\(")


def sources_with_parallel_for(src_dir=ENGINE_SRC):
    """Paths under src_dir (relative, 'kernels/x.cpp') of the .cpp files that call parallel_for."""
    out = []
    for folder, _, files in os.walk(src_dir):
        for name in files:
            if name.endswith(".cpp"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    if CALL.search(f.read()):
                        out.append(os.path.relpath(path, src_dir))
    return sorted(out)


def objects_by_source(build_dir):
    """{'kernels/x.cpp': object path} for the engine's objects in a CMake build tree."""
    out = {}
    engine = os.path.join(build_dir, "engine", "CMakeFiles")
    for folder, _, files in os.walk(engine):
        for name in files:
            if name.endswith(".cpp.o"):
                path = os.path.join(folder, name)
                marker = os.sep + "src" + os.sep
                rel = path[path.index(marker) + len(marker):] if marker in path else name
                out[rel[: -len(".o")]] = path
    return out


def calls_openmp(nm_output):
    """Whether an object's `nm` listing calls the OpenMP runtime's parallel region."""
    return any(line.split()[-1].startswith("GOMP_parallel") for line in nm_output.splitlines() if line.strip())


def serial_files(build_dir):
    """(files whose object holds no OpenMP region, whether the build uses OpenMP at all)."""
    objects = objects_by_source(build_dir)
    bad, any_openmp = [], False
    for source in sources_with_parallel_for():
        obj = objects.get(source)
        if obj is None:
            continue  # not built in this configuration
        listing = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        if calls_openmp(listing):
            any_openmp = True
        else:
            bad.append(source)
    return bad, any_openmp


class OpenMpObjects(unittest.TestCase):
    build_dir = None

    def test_every_file_with_parallel_for_opens_an_openmp_region(self):
        if not self.build_dir or not os.path.isdir(os.path.join(self.build_dir, "engine")):
            self.skipTest("no build tree given")
        bad, any_openmp = serial_files(self.build_dir)
        if not any_openmp:
            self.skipTest("this build has no OpenMP (not GCC, or no libgomp beside LibTorch)")
        self.assertEqual(bad, [], "built without -fopenmp, so their at::parallel_for runs on one thread "
                         "(engine/CMakeLists.txt: give them ${ENGINE_OPENMP})")

    def test_the_listing_reader_tells_a_region_from_none(self):
        self.assertTrue(calls_openmp("                 U GOMP_parallel\n0000000000000000 T f\n"))
        self.assertFalse(calls_openmp("0000000000000000 T f\n                 U omp_get_num_threads\n"))

    def test_the_sources_found_include_the_known_callers(self):
        found = sources_with_parallel_for()
        for known in ("kernels/cpu_kernels.cpp", "train/fused/dense_step.cpp", "kernels/bf16_gemm.cpp"):
            self.assertIn(known, found)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        OpenMpObjects.build_dir = sys.argv.pop(1)
    unittest.main()
