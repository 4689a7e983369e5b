#!/usr/bin/python3
"""Self-test of scripts/check_docs.py's prose checks (CTest docs_check_prose_selftest).

Feeds it lies.md, one lie of each kind the checks look for, and asserts that each is reported
on its line; feeds it clean.md, the same kinds of claim made true, and asserts that it passes.
In a shallow clone the commit check is skipped by check_docs.py, and so is its assertion here.
Standard library only: /usr/bin/python3 tests/docs_check/check_docs_selftest.py
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(ROOT, "scripts", "check_docs.py")

# (line of lies.md, what the report says there): every kind of lie.
EXPECTED = [
    (3, r"quoted message \"rank \.\.\. stale \(no publish for 4\.2 s > "),   # message, formatted
    (5, r"message quoted after 'throws' without backticks"),                 # unchecked quote
    (9, r"quoted message \"no such message in any source file\""),           # message column
    (11, r"`DonorRecord::staleness_s`: 'DonorRecord' has no member"),        # C++ member
    (11, r"`WindowOption::name`: no type 'WindowOption'"),                    # C++ type
    (13, r"`paramwin\.NoSuchThing`: paramwin has no name"),                   # Python name
    (13, r"`Agent\.no_such_method`: Python class 'Agent' has no member"),     # Python member
    (15, r"commit 0123abc4 is not in this repository"),                       # commit
    (19, r"figure table without a run header"),                               # no run header
    (26, r"run header lacks the command"),                                    # header, no commit
    (39, r"figure row without its run"),                                      # row, no commit
    (42, r"quoted message \"all N ranks finished\""),                        # only in a comment
]


def run(doc):
    out = subprocess.run([sys.executable, CHECK, "--docs", os.path.join(HERE, doc)],
                         capture_output=True, text=True, check=False)
    return out.returncode, out.stdout + out.stderr


def main():
    shallow = subprocess.run(["git", "-C", ROOT, "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True, check=False).stdout.strip() != "false"
    failures = []
    code, report = run("lies.md")
    print(report, end="")
    if code != 1:
        failures.append(f"lies.md: exit status {code}, expected 1")
    lines = report.splitlines()
    for number, pattern in EXPECTED:
        if shallow and "commit" in pattern:
            print(f"selftest: shallow clone, the commit check is skipped (lies.md:{number})")
            continue
        want = re.compile(rf"lies\.md:{number}: .*{pattern}")
        if not any(want.search(line) for line in lines):
            failures.append(f"lies.md:{number}: not reported: {pattern}")
    reported = len([line for line in lines if re.search(r"lies\.md:\d+: ", line)])
    expected = len(EXPECTED) - (1 if shallow else 0)
    if reported != expected:
        failures.append(f"lies.md: {reported} problems reported, expected {expected}")
    code, report = run("clean.md")
    print(report, end="")
    if code != 0:
        failures.append(f"clean.md: exit status {code}, expected 0 (a true claim was reported)")
    for failure in failures:
        print("selftest: " + failure)
    print("docs_check_prose_selftest: " + ("FAILED" if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
