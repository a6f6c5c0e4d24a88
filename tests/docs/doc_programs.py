"""What the docs tests share: the repository's files and the built programs they check."""
import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def require_program(path, given):
    """Fails where the program was named on the command line (ctest: `given`) and is missing;
    skips the test class where it is just not built."""
    if not os.access(path, os.X_OK):
        if given:
            raise AssertionError(f"{path}: no such program")
        raise unittest.SkipTest(f"{path} is not built (scripts/build, or set DEVICERACE_CLI)")
