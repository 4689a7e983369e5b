#!/usr/bin/python3
"""Checks that the documentation names only things that exist (the suite's docs_check).

Run from anywhere with Debian's /usr/bin/python3 (standard library only):

    /usr/bin/python3 scripts/check_docs.py                 # every doc, the option table
    /usr/bin/python3 scripts/check_docs.py --option-keys keys.tsv
    /usr/bin/python3 scripts/check_docs.py --docs some.md  # only these files (the self-test)
    /usr/bin/python3 scripts/check_docs.py --update-counts # write the counts into the docs

Exit status 0 when every check passes, 1 with one line per problem ("FILE:LINE: ...").

1. Repository paths. Docs: README.md, CONTRIBUTING.md and CHANGELOG.md (if present), docs/*.md and
   examples/*/README.md (or the files given with --docs). Outside fenced code blocks
   (``` ... ```; a layout tree or a shell session is not a claim about one path):

   * every relative Markdown link target ``[text](target)`` (not http:, https:, mailto:,
     nor a bare ``#anchor``) is resolved against the doc's own directory, its ``#anchor`` cut;
   * every token (split at whitespace, inside or outside backticks) that starts with one of
     the repository's top-level folders, PREFIXES below, at a word boundary (not after a
     letter, digit, ``/``, ``.``, ``-``, ``_`` or ``:``) is resolved against the repository
     root.

   Not checked, because they name files of another time or another project: a path after
   ``COMMIT:`` (``git show 5ee9e47:src/pull.cpp``), any path inside a backticked ``git ...``
   command (``git log fae4ef7.. -- src/pull.cpp``), and every path on a line that holds the
   marker ``<!-- docs-check: not-a-repo-path -->`` (e.g. a quoted MPICH error naming MPICH's
   own ``src/mpi/init/mutex.c``).

   A token is cleaned before it is checked: surrounding quotes, brackets and trailing
   punctuation (``.,;:)``), a trailing ``:LINE``/``:LINE-LINE``/``#anchor`` and a trailing
   ``::member`` are cut. Tokens holding a placeholder (``<...>``, ``$``, ``{name}`` without a
   comma, ``NAME``, ``...``) are skipped: they name a pattern, not a path. Forms expanded:

   * globs (``*``, ``?``, ``[...]``): at least one file must match;
   * braces with a comma, ``src/groups/shard_executor.{hpp,cpp}``: every expansion must exist;
   * ``dir/name.hpp/.cpp`` (a sibling that differs only in its extension): both must exist.

   A path is found when it exists as a file or a folder (a trailing ``/`` asks for a folder).
   Paths under build outputs (build/, out/) are not repository paths and start with no PREFIX.

2. The documentation list. Every docs/*.md is linked from README.md (``](docs/NAME.md``).

3. The option-key table. docs/agent.md holds the marker line ``<!-- option-keys -->``; the
   first Markdown table after it lists the keys of parse_agent_options, one row each: first
   column the key in backticks, second column its aliases in backticks (comma-separated, or
   empty). With ``--option-keys FILE`` (lines ``key<TAB>aliases(comma-separated)<TAB>doc``,
   as the library prints them) every key of FILE must have a row, with the same aliases, and
   every row's key must be in FILE. The test suite makes FILE with the program
   paramwin_option_keys (tests/agent/option_keys_main.cpp), which prints the library's option key
   table (agent_option_keys(), src/decision/option_keys.cpp). Without it the table is not checked.

4. Counts. A number in a doc that a test prints or that the sources determine is written
   between markers, ``<!-- count:NAME -->138<!-- /count -->``, and compared with its source:

   * computed here from the repository: ``gtest_definitions`` (``TEST``, ``TEST_F`` and
     ``TEST_P`` definitions in tests/, recursively), ``pytest_functions`` (``def test_`` in
     tests/python/), ``faults_rows`` (the rows of docs/reliability.md's table after the heading
     "## Faults injected");
   * read from ``--counts-dir DIR`` (files ``NAME.tsv`` holding ``NAME<TAB>VALUE`` lines,
     written by the tests themselves: ``bad_inputs_np2`` and ``bad_inputs_np4`` by
     bad_input_table_mpi_test when ``PARAMWIN_DOC_COUNTS_DIR`` is set);
   * ``--ctest-count NAME`` with ``--ctest-dir DIR``: the number of tests ``ctest -N`` lists in
     that build (``ctest_tests_mpich``, ``ctest_tests_openmpi``), counted from its
     CTestTestfile.cmake files.

   A marker whose NAME has no source in this run is reported as not checked (another build
   checks it); one whose NAME no source can ever give is a problem. ``--update-counts`` writes
   the sources' values into the markers instead of checking them (how a count gets into a doc).

5. Quoted messages. A message the code throws, prints or logs is quoted in a doc as a
   backticked double-quoted string, `` `"..."` ``, and so is every backticked cell in the
   column of a table whose header cell names a message (``message``, ``message contains``,
   ``message (excerpt), test``: the cell's backticked spans, quoted or not). ``...`` (or
   ``…``) stands for any text (a formatted value, a cut); ``<...>`` placeholders too. Every
   piece between wildcards must occur in one string literal of a source file (C++, Python,
   shell, CMake under include/, src/, python/, examples/, scripts/, benchmarks/, tests/, cmake/;
   adjacent literals joined, Python f-string fields and C++ ``{}`` left as they are; comments
   are not literals; shell and CMake files count as text less their comments; the self-test's
   fixtures, tests/docs_check/, are not sources) -- the literal text, so a value the code
   formats (``4.200000``) is written ``...``. A plain ``"..."`` quote right after one of the words ``throws``,
   ``prints``, ``printed``, ``says``, ``message``, ``note`` is reported: backtick it so it is
   checked (a message of other software -- MPICH, UCX -- goes on a line marked
   ``<!-- docs-check: not-ours -->``).

6. Names. Outside fenced code blocks, every backticked C++ qualified name ``A::b``
   (``paramwin::``, ``detail::``, ``torch::`` inside ``paramwin::`` and the other namespaces of
   include/, src/, python/src/ and examples/ cut first; a trailing ``()`` allowed) whose first
   component is not another library's (NAMESPACES_ELSEWHERE below: ``std``, ``Kokkos``,
   ``torch`` without ``paramwin::``, ``c10``, ...) must name a type declared there (``class``,
   ``struct``, ``enum``, ``using``) whose declaring file holds the member as a word, or occur
   as ``A::b`` in those sources. A lone name after a namespace (``paramwin::bind``) must occur
   as a word. Python names: ``paramwin.X[.Y...]`` must be defined by the package (a ``def``,
   ``class`` or assignment in python/paramwin/, or a name the extension registers in
   python/src/: ``"X"``), each ``.Y`` a word of python/; ``Class.member`` where Class is a
   Python class of the package: member is a ``def``/attribute of python/ (``"member"`` or
   ``def member``).

7. Commits. A word of 7 to 40 hexadecimal digits with at least one digit and one letter
   a-f (outside fenced blocks) is a commit and must exist in this clone (``git cat-file -e
   HASH^{commit}``). In a shallow clone the check is skipped, and the report says so. A hex
   word right after ``digest``, ``xxh64``, ``checksum``, ``hash``, ``sha...`` or ``0x`` is a
   value, not a commit.

8. Run headers. A *figure table* is a Markdown table with at least two body cells that hold
   a measured quantity: a number with a unit of time or rate (``ns``, ``µs``, ``us``, ``ms``,
   ``s``, ``min``, ``MB/s``, ``MiB/s``, ``GB/s``, ``GiB/s``) or a ratio (``1.05x``). Every
   figure table needs a *run header* before it, in its section: a paragraph that starts with
   ``**Run:**`` and holds the command (a backticked span), the commit (as in 7), the date
   (``YYYY-MM-DD``) and the machine (the word ``machine`` and what follows it, or a link to
   the page's machine section). A run header after a heading of level L covers the tables up
   to the next heading of level L or higher (a header under the page title covers the page).
   Instead of a run header, a table may carry its runs row by row: its header names a command
   column (``command`` or ``reproduce``) and a commit column (``commit`` or ``recorded``), every
   body row holds a backticked command in the first and a commit and a date in the second (or
   a count marker, which check 4 compares with its test, or a link to the section of the page
   that holds that row's run), and
   the page names its machine (the word ``machine`` or ``VM``) before the table. A table that
   holds durations but no measurements (an option's default, a test's setting, arithmetic on
   paper) is exempted by the line ``<!-- docs-check: not-figures -->`` right before it.
"""

