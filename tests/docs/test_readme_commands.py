"""The README's shell blocks, run against the built CLI, so its commands keep working.

Every ```sh block of README.md is read, and each of its `devicerace-cli` commands runs:

- `devicerace-cli race ...` with `--plan` added (before any `-- COMMAND`): the race as it would
  run, decided by the engine, without training; it must exit 0 with no problem. A race that
  records (`--record DIR`) runs for real instead, shortened (`--steps 3`, a few hundred
  examples), so that the block's `replay DIR` and `export DIR` have a recording to read.
- `devicerace-cli race --preset NAME ...`: NAME must be one `devicerace-cli presets --json`
  lists (not run: a preset may race devices this machine lacks, where its stand-in recording
  takes the GPU's place).
- every other `devicerace-cli` command (`devices`, `workloads`, `presets`, `replay`, `export`,
  `--help`, `--version`) as written; it must exit 0.

Other lines (`scripts/...`, the window `devicerace`, `pip`, comments) are read and not run. A
`devicerace-cli` line may not use the shell (pipes, redirections, `;`, `&&`): the test runs it
without one.

**Blocks that need what this machine may not have** start with a comment line naming it:

    ```sh
    # needs: gpu
    devicerace-cli race --lane cpu --lane cuda:0
    ```

`# needs: WHAT[, WHAT]...` with WHAT one of
  gpu         runs where `devicerace-cli devices --json` reports a CUDA device, else skipped
  frameworks  runs where the lanes' Python (DEVICERACE_PYTHON, else .venv/bin/python) has keras,
              jax and tensorflow (scripts/setup --frameworks), else skipped
  ssh, slurm, torchrun, display
              another machine, a Slurm cluster, a running torchrun job, a screen: always skipped
Any other word fails the test (a misspelt need would skip its block unseen).

The commands run in a temporary folder holding links to the repository's top-level entries, so
relative paths (`examples/...`) resolve and what a command writes (`r.json`, `runs/...`) stays
out of the checkout. A failure names the block (its line in README.md) and the command, with
the command's output.

Run by ctest as: python3 test_readme_commands.py PATH/TO/devicerace-cli
By hand or under pytest the CLI comes from DEVICERACE_CLI, else build/release/app/cli/devicerace-cli.
"""
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

from doc_programs import ROOT, read, require_program

README = os.path.join(ROOT, "README.md")
CLI = os.environ.get("DEVICERACE_CLI") or os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli")
GIVEN = False

ALWAYS_SKIPPED = {"ssh", "slurm", "torchrun", "display"}
KNOWN_NEEDS = ALWAYS_SKIPPED | {"gpu", "frameworks"}
SHELL_WORDS = {"|", "||", "&", "&&", ";", ">", ">>", "<", "2>", "2>&1", "&>"}
# A recording race, shortened: a few steps on a few hundred examples.
SHORT = ["--train-limit", "256", "--test-limit", "128", "--warmup-steps", "1"]


def sh_blocks(text):
    """(line number of the opening fence, [lines]) of every ```sh block."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if current is None and re.fullmatch(r"```(sh|bash|shell)", stripped):
            current, start = [], number
        elif current is not None and stripped == "```":
            blocks.append((start, current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def needs_of(lines):
    """The words of a `# needs: ...` first line, or an empty set."""
    first = next((l.strip() for l in lines if l.strip()), "")
    m = re.fullmatch(r"#\s*needs:\s*(.+)", first)
    if not m:
        return set()
    return {w.strip().lower() for w in m.group(1).split(",") if w.strip()}


def commands(lines):
    """The block's command lines (backslash continuations joined), each as a list of words,
    without comments."""
    out, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        words = shlex.split(text, comments=True)
        if words:
            out.append(words)
    return out


def is_cli(word):
    return word == "devicerace-cli" or word.endswith("/devicerace-cli")


def env_prefix(words):
    """Splits leading VAR=value words off a command: ({VAR: value}, rest)."""
    env = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        name, value = words[0].split("=", 1)
        env[name] = value
        words = words[1:]
    return env, words


def option_value(args, name):
    """The value of `--name VALUE` or `--name=VALUE` among the race's own arguments, or None."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def shortened(args):
    """A recording race cut to a few steps: --epochs/--steps replaced, small example limits."""
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("--epochs", "--steps", "--train-limit", "--test-limit", "--warmup-steps"):
            skip = True
            continue
        if re.match(r"--(epochs|steps|train-limit|test-limit|warmup-steps)=", a):
            continue
        out.append(a)
    return out + ["--steps", "3"] + SHORT


def lanes_python():
    return os.environ.get("DEVICERACE_PYTHON") or os.path.join(ROOT, ".venv", "bin", "python")


