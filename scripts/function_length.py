#!/usr/bin/env python3
"""Lists every C++ / CUDA function longer than a limit (default 100 lines) in src/, include/
and python/src/, and exits 1 when there is one (the CTest test function_length runs this).

  scripts/function_length.py [--limit N] [--all] [PATH...]   PATHs default to src include
                                                             python/src (files or folders)
  scripts/function_length.py --self-test                     the scanner against its fixture,
                                                             tests/lint/function_length_fixture.cpp.in

A function's length is its lines from the first line of its declaration (template header
included) to its closing brace, both counted: what a reader holds. Lambdas, local classes and
nested blocks count toward the function that holds them. --all lists every function with its
length instead (longest first) and exits 0.

The scanner reads clang-formatted code (.clang-format): comments, string and character literals
(raw strings and digit separators included) and preprocessor lines are blanked first, then
braces are matched. A brace at namespace or class scope opens a namespace, a class (struct,
union, enum) body, an initializer, or a function body (a declaration with a parameter list:
functions, constructors with member initializer lists, operators, macros such as TEST(...) or
PYBIND11_MODULE(...) that open a body). Standard library only, no clang needed (pmccabe cannot
parse this C++20 code reliably).
"""

import argparse
import os
import re
import sys

EXTENSIONS = (".cpp", ".hpp", ".h", ".cc", ".cxx", ".hxx", ".cu", ".cuh")
DEFAULT_ROOTS = ("src", "include", "python/src")
FIXTURE = "tests/lint/function_length_fixture.cpp.in"
KEYWORDS_NOT_NAMES = {
    "if", "for", "while", "switch", "return", "sizeof", "alignof", "alignas", "decltype",
    "noexcept", "requires", "static_assert", "__attribute__", "__declspec", "throw", "catch",
    "defined", "explicit", "typeid",
}


