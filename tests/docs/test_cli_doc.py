"""docs/CLI.md against the built programs, so the reference cannot drift from them.

- Every command `devicerace-cli --help` lists has a section `## \`devicerace-cli COMMAND\`` in
  docs/CLI.md, and every such section names a command that exists.
- Every option each command's `--help` prints (and the top level's, `--version`) is a row of that
  section's option table (a table whose header's first cell is "option"; its first cell starts
  with the option in backticks), and every row there is an option the command still has.
  `--help` itself is left out: every command has it.
- Every lane key `devicerace-cli race --help` lists (after "Keys:", from the engine's lane-key
  table) is a row of the table under `## Lane keys`, and every row there is a key that exists.
- `devicerace-cli --version` prints `devicerace-cli X.Y.Z`, the version of CMakeLists.txt's
  `project(DeviceRace VERSION X.Y.Z ...)`.
- Where the window is built: its options (`devicerace --help`, offscreen) against the section
  `## \`devicerace\` (the window)`, and `devicerace --version` against the project version.
- Every DEVICERACE_ variable for users (audience "users" in engine/src/util/environment.cpp) is
  named in docs/CLI.md.

Each failure names what is missing from docs/CLI.md, or documented there and gone.

Run by ctest as: python3 test_cli_doc.py PATH/TO/devicerace-cli [PATH/TO/devicerace]
By hand or under pytest the programs come from DEVICERACE_CLI and DEVICERACE_GUI, else from
build/release/app/cli/devicerace-cli and build/release/app/gui/devicerace (skipped when absent).
"""
import os
import re
import subprocess
import sys
import unittest

from doc_programs import ROOT, read, require_program

DOC = os.path.join(ROOT, "docs", "CLI.md")
CLI = os.environ.get("DEVICERACE_CLI") or os.path.join(ROOT, "build", "release", "app", "cli", "devicerace-cli")
GUI = os.environ.get("DEVICERACE_GUI") or os.path.join(ROOT, "build", "release", "app", "gui", "devicerace")
GIVEN = False  # the programs were named on the command line (ctest): a missing one is a failure

# Options every command has; not listed per command in docs/CLI.md.
EVERYWHERE = {"--help", "--help-all"}


def run(program, *args, env=None):
    environment = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", QT_QPA_PLATFORM="offscreen", **(env or {}))
    r = subprocess.run([program, *args], capture_output=True, text=True, timeout=120, env=environment)
    return r


def help_text(program, *args):
    r = run(program, *args, "--help")
    if r.returncode != 0:
        raise AssertionError(f"{' '.join([os.path.basename(program), *args])} --help exited {r.returncode}:\n"
                             f"{r.stdout}{r.stderr}")
    return r.stdout


def project_version():
    m = re.search(r"project\(\s*DeviceRace\s+VERSION\s+([0-9][0-9.]*)", read(os.path.join(ROOT, "CMakeLists.txt")))
    if not m:
        raise AssertionError("CMakeLists.txt has no project(DeviceRace VERSION X.Y.Z ...)")
    return m.group(1)


# ---- docs/CLI.md -------------------------------------------------------------------------------

def doc_sections(text):
    """{title: body} for each `## ` heading (its ### subsections included)."""
    sections, title, body = {}, None, []
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("## "):
            if title is not None:
                sections[title] = "\n".join(body)
            title, body = line[3:].strip(), []
        elif title is not None:
            body.append(line)
    if title is not None:
        sections[title] = "\n".join(body)
    return sections


def table_first_cells(body, header):
    """The first cells of the rows of every table in `body` whose header's first cell is `header`."""
    cells, in_table, in_code = [], False, False
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        first = line.strip("|").split("|")[0].strip()
        if not in_table:
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            in_table = first.lower() == header and re.match(r"^\|\s*:?-+", nxt) is not None
            continue
        if re.match(r"^:?-+:?$", first):
            continue
        cells.append(first)
    return cells


def first_cell_names(body, header, pattern):
    """The names `pattern` (one group) finds at the start of each first cell of `header`'s table."""
    return {m.group(1) for m in (re.match(pattern, cell) for cell in table_first_cells(body, header)) if m}


def doc_options(body):
    return first_cell_names(body, "option", r"`(--?[A-Za-z][\w-]*)")


def doc_commands(sections):
    """{command: section body}; "" is the top level."""
    out = {}
    for title, body in sections.items():
        m = re.fullmatch(r"`devicerace-cli(?: ([a-z][\w-]*))?`", title)
        if m:
            out[m.group(1) or ""] = body
    return out


def doc_lane_keys(sections):
    body = sections.get("Lane keys")
    if body is None:
        raise AssertionError("docs/CLI.md has no section '## Lane keys'")
    return first_cell_names(body, "key", r"`([a-z][a-z0-9_]*)`$")


def window_section(sections):
    for title, body in sections.items():
        if title.startswith("`devicerace`"):
            return body
    raise AssertionError("docs/CLI.md has no section '## `devicerace` (the window)'")


# ---- the programs' help ------------------------------------------------------------------------

def cli11_groups(text):
    """{group title, lower case: [lines]} of a CLI11 help text ("Options:", "Subcommands:", ...)."""
    groups, current = {}, None
    for line in text.splitlines():
        m = re.fullmatch(r"([A-Za-z][A-Za-z ]*):", line.strip())
        if m and not line.startswith(" "):
            current = m.group(1).lower()
            groups.setdefault(current, [])
        elif current is not None:
            groups[current].append(line)
    return groups