@functools.lru_cache(maxsize=None)
def machine_has(need):
    if need == "gpu":
        r = subprocess.run([CLI, "devices", "--json"], capture_output=True, text=True, timeout=120)
        try:
            return r.returncode == 0 and bool(json.loads(r.stdout).get("cuda_available"))
        except ValueError:
            return False
    if need == "frameworks":
        probe = ("import importlib.util, sys; "
                 "sys.exit(0 if all(importlib.util.find_spec(m) for m in ('keras', 'jax', 'tensorflow')) else 1)")
        try:
            return subprocess.run([lanes_python(), "-c", probe], capture_output=True, timeout=60).returncode == 0
        except OSError:
            return False
    return False


@functools.lru_cache(maxsize=None)
def preset_names():
    r = subprocess.run([CLI, "presets", "--json"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"devicerace-cli presets --json exited {r.returncode}: {r.stderr}")
    return {p["name"] for p in json.loads(r.stdout)}


class ReadmeCommandsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_program(CLI, GIVEN)
        cls.blocks = sh_blocks(read(README))

    def test_the_readme_has_shell_blocks_and_the_test_command(self):
        self.assertTrue(self.blocks, "README.md has no ```sh block")
        words = [w for _, lines in self.blocks for c in commands(lines) for w in c]
        self.assertIn("scripts/test", words, "README.md must keep the test command scripts/test (CI calls it)")

    def test_every_block(self):
        for start, lines in self.blocks:
            with self.subTest(block=f"README.md:{start}"):
                self.run_block(start, lines)

    def run_block(self, start, lines):
        needs = needs_of(lines)
        unknown = needs - KNOWN_NEEDS
        self.assertFalse(unknown, f"README.md:{start}: unknown '# needs:' {', '.join(sorted(unknown))} "
                                  f"(known: {', '.join(sorted(KNOWN_NEEDS))})")
        missing = sorted(n for n in needs if n in ALWAYS_SKIPPED or not machine_has(n))
        if missing:
            self.skipTest(f"README.md:{start} needs {', '.join(missing)}")
        work = tempfile.mkdtemp(prefix="devicerace-readme-")
        try:
            for name in os.listdir(ROOT):
                if not name.startswith(".") and name != "build":
                    os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
            for words in commands(lines):
                self.run_command(start, work, words)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def run_command(self, start, work, words):
        env, words = env_prefix(words)
        if not words or not is_cli(words[0]):
            return  # scripts/..., the window, pip: read, not run
        line = shlex.join(words)
        where = f"README.md:{start}: `{line}`"
        shell = [w for w in words if w in SHELL_WORDS]
        self.assertFalse(shell, f"{where}: uses the shell ({' '.join(shell)}); the test runs commands without one")
        args = words[1:]
        own = args[:args.index("--")] if "--" in args else args  # the race's own arguments
        plan = False
        if args[:1] == ["race"]:
            preset = option_value(own, "--preset")
            if preset is not None:
                self.assertIn(preset, preset_names(), f"{where}: no preset {preset!r} (devicerace-cli presets)")
                return
            if option_value(own, "--record") is not None:
                args = shortened(own) + args[len(own):]
            elif "--plan" not in own:
                args = own + ["--plan"] + args[len(own):]
                plan = True
            else:
                plan = True
        environment = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", **env)
        r = subprocess.run([CLI, *args], cwd=work, capture_output=True, text=True, timeout=600, env=environment)
        output = f"\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
        self.assertEqual(r.returncode, 0, f"{where}: exited {r.returncode} (ran: devicerace-cli "
                                          f"{shlex.join(args)}){output}")
        if plan:
            try:
                problems = json.loads(r.stdout).get("problems", [])
            except ValueError:
                self.fail(f"{where}: --plan printed no JSON{output}")
            self.assertFalse(problems, f"{where}: the plan has problems: {problems}")


def heading_anchors(text):
    """The anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped,
    spaces as hyphens; a repeated heading gets -1, -2, ...)."""
    anchors, seen, in_code = set(), {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(base, 0)
            seen[base] = n + 1
            anchors.add(base if n == 0 else f"{base}-{n}")
    return anchors


class ReadmeLinksTest(unittest.TestCase):
    """The README links only files of this repository, and each #anchor is a heading there."""

    def test_links_stay_in_the_repository(self):
        text = re.sub(r"<!--.*?-->", "", read(README), flags=re.S)
        problems = []
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(ROOT, path)) if path else README
            if path.startswith(("/", "..")) or not full.startswith(ROOT + os.sep):
                problems.append(f"{target}: outside the repository")
            elif not os.path.exists(full):
                problems.append(f"{target}: no such file")
            elif anchor and full.endswith(".md") and anchor not in heading_anchors(read(full)):
                problems.append(f"{target}: {path or 'README.md'} has no heading with the anchor #{anchor}")
        self.assertFalse(problems, "README.md links:\n" + "\n".join(problems))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        CLI = os.path.abspath(sys.argv.pop(1))
        GIVEN = True
    unittest.main(verbosity=2)