def blank(text):
    """Returns @p text with comments, literals and preprocessor lines replaced by spaces
    (newlines kept, a string or character literal becomes "" or ''), so that braces and
    parentheses in what is left are code."""
    out = []
    i, n = 0, len(text)
    at_line_start = True  # only whitespace since the last newline (outside comments)
    token_start = -1  # start of the identifier or number being read, -1 outside one

    def keep_newlines(s):
        return "".join("\n" if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            at_line_start = True
            token_start = -1
            i += 1
            continue
        if at_line_start and c == "#":
            # A directive, with its backslash continuations (comments inside it go too).
            j = i
            while j < n:
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                if text.startswith("/*", j):
                    end = text.find("*/", j + 2)
                    j = n if end < 0 else end + 2
                    continue
                j += 1
            out.append(keep_newlines(text[i:j]))
            i = j
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(keep_newlines(text[i:j]))
            i = j
            continue
        if c == '"':
            prefix = text[token_start:i] if token_start >= 0 else ""
            if prefix in ("R", "u8R", "uR", "UR", "LR"):
                # Raw string: R"delim( ... )delim"
                open_paren = text.find("(", i)
                delim = text[i + 1:open_paren]
                end = text.find(")" + delim + '"', open_paren)
                j = n if end < 0 else end + len(delim) + 2
            else:
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            body = text[i:j]
            out.append('""' + keep_newlines(body[2:]) if len(body) >= 2 else body)
            i = j
            token_start = -1
            at_line_start = False
            continue
        if c == "'":
            if token_start >= 0 and text[token_start].isdigit():
                out.append(" ")  # digit separator (1'000'000)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("''" + " " * max(0, j - i - 2))
            i = j
            token_start = -1
            at_line_start = False
            continue
        if c.isalnum() or c == "_":
            if token_start < 0:
                token_start = i
        elif not (c == "." and token_start >= 0 and text[token_start].isdigit()):
            token_start = -1
        if not c.isspace():
            at_line_start = False
        out.append(c)
        i += 1
    return "".join(out)


def match_brace(code, i):
    """Index of the brace closing the one at @p i."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def strip_template_header(stmt):
    """@p stmt without leading `template <...>` headers."""
    while True:
        m = re.match(r"\s*template\s*<", stmt)
        if not m:
            return stmt
        depth, j = 1, m.end()
        while j < len(stmt) and depth > 0:
            depth += {"<": 1, ">": -1}.get(stmt[j], 0)
            j += 1
        stmt = stmt[j:]


def top_level(stmt):
    """@p stmt with what is inside (), [] and <> (roughly) replaced by spaces."""
    out, depth = [], 0
    for c in stmt:
        if c in "([":
            depth += 1
            out.append(c if depth == 1 else " ")
        elif c in ")]":
            depth -= 1
            out.append(c if depth == 0 else " ")
        else:
            out.append(c if depth == 0 else " ")
    return "".join(out)


NAME_RE = re.compile(
    r"((?:~?[A-Za-z_]\w*(?:<[^()]*?>)?::)*(?:operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*))\s*\(")


def function_name(stmt):
    """The name before the parameter list of the declaration @p stmt, or None."""
    for m in NAME_RE.finditer(stmt):
        name = m.group(1)
        if name.split("::")[-1] in KEYWORDS_NOT_NAMES:
            continue
        return re.sub(r"\s+", "", name)
    return None


def classify(stmt):
    """What a brace at namespace or class scope opens, given the declaration before it:
    'scope' (namespace, extern "C", class body: scanned for functions), 'skip' (enum body,
    initializer, requirement), or ('function', name)."""
    s = strip_template_header(stmt).strip()
    if re.match(r"(inline\s+)?namespace\b", s) or re.match(r'extern\s*""', s):
        return "scope"
    flat = top_level(s)
    if re.search(r"\benum\b", flat):
        return "skip"
    head = flat.split("(")[0]
    if re.search(r"\b(class|struct|union)\b", head):
        return "scope"
    eq = re.search(r"(?<![=!<>])=(?!=)", flat)
    if eq:
        # An initializer; a lambda's body at namespace scope is a function of the variable's name.
        if re.search(r"\]\s*(\(|\{|mutable|->|$)", s[eq.end():]) or s.rstrip().endswith("]"):
            name = re.findall(r"([A-Za-z_]\w*)\s*$", s[:eq.start()])
            return ("function", (name[0] if name else "<lambda>"))
        return "skip"
    if "(" in flat:
        name = function_name(s)
        if name:
            return ("function", name)
    return "skip"


def functions(code):
    """(name, first line, last line) of every function body in blanked @p code."""
    found = []
    line_of = []
    line = 1
    for c in code:
        line_of.append(line)
        if c == "\n":
            line += 1

    def scan(lo, hi):
        stmt_start = lo
        i = lo
        in_init_list = False
        while i < hi:
            c = code[i]
            if c in ";}":
                stmt_start, in_init_list = i + 1, False
            elif c == ":" and code[i - 1:i + 1] != "::" and code[i:i + 2] != "::":
                stmt = code[stmt_start:i]
                if re.search(r"\b(public|private|protected)\s*$", stmt):
                    stmt_start = i + 1
                elif ")" in stmt and re.search(r"\)\s*(noexcept\s*)?$", stmt):
                    in_init_list = True  # a constructor's member initializer list follows
            elif c == "{":
                before = code[stmt_start:i].rstrip()
                if in_init_list and re.search(r"[\w>]$", before):
                    i = match_brace(code, i) + 1  # a member's brace initializer
                    continue
                end = match_brace(code, i)
                kind = classify(code[stmt_start:i])
                if kind == "scope":
                    scan(i + 1, end)
                elif kind != "skip":
                    first = stmt_start
                    while first < i and code[first].isspace():
                        first += 1
                    found.append((kind[1], line_of[first], line_of[end]))
                i = end + 1
                stmt_start, in_init_list = i, False
                # `};` and `} x;` end the declaration too; a following `;` resets again.
                continue
            i += 1

    scan(0, len(code))
    return found


def scan_file(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        code = blank(f.read())
    return [(name, last - first + 1, first) for name, first, last in functions(code)]


def source_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for dirpath, dirnames, filenames in os.walk(p):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, name)


def self_test(root):
    """Scans the fixture and compares with its `// EXPECT: name length` lines."""
    path = os.path.join(root, FIXTURE)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    expected = sorted((m.group(1), int(m.group(2)))
                      for m in re.finditer(r"^// EXPECT: (\S+) (\d+)$", text, re.M))
    got = sorted((name, length) for name, length, _ in scan_file(path))
    if not expected:
        print(f"function_length: self-test: {FIXTURE} has no EXPECT line")
        return 1
    if got != expected:
        print("function_length: self-test FAILED")
        print("  expected: " + ", ".join(f"{n} {l}" for n, l in expected))
        print("  found:    " + ", ".join(f"{n} {l}" for n, l in got))
        return 1
    over = [(n, l) for n, l in got if l > 100]
    print(f"function_length: self-test passed ({len(got)} functions of {FIXTURE} found with "
          f"their lengths; over 100 lines: " + ", ".join(f"{n} {l}" for n, l in over) + ")")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.self_test:
        return self_test(root)
    os.chdir(root)
    paths = args.paths or [p for p in DEFAULT_ROOTS if os.path.exists(p)]
    rows = []
    for path in source_files(paths):
        for name, length, first in scan_file(path):
            rows.append((length, f"{path}:{first}", name))
    rows.sort(key=lambda r: (-r[0], r[1]))
    if args.all:
        for length, where, name in rows:
            print(f"{length:5d}  {where}  {name}")
        return 0
    long_ones = [r for r in rows if r[0] > args.limit]
    for length, where, name in long_ones:
        print(f"{where}: {name}: {length} lines (limit {args.limit})")
    if long_ones:
        print(f"function_length: {len(long_ones)} function(s) over {args.limit} lines; cut them "
              "into functions a reader can hold (CONTRIBUTING.md)")
        return 1
    print(f"function_length: no function over {args.limit} lines in {', '.join(paths)} "
          f"({len(rows)} functions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
