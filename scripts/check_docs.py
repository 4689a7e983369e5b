#!/usr/bin/python3
"""Checks that the documentation names only things that exist (the suite's docs_check).

Run from anywhere with Debian's /usr/bin/python3 (standard library only):

    /usr/bin/python3 scripts/check_docs.py                 # every doc, the option table
    /usr/bin/python3 scripts/check_docs.py --option-keys keys.tsv
    /usr/bin/python3 scripts/check_docs.py --docs some.md  # only these files (the self-test)
    /usr/bin/python3 scripts/check_docs.py --update-counts # write the counts into the docs

Exit status 0 when every check passes, 1 with one line per problem ("FILE:LINE: ...").

1. Repository paths. Docs: README.md, CONTRIBUTING.md (if present), docs/*.md and
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
"""

import argparse
import glob
import os
import re
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
    if os.path.exists(os.path.join(ROOT, "CONTRIBUTING.md")):
        docs.append(os.path.join(ROOT, "CONTRIBUTING.md"))
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