import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIXES = ("src/", "include/", "tests/", "scripts/", "examples/", "benchmarks/", "python/",
            "docs/", "cmake/", ".ci/")
MARKER = "<!-- option-keys -->"
SKIP_LINE = "<!-- docs-check: not-a-repo-path -->"
GIT_SPAN = re.compile(r"`git [^`]*`")

LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
TOKEN_START = re.compile(r"(?<![A-Za-z0-9/._:-])(?:" + "|".join(re.escape(p) for p in PREFIXES) +
                         r")")
STRIP_LEAD = "`'\"([<"
STRIP_TRAIL = "`'\".,;:)]>!?"


def default_docs():
    docs = [os.path.join(ROOT, "README.md")]
    for name in ("CONTRIBUTING.md", "CHANGELOG.md"):
        if os.path.exists(os.path.join(ROOT, name)):
            docs.append(os.path.join(ROOT, name))
    docs += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    docs += sorted(glob.glob(os.path.join(ROOT, "examples", "*", "README.md")))
    return docs


def prose_lines(path):
    """(line number, text) of every line outside fenced code blocks, with backticked git
    commands (which may span lines) and marked lines blanked."""
    kept = []
    fenced = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
                kept.append("\n")
            elif fenced or SKIP_LINE in line:
                kept.append("\n")
            else:
                kept.append(line)
    text = GIT_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), "".join(kept))
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield number, line


