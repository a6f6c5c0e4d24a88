#!/usr/bin/env python3
"""The attention tiles' vector code compares whole vectors, never lane by lane.

The causal tiles (engine/src/kernels/attention_kernels.cpp) are GCC vector extensions built into one
function per ISA (AVX-512, AVX2). GCC 12 builds some vector selects lane by lane without a word: a
select on two compares joined by `&` became a scalar compare (vcomiss) and an insert (vpinsrd) per
lane, and the causal softmax's max then took 3/4 of the forward at char-gpt's shape (706 against
225 µs for 48 heads on one Xeon core once written as two selects). This test disassembles those
functions in the built object and names each that holds a scalar float compare.

Usage: test_vector_masks.py BUILD_DIR   (ctest: lint_vector_masks)
"""
import os
import re
import shutil
import subprocess
import sys
import unittest

# The functions of attention_kernels.cpp built for a vector ISA (their names end with it).
VECTOR_FUNCTION = re.compile(r"^[0-9a-f]+ <(.*::(?:forward|backward)(?:Avx512|Avx2)\(.*)>:$")
SCALAR_COMPARE = re.compile(r"\bv?u?comiss\b")


def scalar_compares(disassembly):
    """{function: scalar float compares in it} for the vector ISAs' functions of an objdump listing."""
    counts, current = {}, None
    for line in disassembly.splitlines():
        header = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if header:
            match = VECTOR_FUNCTION.match(line)
            current = match.group(1) if match else None
            if current:
                counts.setdefault(current, 0)
            continue
        if current and SCALAR_COMPARE.search(line):
            counts[current] += 1
    return counts


def attention_object(build_dir):
    for folder, _, files in os.walk(os.path.join(build_dir, "engine", "CMakeFiles")):
        for name in files:
            if name == "attention_kernels.cpp.o":
                return os.path.join(folder, name)
    return None


class VectorMasks(unittest.TestCase):
    build_dir = None

    def test_the_attention_tiles_compare_whole_vectors(self):
        obj = attention_object(self.build_dir) if self.build_dir else None
        if obj is None:
            self.skipTest("no built attention_kernels.cpp.o under the build tree given")
        if not shutil.which("objdump"):
            self.skipTest("no objdump")
        listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", obj], capture_output=True, text=True,
                                 check=True).stdout
        counts = scalar_compares(listing)
        if not counts:
            self.skipTest("this build has no per-ISA attention functions (not x86-64 with GCC's target attribute)")
        bad = {name: n for name, n in counts.items() if n}
        self.assertEqual(bad, {}, "scalar compares in vector code: write a select on joined compares as two selects "
                         "(docs/ENGINEERING.md, \"Attention\")")

    def test_the_reader_counts_compares_in_vector_functions_only(self):
        listing = "\n".join([
            "0000000000000000 <ns::(anonymous namespace)::forwardAvx512(ns::ForwardArgs const&, long, long)>:",
            "   0:\tvcomiss %xmm1,%xmm2", "   4:\tvcmpleps %zmm1,%zmm2,%k1", "",
            "0000000000000040 <ns::(anonymous namespace)::forwardGeneric(ns::ForwardArgs const&, long, long)>:",
            "  40:\tcomiss %xmm1,%xmm2", "",
            "0000000000000080 <ns::(anonymous namespace)::backwardAvx2(ns::BackwardArgs const&, long, long)>:",
            "  80:\tvfmadd231ps %ymm1,%ymm2,%ymm3"])
        self.assertEqual(scalar_compares(listing), {
            "ns::(anonymous namespace)::forwardAvx512(ns::ForwardArgs const&, long, long)": 1,
            "ns::(anonymous namespace)::backwardAvx2(ns::BackwardArgs const&, long, long)": 0})


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        VectorMasks.build_dir = sys.argv.pop(1)
    unittest.main()
