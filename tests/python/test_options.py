"""Options as typed keywords, driven by the C++ option key table: every key of the table is
reachable from Python (the two tables compared), enums and their names are both accepted,
values of the wrong type and unknown keys are refused, and docs/python.md lists every key
exactly once."""

import os
import re

import pytest

import paramwin
from paramwin import _core
from paramwin._options import agent_config, option_text

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")

# One valid value per kind of value text of the C++ table (its "value" column), so that every
# key, including keys added later, is exercised with a typed Python value.
def sample(row):
    v = row.value
    if row.key == "triggers":
        return [paramwin.DeathReason.age, "worst_fraction"]
    if "|" in v and " " not in v.split("|")[0]:
        return v.split("|")[0].split("[")[0]
    if v == "integer":
        return 3
    if v == "boolean":
        return True
    if v == "lo..hi":
        return (5, 9)
    if v.startswith("list of numbers"):
        return [0.5, 2.0]
    if v.startswith("path"):
        return "ck-{step}.h5" if "{step}" in v else "log-{rank}.jsonl"
    return 0.5  # numbers, seconds, milliseconds, fractions


def test_every_cpp_key_is_reachable_from_python():
    cpp = [tuple(r) for r in _core.option_keys()]
    py = [(r.key, ",".join(r.aliases), r.value, r.doc) for r in paramwin.option_table()]
    assert py == cpp, "paramwin.option_table() must be the C++ table, row for row"
    for row in paramwin.option_table():
        key = row.key.replace(".NAME", ".lr")
        text = option_text(key, sample(row))
        assert isinstance(text, str) and text, key
        for alias in row.aliases:
            assert option_text(alias, sample(row)) == text


def test_typed_keywords_and_strings_give_the_same_options():
    typed = agent_config(selection=paramwin.SelectionKind.tournament, k=2, age=(5, 9),
                         clamp=True, weights=[0.75, 0.25], triggers=["age", "worst_fraction"],
                         direction=paramwin.MetricDirection.higher_is_better,
                         explore={"lr": "log_uniform:1e-4..1e-1"}, temperature=0.5,
                         mixing=paramwin.MixingKind.weighted)
    text = agent_config("selection=tournament k=2 age=5..9 clamp=true weights=0.75,0.25 "
                        "triggers=age,worst_fraction direction=higher_is_better "
                        "explore.lr=log_uniform:1e-4..1e-1 temperature=0.5 mixing=weighted")
    assert typed == text
    _core.check_agent_options(typed, 4)
    assert paramwin.SelectionKind.fittest == "fittest"  # members are their names


def test_bad_options_are_refused_clearly(comm):
    layout = paramwin.Layout().add("w", 2)
    with pytest.raises(paramwin.InvalidArgument, match=r"unknown option 'kk' \(valid: .*seed"):
        paramwin.Agent(layout, comm, kk=2)
    with pytest.raises(paramwin.InvalidArgument, match="option 'k' takes an integer"):
        agent_config(k=2.5)
    with pytest.raises(paramwin.InvalidArgument, match="option 'k' takes integer, got a bool"):
        agent_config(k=True)
    with pytest.raises(paramwin.InvalidArgument, match="option 'age' takes \\(lo, hi\\)"):
        agent_config(age=(1, 2, 3))
    with pytest.raises(paramwin.InvalidArgument, match="given twice"):
        agent_config("k=2", k=3)
    with pytest.raises(paramwin.InvalidArgument, match="selection"):
        paramwin.Agent(layout, comm, selection="best_of_all")
    with pytest.raises(paramwin.InvalidArgument, match="takes"):
        agent_config(seed=object())


def test_docs_list_every_option_once():
    with open(DOCS) as f:
        text = f.read()
    section = text.split("<!-- options: begin -->")[1].split("<!-- options: end -->")[0]
    listed = re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)
    keys = [r.key for r in paramwin.option_table()]
    missing = [k for k in keys if k not in listed]
    extra = [k for k in listed if k not in keys]
    twice = sorted({k for k in listed if listed.count(k) > 1})
    assert not missing and not extra and not twice, (
        f"docs/python.md's option table: add {missing}, remove {extra}, once only {twice} "
        "(the rows of src/decision/option_keys.cpp)")