def clean(token):
    token = token.strip(STRIP_LEAD)
    token = token[2:] if token.startswith("**") else token
    token = token[:-2] if token.endswith("**") else token
    token = re.sub(r"::.*$", "", token)
    token = token.rstrip(STRIP_TRAIL)
    token = re.sub(r"(#L?\d+(-L?\d+)?|#[\w-]*|:\d+(-\d+)?)$", "", token)
    return token.rstrip(STRIP_TRAIL)


def is_placeholder(token):
    if any(c in token for c in "<>$") or "..." in token or "NAME" in token:
        return True
    return re.search(r"\{[^},]*\}", token) is not None


def expand(token):
    """The concrete paths (or glob patterns) one token stands for."""
    brace = re.search(r"\{([^{}]*,[^{}]*)\}", token)
    if brace:
        out = []
        for alt in brace.group(1).split(","):
            out += expand(token[:brace.start()] + alt.strip() + token[brace.end():])
        return out
    sibling = re.match(r"^(.*/)?([^/]+)\.([A-Za-z0-9]+)/\.([A-Za-z0-9]+)$", token)
    if sibling:
        folder = sibling.group(1) or ""
        return [folder + sibling.group(2) + "." + sibling.group(3),
                folder + sibling.group(2) + "." + sibling.group(4)]
    return [token]


def exists(path):
    full = os.path.join(ROOT, path)
    if any(c in path for c in "*?["):
        return bool(glob.glob(full))
    if path.endswith("/"):
        return os.path.isdir(full)
    return os.path.exists(full)


def candidates(doc, line):
    """Paths named on one prose line of @p doc: repository-relative, or absolute for a link
    of a doc outside the repository (the self-test's)."""
    for m in LINK.finditer(line):
        target = m.group(1)
        if re.match(r"^(https?:|mailto:|#)", target):
            continue
        target = target.split("#", 1)[0]
        if not target:
            continue
        full = os.path.normpath(os.path.join(os.path.dirname(doc), target))
        slash = "/" if target.endswith("/") else ""
        if full == ROOT or full.startswith(ROOT + os.sep):
            yield os.path.relpath(full, ROOT) + slash
        elif doc.startswith(ROOT + os.sep):
            yield os.path.relpath(full, ROOT) + slash  # reported: it leaves the repository
        else:
            yield full + slash
    for m in TOKEN_START.finditer(line):
        rest = line[m.start():]
        token = re.split(r"[\s`|]", rest, maxsplit=1)[0]
        # A link target is checked above, relative to the doc; here only the text.
        token = token.split("](", 1)[0]
        yield token


def check_paths(docs):
    problems = []
    for doc in docs:
        shown = os.path.relpath(doc, ROOT) if doc.startswith(ROOT) else doc
        for number, line in prose_lines(doc):
            seen = set()
            for raw in candidates(doc, line):
                token = clean(raw)
                if not token or token in seen or is_placeholder(token):
                    continue
                seen.add(token)
                if token.startswith(".."):
                    problems.append(f"{shown}:{number}: path '{token}' leaves the repository")
                    continue
                for path in expand(token):
                    if not exists(path):
                        problems.append(f"{shown}:{number}: no such path in the repository: "
                                        f"'{path}'")
    return problems


def check_doc_list():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    problems = []
    for doc in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        name = "docs/" + os.path.basename(doc)
        if "](" + name not in readme:
            problems.append(f"README.md: {name} is not in the documentation list (no link to it)")
    return problems


def backticked(cell):
    return [t.strip() for t in re.findall(r"`([^`]+)`", cell)]


def read_table(doc):
    """{key: (aliases, line)} of the first table after MARKER, or None without a marker."""
    lines = open(doc, encoding="utf-8").read().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == MARKER)
    except StopIteration:
        return None
    rows = {}
    in_table = False
    for i in range(start + 1, len(lines)):
        line = lines[i].strip()
        if not line.startswith("|"):
            if in_table:
                break
            continue
        in_table = True
        cells = [c.strip() for c in line.strip("|").split("|")]
        if re.fullmatch(r"[-: ]+", cells[0]) or not backticked(cells[0]):
            continue  # the separator, or the header
        key = backticked(cells[0])[0]
        aliases = set(backticked(cells[1])) if len(cells) > 1 else set()
        if key in rows:
            rows[key] = (rows[key][0], -(i + 1))  # a duplicate: reported below
        else:
            rows[key] = (aliases, i + 1)
    return rows


def keys_from_file(path):
    keys = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                raise SystemExit(f"{path}:{number}: expected 'key<TAB>aliases<TAB>doc', got "
                                 f"{line!r}")
            aliases = {a.strip() for a in fields[1].split(",") if a.strip()}
            keys[fields[0].strip()] = aliases
    return keys