def cli_options(text):
    out = set()
    for line in cli11_groups(text).get("options", []):
        m = re.match(r"^ {1,4}(-\S+)", line)
        if m:
            out.update(n for n in m.group(1).split(",") if n.startswith("--"))
    return out - EVERYWHERE


def cli_subcommands(text):
    out = set()
    for line in cli11_groups(text).get("subcommands", []):
        m = re.match(r"^ {1,4}([a-z][\w-]*)(\s|$)", line)
        if m:
            out.add(m.group(1))
    return out


def cli_lane_keys(race_help):
    lines = race_help.splitlines()
    start = next((i for i, l in enumerate(lines) if l.rstrip().endswith("Keys:")), None)
    if start is None:
        raise AssertionError("`devicerace-cli race --help` has no 'Keys:' list under --lane")
    keys = set()
    for line in lines[start + 1:]:
        if not line.strip() or re.match(r"^ {1,4}-", line):
            break
        m = re.match(r"^\s{3,}([a-z][a-z0-9_]*) +\S.*default: ", line)
        if not m:
            break
        keys.add(m.group(1))
    if not keys:
        raise AssertionError("no lane key read after 'Keys:' in `devicerace-cli race --help`")
    return keys


def qt_options(text):
    out = set()
    for line in text.splitlines():
        if re.match(r"^\s+-", line):
            names = re.split(r"\s{2,}", line.strip())[0]
            out.update(re.findall(r"--[\w-]+", names))
    return out - EVERYWHERE


def difference(what, program_has, doc_has, where):
    """One line per name the program has and the doc lacks, and per name the doc has and the program lacks."""
    problems = [f"docs/CLI.md lacks {what} `{n}` ({where} lists it)" for n in sorted(program_has - doc_has)]
    problems += [f"docs/CLI.md documents {what} `{n}`, which {where} does not list"
                 for n in sorted(doc_has - program_has)]
    return problems


class CliDocTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_program(CLI, GIVEN)
        cls.sections = doc_sections(read(DOC))
        cls.top_help = help_text(CLI)

    def test_every_command_is_documented(self):
        problems = difference("the command", cli_subcommands(self.top_help), set(doc_commands(self.sections)) - {""},
                              "`devicerace-cli --help`")
        self.assertFalse(problems, "\n" + "\n".join(problems))

    def test_every_option_is_documented(self):
        documented = doc_commands(self.sections)
        problems = []
        for command in [""] + sorted(cli_subcommands(self.top_help)):
            args = [command] if command else []
            name = " ".join(["devicerace-cli", *args])
            has = cli_options(help_text(CLI, *args))
            if command not in documented:
                continue  # test_every_command_is_documented names it
            problems += difference(f"the {name} option", has, doc_options(documented[command]), f"`{name} --help`")
        self.assertFalse(problems, "\n" + "\n".join(problems))

    def test_every_lane_key_is_documented(self):
        problems = difference("the lane key", cli_lane_keys(help_text(CLI, "race")), doc_lane_keys(self.sections),
                              "`devicerace-cli race --help`")
        self.assertFalse(problems, "\n" + "\n".join(problems))

    def test_version_is_the_projects(self):
        r = run(CLI, "--version")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), f"devicerace-cli {project_version()}",
                         "devicerace-cli --version is not CMakeLists.txt's project version")

    def test_every_users_environment_variable_is_documented(self):
        table = read(os.path.join(ROOT, "engine", "src", "util", "environment.cpp"))
        names = set(re.findall(r'EnvironmentSwitch\{"(DEVICERACE_\w+)",\s*"users"', table))
        self.assertTrue(names, "no users' row read from engine/src/util/environment.cpp")
        doc = read(DOC)
        missing = sorted(n for n in names if n not in doc)
        self.assertFalse(missing, f"docs/CLI.md lacks the environment variables {', '.join(missing)} "
                                  "(engine/src/util/environment.cpp: for users)")


class WindowDocTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not GUI or not os.access(GUI, os.X_OK):
            if GIVEN and GUI:
                raise AssertionError(f"{GUI}: no such program")
            raise unittest.SkipTest("the window is not built here")
        cls.sections = doc_sections(read(DOC))

    def test_every_window_option_is_documented(self):
        problems = difference("the window option", qt_options(help_text(GUI)),
                              doc_options(window_section(self.sections)), "`devicerace --help`")
        self.assertFalse(problems, "\n" + "\n".join(problems))

    def test_the_windows_help_and_version_print_without_a_display(self):
        """On a terminal without a screen (ssh, a container) the window's help and version print and
        exit 0; none of them opens a window."""
        bare = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
        for option, says in (("--help", "--screenshot"), ("-h", "--screenshot"), ("--help-all", "-platform"),
                             ("--version", project_version())):
            with self.subTest(option=option):
                r = subprocess.run([GUI, option], capture_output=True, text=True, timeout=60,
                                   env=dict(bare, OMP_WAIT_POLICY="PASSIVE"))
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn(says, r.stdout)
                self.assertNotIn("no display", r.stderr)

    def test_window_version_is_the_projects(self):
        r = run(GUI, "--version")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip().split()[-1], project_version(),
                         f"devicerace --version printed {r.stdout.strip()!r}, not CMakeLists.txt's project version")


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        CLI = os.path.abspath(sys.argv.pop(1))
        GIVEN = True
        GUI = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None
    unittest.main(verbosity=2)
