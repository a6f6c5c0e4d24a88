#!/usr/bin/env python3
"""Every per-ISA clone of the engine's one-pass CPU loops must use vector registers.

The loops in engine/src/kernels/ are written as plain C++ and left to GCC to vectorise, one
clone per ISA (`target_clones("avx512f", "avx2", "default")`). A small change in a loop body can
leave a clone scalar without any test noticing: the results stay right, only slower. It happened:
`gradB` and `gradSumsB` (the bf16 batch-norm backward) read `dy` inside the relu's test
(`y > 0 ? dy : 0`); GCC does not speculate a 16-bit load, so both clones were scalar loops with a
branch, 47% of a bf16 cifar-resnet20 step on an AMX Xeon.

This reads the built library with `nm` and `objdump` (binutils): each `.avx512f`, `.avx2` and `.arch_x86_64_v3`
clone must name an ymm or zmm register at least once, and no clone may hold a `rep stos` or
`rep movs`: GCC turns a zeroed array or a copied chunk into one, and its start-up (~30 cycles) ran
on every row of the GPT's loops (a layer norm's row sums, the softmax's rows, GELU's chunks: up to
1.5x their time). Usage:
    check_kernels_vectorise.py path/to/libdevicerace_engine.so
"""
import platform
import re
import shutil
import subprocess
import sys

# Clones that are scalar by design, with why.
SCALAR_BY_DESIGN = {
    "expOne": "one exp() of one float (the clone only picks the ISA's libm path)",
    "mergeHeadsF": "float rows copied to float rows: GCC makes each head's copy a memcpy call",
}


def clones(lib):
    out = subprocess.run(["nm", "-S", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        addr, size, _, name = parts
        m = re.search(r"\.(avx512f|avx2|arch_x86_64_v3)$", name)
        if m and int(size, 16) > 0:
            yield int(addr, 16), int(size, 16), name, m.group(1)


def tile_functions(lib):
    """The attention tiles' per-ISA functions (a target attribute each, not target_clones)."""
    out = subprocess.run(["nm", "-S", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and re.search(r"(forward|backward)(Avx512|Avx2|Generic)E", parts[3]):
            yield int(parts[0], 16), int(parts[1], 16), parts[3]


def disassembly(lib, addr, size):
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={addr:#x}",
                           f"--stop-address={addr + size:#x}", lib], check=True, capture_output=True, text=True).stdout


STRING_OP = re.compile(r"\brep[a-z]* +(stos|movs)")


def demangled(name):
    base = re.sub(r"\.(avx512f|avx2|arch_x86_64_v3)$", "", name)
    return subprocess.run(["c++filt", base], check=True, capture_output=True, text=True).stdout.strip()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    lib = sys.argv[1]
    if platform.machine() not in ("x86_64", "AMD64"):
        # The clones are x86 only (kernel_inline.h's DR_CLONES); elsewhere there is nothing to check.
        print(f"skipped: per-ISA clones are built on x86-64 only, this is {platform.machine()}")
        return
    for tool in ("nm", "objdump", "c++filt"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (binutils)")
    found, scalar, string_ops = 0, [], []
    for addr, size, name, isa in clones(lib):
        pretty = demangled(name)
        if "devicerace::" not in pretty:
            continue
        found += 1
        short = pretty.replace("(anonymous namespace)", "").split("(")[0].split("::")[-1]
        if short in SCALAR_BY_DESIGN:
            continue
        asm = disassembly(lib, addr, size)
        if not re.search(r"%[yz]mm\d", asm):
            scalar.append(f"{short} ({isa} clone): no ymm/zmm register in {size} bytes of code  [{pretty}]")
        if STRING_OP.search(asm):
            string_ops.append(f"{short} ({isa} clone): a rep stos/movs  [{pretty}]")
    for addr, size, name in tile_functions(lib):
        if STRING_OP.search(disassembly(lib, addr, size)):
            string_ops.append(f"{demangled(name)}: a rep stos/movs")
    if found == 0:
        sys.exit(f"no per-ISA clones found in {lib}: was it built with target_clones?")
    if scalar:
        print("scalar loops where a vector loop was meant (see engine/src/kernels/, and docs/ENGINEERING.md, "
              "\"Fast paths and kernels\", on conditional loads):")
        for s in scalar:
            print("  " + s)
    if string_ops:
        print("string instructions in a loop's clone (a zero-filled array or a chunk copied: fill with -0.0f, "
              "or write in the loop; docs/ENGINEERING.md, \"Fast paths and kernels\"):")
        for s in string_ops:
            print("  " + s)
    if scalar or string_ops:
        sys.exit(1)
    print(f"{found} per-ISA clones checked: every one uses vector registers and no string instruction "
          f"({len(SCALAR_BY_DESIGN)} scalar by design skipped)")


if __name__ == "__main__":
    main()