def check_table(doc, expected, source):
    shown = os.path.relpath(doc, ROOT)
    rows = read_table(doc)
    if rows is None:
        return [f"{shown}: no '{MARKER}' line (it marks the option-key table)"]
    if not rows:
        return [f"{shown}: no table with backticked keys after '{MARKER}'"]
    problems = []
    for key, (aliases, line) in sorted(rows.items()):
        if line < 0:
            problems.append(f"{shown}:{-line}: key '{key}' listed twice")
        if key not in expected:
            problems.append(f"{shown}:{abs(line)}: key '{key}' is not an option key ({source})")
        elif aliases != expected[key]:
            problems.append(f"{shown}:{abs(line)}: key '{key}': aliases "
                            f"{sorted(aliases)} in the doc, {sorted(expected[key])} in {source}")
    for key in sorted(set(expected) - set(rows)):
        problems.append(f"{shown}: option key '{key}' ({source}) is missing from the table")
    return problems


COUNT = re.compile(r"<!-- count:([a-z0-9_]+) -->([^<]*)<!-- /count -->")
# Names a test writes or a build's ctest gives (checked only where that source is present).
RUN_COUNTS = {"bad_inputs_np2", "bad_inputs_np4", "ctest_tests_mpich", "ctest_tests_openmpi"}
GTEST_DEF = re.compile(r"^\s*(?:TEST|TEST_F|TEST_P)\(", re.M)


def table_rows_after(doc, heading):
    """Data rows of the first Markdown table after the line ``heading``."""
    with open(doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if heading not in lines:
        return None
    rows, seen_table = 0, False
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("|"):
            seen_table = True
            if not re.match(r"^\|\s*-", line):
                rows += 1
        elif seen_table:
            break
    return max(0, rows - 1)  # the header row


def computed_counts():
    counts = {}
    sources = glob.glob(os.path.join(ROOT, "tests", "**", "*.cpp"), recursive=True)
    counts["gtest_definitions"] = sum(
        len(GTEST_DEF.findall(open(p, encoding="utf-8").read())) for p in sources)
    counts["pytest_functions"] = sum(
        len(re.findall(r"^def test_", open(p, encoding="utf-8").read(), re.M))
        for p in glob.glob(os.path.join(ROOT, "tests", "python", "*.py")))
    faults = table_rows_after(os.path.join(ROOT, "docs", "reliability.md"), "## Faults injected")
    if faults is not None:
        counts["faults_rows"] = faults
    return counts


def ctest_total(build_dir):
    """The number of CTest tests of a build, as `ctest -N` prints it: the add_test() calls of
    its CTestTestfile.cmake and of those its subdirs() name. Read from the files, not by
    running ctest inside the suite, which would rewrite the running suite's
    Testing/Temporary/LastTest.log."""
    top = os.path.join(build_dir, "CTestTestfile.cmake")
    if not os.path.isfile(top):
        raise SystemExit(f"docs_check: no CTestTestfile.cmake in {build_dir}: configure it first")
    total, pending = 0, [build_dir]
    while pending:
        directory = pending.pop()
        path = os.path.join(directory, "CTestTestfile.cmake")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("add_test("):
                    total += 1
                found = re.match(r'subdirs\("([^"]+)"\)', line)
                if found:
                    pending.append(os.path.join(directory, found.group(1)))
    return total


def run_counts(counts_dir, ctest_dir, ctest_name):
    counts = {}
    for path in sorted(glob.glob(os.path.join(counts_dir, "*.tsv"))) if counts_dir else []:
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, _, value = line.strip().partition("\t")
                if name and value:
                    counts[name] = int(value)
    if ctest_name:
        counts[ctest_name] = ctest_total(ctest_dir)
    return counts


def check_counts(docs, counts, update):
    """Problems with count markers; with update, rewrites them from counts instead."""
    problems, unchecked = [], set()
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        shown = os.path.relpath(doc, ROOT)

        def replace(match, text=text, shown=shown):
            name, value = match.group(1), match.group(2).strip()
            line = text.count("\n", 0, match.start()) + 1
            if name in counts:
                if update:
                    return f"<!-- count:{name} -->{counts[name]}<!-- /count -->"
                if value != str(counts[name]):
                    problems.append(f"{shown}:{line}: count '{name}' says {value}, its source "
                                    f"says {counts[name]} (scripts/check_docs.py --update-counts)")
            elif name in RUN_COUNTS:
                unchecked.add(name)
            else:
                problems.append(f"{shown}:{line}: count '{name}' has no source")
            return match.group(0)

        new = COUNT.sub(replace, text)
        if update and new != text:
            with open(doc, "w", encoding="utf-8") as f:
                f.write(new)
    return problems, unchecked

# ---------------------------------------------------------------------------------------------
# 5-8: prose. The sources' text is read once.

SOURCE_DIRS = ("include", "src", "python", "examples", "scripts", "benchmarks", "tests", "cmake")
NAME_DIRS = ("include", "src", "python", "examples")
SOURCE_EXT = (".hpp", ".cpp", ".h", ".cu", ".cuh", ".c", ".py", ".pyi", ".sh", ".cmake", ".txt",
              ".in", ".sbatch")
NOT_OURS = "<!-- docs-check: not-ours -->"
NOT_FIGURES = "<!-- docs-check: not-figures -->"
WILDCARD = re.compile(r"\.\.\.|…|<[^<>]*>")
FILE_NAME = re.compile(r"[\w./-]+\.(?:py|cpp|hpp|sh|md|cmake|h5|json|jsonl)")  # a test, not a message
QUOTED_SPAN = re.compile(r"`\"([^`]*)\"`")
PLAIN_AFTER_WORD = re.compile(r"\b(throws|prints|printed|says|message|note)\b[^\"`.;]{0,12}\"([^\"]{4,})\"")
# A string literal (group 1, or 2 for Python's single quotes), or a comment or character
# literal, matched only so that a quote inside it does not start a string.
LITERAL_CPP = re.compile(r'"((?:[^"\\\n]|\\.)*)"|//[^\n]*|/\*.*?\*/|\'(?:[^\'\\\n]|\\.)*\'', re.S)
LITERAL_PY = re.compile(r'"((?:[^"\\\n]|\\.)*)"|\'((?:[^\'\\\n]|\\.)*)\'|#[^\n]*')
ADJACENT = re.compile(r'(?<!")"[ \t]*\n[ \t]*[fFrR]?"(?!")|(?<!")"[ \t]+[fFrR]?"(?!")')  # "a " "b", C++ or Python (f-strings too)
NAMESPACES_ELSEWHERE = {"std", "Kokkos", "torch", "c10", "at", "CUDA", "cuda", "testing", "py",
                        "pybind11", "MPI", "h5py", "numpy", "np", "mpi4py", "ray", "optuna",
                        "benchmark", "nlohmann", "fmt"}
HEX = re.compile(r"(?<![\w/.#-])([0-9a-f]{7,40})(?![\w/-])")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
UNIT = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ns|µs|us|ms|s|min|[MG]i?B/s)(?![\w/])"
                  r"|(?<![\w.])\d+(?:\.\d+)?x(?![\w])")
