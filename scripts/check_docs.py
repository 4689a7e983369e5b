#!/usr/bin/python3
"""Checks that the documentation names only things that exist (the suite's docs_check).

Run from anywhere with Debian's /usr/bin/python3 (standard library only):

    /usr/bin/python3 scripts/check_docs.py                 # every doc, the option table
    /usr/bin/python3 scripts/check_docs.py --option-keys keys.tsv
    /usr/bin/python3 scripts/check_docs.py --docs some.md  # only these files (the self-test)

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
   table (agent_option_keys(), src/agent/option_keys.cpp). Without it the table is not checked.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", nargs="+", help="check only these files (paths only)")
    parser.add_argument("--option-keys", help="the library's option keys: key<TAB>aliases<TAB>doc")
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
    for p in problems:
        print(p)
    if problems:
        print(f"docs_check: FAILED, {len(problems)} problem(s) in {len(docs)} doc(s)")
        return 1
    print(f"docs_check: OK ({checked}; {len(docs)} doc(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