RUN_HEADER = re.compile(r"^\*\*Run:?\*\*")
_SOURCES = {}


def source_files(dirs):
    yield os.path.join(ROOT, "CMakeLists.txt")
    for top in dirs:
        for path in glob.glob(os.path.join(ROOT, top, "**", "*"), recursive=True):
            if os.path.isfile(path) and (path.endswith(SOURCE_EXT) or
                                         os.path.basename(path) == "CMakeLists.txt"):
                yield path


def read_source(path):
    if path not in _SOURCES:
        try:
            with open(path, encoding="utf-8") as f:
                _SOURCES[path] = f.read()
        except UnicodeDecodeError:
            _SOURCES[path] = ""
    return _SOURCES[path]


def unescape(text):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def literals_of(path):
    """The string literals of one source file (adjacent C++ literals joined), as one text
    with the literals separated by NUL; shell and CMake files as they are."""
    text = read_source(path)
    if path.endswith((".py", ".pyi")):
        text = ADJACENT.sub("", text)
        found = [m.group(1) if m.group(1) is not None else m.group(2)
                 for m in LITERAL_PY.finditer(text) if m.group(1) is not None or m.group(2) is not None]
    elif path.endswith((".hpp", ".cpp", ".h", ".cu", ".cuh", ".c")):
        text = ADJACENT.sub("", text)
        found = [m.group(1) for m in LITERAL_CPP.finditer(text) if m.group(1) is not None]
    else:  # shell and CMake: the text less its comments; CMake joins message("a " "b") too
        return ADJACENT.sub("", re.sub(r"(^|[ \t])#[^\n]*", r"\1", text, flags=re.M))
    return "\0".join(unescape(f) for f in found)


_CORPUS = []


def message_corpus():
    if not _CORPUS:
        selftest = os.path.join(ROOT, "tests", "docs_check") + os.sep  # its lies are quoted there
        _CORPUS.append("\0".join(literals_of(p) for p in source_files(SOURCE_DIRS)
                                  if not p.startswith(selftest)))
    return _CORPUS[0]


def message_found(quote):
    pieces = [p.strip() for p in WILDCARD.split(quote) if p.strip()]
    corpus = message_corpus()
    return [p for p in pieces if p not in corpus]


def message_columns(header):
    cells = [c.strip().lower() for c in header.strip().strip("|").split("|")]
    return [i for i, c in enumerate(cells) if c.startswith("message") or c == "says"
            or c.endswith("(message contains)") or c == "message contains"]


def table_cells(line):
    # A `|` inside backticks is not a cell boundary.
    cells, cur, tick = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            tick = not tick
        if ch == "|" and not tick:
            cells.append(cur)
            cur = ""
        else:
            cur += ch
    cells.append(cur)
    return [c.strip() for c in cells]


def check_messages(docs):
    problems = []
    for doc in docs:
        shown = os.path.relpath(doc, ROOT) if doc.startswith(ROOT) else doc
        columns = []
        for number, line in prose_lines(doc):
            quotes = [m.group(1) for m in QUOTED_SPAN.finditer(line)]
            if line.lstrip().startswith("|"):
                cells = table_cells(line)
                if not columns and not re.fullmatch(r"[-: |]+", line.strip()):
                    columns = message_columns(line)
                    header_line = number
                elif number != header_line and not re.fullmatch(r"[-: |]+", line.strip()):
                    for i in columns:
                        if i < len(cells):
                            quotes += [q.strip('"') for q in backticked(cells[i])
                                       if not (q.startswith('"') and q.endswith('"'))
                                       and not FILE_NAME.fullmatch(q)]
            else:
                columns = []
            if NOT_OURS in line:
                continue
            for quote in quotes:
                missing = message_found(quote)
                if missing:
                    problems.append(f"{shown}:{number}: quoted message \"{quote}\" is not in the "
                                    f"sources (no string literal holds {missing[0]!r}; '...' "
                                    f"stands for formatted text)")
            for m in PLAIN_AFTER_WORD.finditer(line):
                problems.append(f"{shown}:{number}: message quoted after '{m.group(1)}' without "
                                f"backticks: \"{m.group(2)}\" (write `\"...\"` so it is checked, "
                                f"or mark the line {NOT_OURS})")
    return problems


_NAMES = {}
FILE_EXTENSIONS = {"hpp", "cpp", "h", "cu", "py", "pyi", "md", "txt", "cmake", "json", "jsonl",
                   "csv", "png", "h5", "sh", "so", "log", "tsv", "toml", "in"}


def name_index():
    """Declared types -> the files declaring them; namespaces; the words of the sources."""
    if _NAMES:
        return _NAMES
    types, namespaces, words, text_all = {}, set(), set(), []
    py_names, py_classes, py_words = set(), set(), set()
    decl = re.compile(r"\b(?:class|struct|union|enum(?:\s+class)?|using|typedef[^;]*?)\s+"
                      r"(?:\[\[[^\]]*\]\]\s*)?([A-Za-z_]\w*)(?!\w|\s*::)")
    for path in source_files(NAME_DIRS):
        text = read_source(path)
        text_all.append(text)
        words.update(re.findall(r"[A-Za-z_~]\w*", text))
        for name in decl.findall(text):
            types.setdefault(name, []).append(path)
        for ns in re.findall(r"\bnamespace\s+([\w:]+)", text):
            namespaces.update(ns.split("::"))
        if path.startswith(os.path.join(ROOT, "python") + os.sep):
            py_words.update(re.findall(r"[A-Za-z_]\w*", text))
            if path.endswith((".py", ".pyi")):
                py_names.update(re.findall(r"^\s*(?:def|class)\s+(\w+)", text, re.M))
                py_names.update(re.findall(r"^(\w+)\s*[:=]", text, re.M))
                py_names.update(re.findall(r"import\s+(\w+)\s+as\s+(\w+)", text) and
                                [b for _, b in re.findall(r"import\s+(\w+)\s+as\s+(\w+)", text)])
                py_names.update(w for imp in re.findall(r"from\s+[\w.]+\s+import\s+\(?([\w\s,]+)\)?",
                                                        text) for w in re.findall(r"\w+", imp))
                py_classes.update(re.findall(r"^\s*class\s+(\w+)", text, re.M))
                # A module-level __getattr__ (PEP 562) serves the names it compares against,
                # e.g. a deprecated alias: `if name == "TimeoutError":`.
                if re.search(r"^def __getattr__\(", text, re.M):
                    py_names.update(re.findall(r"\bname\s*==\s*[\"'](\w+)[\"']", text))
            else:
                registered = re.findall(r"\"(\w+)\"", text)
                py_names.update(registered)
                py_classes.update(re.findall(r"class_<[^>]*>\s*\(\s*\w+\s*,\s*\"(\w+)\"", text))
                py_classes.update(re.findall(r"enum_<[^>]*>\s*\(\s*\w+\s*,\s*\"(\w+)\"", text))
                py_classes.update(re.findall(r"register_exception<[^>]*>\s*\(\s*\w+\s*,\s*\"(\w+)\"",
                                             text))
    _NAMES.update(types=types, namespaces=namespaces - {"paramwin"}, words=words,
                  text="\n".join(text_all), py_names=py_names, py_classes=py_classes,
                  py_words=py_words)
    return _NAMES


def cpp_name_problem(span):
    idx = name_index()
    parts = span.lstrip(":").removesuffix("()").split("::")
    ours = parts[0] == "paramwin"
    if ours:
        parts = parts[1:]
    elif parts[0] in NAMESPACES_ELSEWHERE:
        return None
    while len(parts) > 1 and parts[0] in idx["namespaces"] and parts[0] not in idx["types"]:
        parts = parts[1:]
    if len(parts) == 1:
        if parts[0] in idx["namespaces"] or parts[0] in idx["words"]:
            return None
        return f"'{parts[0]}' occurs nowhere in include/, src/, python/, examples/"
    for owner, member in zip(parts, parts[1:]):
        if owner not in idx["types"]:
            return f"no type '{owner}' is declared in include/, src/, python/, examples/"
        word = re.compile(r"(?<![\w~])" + re.escape(member) + r"(?!\w)")
        qualified = re.compile(r"(?<!\w)" + re.escape(f"{owner}::{member}") + r"(?!\w)")
        if not any(word.search(read_source(p)) for p in idx["types"][owner]) and \
                not qualified.search(idx["text"]):
            return f"'{owner}' has no member '{member}' (not in {os.path.relpath(idx['types'][owner][0], ROOT)})"
    return None


def py_name_problem(span):
    idx = name_index()
    parts = span.removesuffix("()").split(".")
    if parts[-1] in FILE_EXTENSIONS:
        return None  # a file name (paramwin.hpp), not a Python name
    if parts[0] == "paramwin":
        rest = parts[1:]
        if not rest:
            return None
        if rest[0] not in idx["py_names"] and rest[0] != "__version__":
            return f"paramwin has no name '{rest[0]}' (python/paramwin/, python/src/)"
        for member in rest[1:]:
            if member not in idx["py_words"]:
                return f"'{member}' occurs nowhere in python/"
        return None
    if parts[0] in idx["py_classes"] and len(parts) == 2 and not parts[1][:1].isupper():
        # (Class.TestName, upper case, is a GoogleTest test, not a Python member)
        if parts[1] not in idx["py_words"]:
            return f"Python class '{parts[0]}' has no member '{parts[1]}'"
    return None


CPP_SPAN = re.compile(r"`((?:::)?[A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)+(?:\(\))?)`")
PY_SPAN = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?)`")


def check_names(docs):
    problems = []
    for doc in docs:
        shown = os.path.relpath(doc, ROOT) if doc.startswith(ROOT) else doc
        for number, line in prose_lines(doc):
            for m in CPP_SPAN.finditer(line):
                why = cpp_name_problem(m.group(1))
                if why:
                    problems.append(f"{shown}:{number}: `{m.group(1)}`: {why}")
            for m in PY_SPAN.finditer(line):
                why = py_name_problem(m.group(1))
                if why:
                    problems.append(f"{shown}:{number}: `{m.group(1)}`: {why}")
    return problems


def is_shallow():
    out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--is-shallow-repository"],
                         capture_output=True, text=True, check=False)
    return out.returncode != 0 or out.stdout.strip() != "false"


NOT_COMMIT_BEFORE = re.compile(r"(?:digest|xxh64|checksum|hash|sha\w*|0x)\W{0,3}$", re.I)


def commit_words(line):
    return [m.group(1) for m in HEX.finditer(line)
            if re.search(r"\d", m.group(1)) and re.search(r"[a-f]", m.group(1))
            and not NOT_COMMIT_BEFORE.search(line[:m.start()])]


def check_commits(docs):
    """Problems for cited commits that are not in this clone; None in a shallow clone."""
    if is_shallow():
        return None
    cited = []
    for doc in docs:
        shown = os.path.relpath(doc, ROOT) if doc.startswith(ROOT) else doc
        with open(doc, encoding="utf-8") as f:
            fenced = False
            for number, line in enumerate(f, 1):
                if line.lstrip().startswith("```"):
                    fenced = not fenced
                    continue
                if not fenced:
                    cited += [(shown, number, h) for h in commit_words(line)]
    if not cited:
        return []
    hashes = sorted({h for _, _, h in cited})
    out = subprocess.run(["git", "-C", ROOT, "cat-file", "--batch-check"],
                         input="".join(h + "^{commit}\n" for h in hashes), capture_output=True,
                         text=True, check=False)
    missing = {line.split()[0].removesuffix("^{commit}") for line in out.stdout.splitlines()
               if line.endswith(" missing") or " ambiguous" in line}
    return [f"{shown}:{number}: commit {h} is not in this repository (git cat-file -e)"
            for shown, number, h in cited if h in missing]


def run_header_ok(line):
    return (RUN_HEADER.match(line) and re.search(r"`[^`]+`", line) and commit_words(line)
            and DATE.search(line) and re.search(r"[Mm]achine|\]\([^)]*#[^)]*machine", line))


def per_row_runs(lines, start, end):
    """For a table whose header names a command column (``command``, ``reproduce``) and a
    commit column (``commit``, ``recorded``): (line, problem) for each body row that lacks a
    backticked command or a commit and a date there, and for a page that names no machine
    before the table; None for any other table (it needs a run header)."""
    head = [c.lower() for c in table_cells(lines[start])]
    command = [k for k, c in enumerate(head) if c in ("command", "reproduce")]
    commit = [k for k, c in enumerate(head) if c in ("commit", "recorded")]
    if not command or not commit:
        return None
    problems = []
    if not re.search(r"\bmachine\b|\bVM\b", "\n".join(lines[:start])):
        problems.append((start + 1, "per-row runs, but the page names no machine before the table"))
    for n in range(start + 2, end + 1):
        cells = table_cells(lines[n])
        cmd = cells[command[0]] if command[0] < len(cells) else ""
        rec = cells[commit[0]] if commit[0] < len(cells) else ""
        if "<!-- count:" in lines[n] or re.search(r"\]\(#[^)]+\)", rec):
            continue  # a count docs_check compares with its test, or the run is in that section
        if not re.search(r"`[^`]+`", cmd) or not commit_words(rec) or not DATE.search(rec):
            problems.append((n + 1, "figure row without its run: a backticked command in the "
                                    f"'{head[command[0]]}' column, a commit and a date in the "
                                    f"'{head[commit[0]]}' column"))
    return problems


def check_run_headers(docs):
    problems = []
    for doc in docs:
        shown = os.path.relpath(doc, ROOT) if doc.startswith(ROOT) else doc
        with open(doc, encoding="utf-8") as f:
            lines = f.read().split("\n")
        header_level = None  # the heading level the current run header lives under
        level, fenced, i = 0, False, 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and re.match(r"^#{1,6} ", line):
                level = len(line) - len(line.lstrip("#"))
                if header_level is not None and level <= header_level:
                    header_level = None
            elif not fenced and RUN_HEADER.match(line):
                paragraph, k = line, i + 1
                while k < len(lines) and lines[k].strip() and not lines[k].startswith(("|", "#")):
                    paragraph += " " + lines[k].strip()
                    k += 1
                if not run_header_ok(paragraph):
                    problems.append(f"{shown}:{i + 1}: run header lacks the command (backticked), "
                                    f"the commit, the date (YYYY-MM-DD) or the machine")
                header_level = level
            elif not fenced and line.startswith("|"):
                start = i
                while i + 1 < len(lines) and lines[i + 1].startswith("|"):
                    i += 1
                body = lines[start + 2:i + 1]
                measured = sum(1 for row in body for cell in table_cells(row) if UNIT.search(cell))
                exempt = start > 0 and lines[start - 1].strip() == NOT_FIGURES
                per_row = per_row_runs(lines, start, i)
                if per_row is not None and measured >= 2 and not exempt:
                    problems += [f"{shown}:{n}: {why}" for n, why in per_row]
                elif measured >= 2 and not exempt and header_level is None:
                    problems.append(f"{shown}:{start + 1}: figure table without a run header "
                                    f"('**Run:** `command`, commit, date, machine' before it in "
                                    f"its section)")
            i += 1
    return problems



def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", nargs="+", help="check only these files (paths only)")
    parser.add_argument("--option-keys", help="the library's option keys: key<TAB>aliases<TAB>doc")
    parser.add_argument("--counts-dir", help="NAME.tsv files the tests wrote (NAME<TAB>VALUE)")
    parser.add_argument("--ctest-dir", default=".", help="the build that --ctest-count counts")
    parser.add_argument("--ctest-count", help="count name for that build's number of tests "
                        "(ctest -N's total, read from its CTestTestfile.cmake files)")
    parser.add_argument("--update-counts", action="store_true",
                        help="write the counts into the docs' markers instead of checking")
    args = parser.parse_args()

    docs = [os.path.abspath(d) for d in args.docs] if args.docs else default_docs()
    problems = check_paths(docs)
    checked = "paths"
    if not args.docs:
        problems += check_doc_list()
        checked += ", documentation list"
        agent_md = os.path.join(ROOT, "docs", "agent.md")
        if args.option_keys:
            problems += check_table(agent_md, keys_from_file(args.option_keys), args.option_keys)
            checked += ", option keys"
    problems += check_messages(docs)
    problems += check_names(docs)
    commits = check_commits(docs)
    problems += check_run_headers(docs)
    checked += ", quoted messages, names, run headers"
    if commits is None:
        checked += ", commits (not checked: shallow clone)"
    else:
        problems += commits
        checked += ", commits"
    counts = computed_counts()
    counts.update(run_counts(args.counts_dir, args.ctest_dir, args.ctest_count))
    count_problems, unchecked = check_counts(docs, counts, args.update_counts)
    problems += count_problems
    checked += ", counts" + (f" (not here: {', '.join(sorted(unchecked))})" if unchecked else "")
    for p in problems:
        print(p)
    if problems:
        print(f"docs_check: FAILED, {len(problems)} problem(s) in {len(docs)} doc(s)")
        return 1
    print(f"docs_check: OK ({checked}; {len(docs)} doc(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
