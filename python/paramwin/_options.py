"""Agent options as typed Python keywords, driven by the C++ option key table
(``_core.option_keys()``, src/decision/option_keys.cpp): every key the library accepts is a
keyword here, without a list of its own, so a key added to the C++ table is a keyword at once.

A value is turned into the key's string form by its Python type: bool -> "true"/"false", an
enum member (paramwin.enums, or any enum) -> its name, a number -> its repr, a (lo, hi) pair
-> "lo..hi" for range keys, a list or tuple -> comma-separated, a path -> str; a string is
passed as it is. Keys taking a name (``explore.NAME``) take a dict: ``explore={"lr":
"log_uniform:1e-4..1e-1"}``, or the dotted key in ``options={...}``. The library parses and
validates the text (its errors name the key)."""

from __future__ import annotations

import enum
import numbers
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Union

from . import _core
from .errors import InvalidArgument

__all__ = ["OptionKey", "option_table", "agent_config", "option_text"]


class OptionKey(NamedTuple):
    """One key of the C++ option table: ``key`` ("explore.NAME": a prefix taking a name),
    ``aliases`` (other spellings), ``value`` (what the value looks like), ``doc``."""

    key: str
    aliases: List[str]
    value: str
    doc: str

    @property
    def prefix(self) -> Optional[str]:
        """"explore" for "explore.NAME"; None for a plain key."""
        return self.key[:-5] if self.key.endswith(".NAME") else None


_TABLE: Optional[List[OptionKey]] = None


def liveness_bound(value: Optional[float]) -> Optional[float]:
    """A window's ``suspect_seconds`` or ``suspect_beats`` keyword as the core takes it: None
    keeps the library's default; the window refuses a negative or non-finite value."""
    return None if value is None else float(value)


def option_table() -> List[OptionKey]:
    """The C++ option key table, in docs/agent.md's order."""
    global _TABLE
    if _TABLE is None:
        _TABLE = [OptionKey(k, [a for a in al.split(",") if a], v, d)
                  for k, al, v, d in _core.option_keys()]
    return _TABLE


def _row(key: str) -> Optional[OptionKey]:
    for row in option_table():
        if key == row.key or key in row.aliases:
            return row
        if row.prefix is not None and key.startswith(row.prefix + ".") and \
                len(key) > len(row.prefix) + 1:
            return row
    return None


def _scalar(key: str, row: OptionKey, value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.name)
    if isinstance(value, bool):
        if row.value != "boolean":
            raise InvalidArgument(f"paramwin: option '{key}' takes {row.value}, got a bool")
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        if row.value == "integer":
            raise InvalidArgument(f"paramwin: option '{key}' takes an integer, got {value!r}")
        return repr(float(value))
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, str):
        return value
    raise InvalidArgument(f"paramwin: option '{key}' takes {row.value}, got "
                          f"{type(value).__name__} {value!r}")


def option_text(key: str, value: Any) -> str:
    """The string form of ``value`` for option ``key`` (see the module's docstring);
    InvalidArgument for an unknown key or a value of the wrong type."""
    row = _row(key)
    if row is None:
        valid = ", ".join(r.key for r in option_table())
        raise InvalidArgument(f"paramwin: unknown option '{key}' (valid: {valid})")
    if isinstance(value, (tuple, list)):
        parts = [_scalar(key, row, v) for v in value]
        if ".." in row.value and "list" not in row.value:
            if len(parts) != 2:
                raise InvalidArgument(f"paramwin: option '{key}' takes (lo, hi), got {value!r}")
            return f"{parts[0]}..{parts[1]}"
        return ",".join(parts)
    return _scalar(key, row, value)


def agent_config(options: Union[None, str, Mapping[str, Any]] = None,
                 **keywords: Any) -> Dict[str, str]:
    """The key/value form of AgentOptions (docs/agent.md, "Configuration from strings") from
    a string ``"k=2 selection=fittest"``, a mapping, or typed keywords (``k=2,
    selection=SelectionKind.fittest, age=(50, 150), triggers=["age", "worst_fraction"],
    explore={"lr": "log_uniform:1e-4..1e-1"}``). A key given twice raises InvalidArgument."""
    config: Dict[str, str] = {}

    def put(key: str, value: Any) -> None:
        row = _row(key)
        if row is not None and row.prefix == key:
            raise InvalidArgument(f"paramwin: option '{key}' takes a name: '{key}.NAME'")
        if isinstance(value, Mapping) and any(r.prefix == key for r in option_table()):
            for name, v in value.items():
                put(f"{key}.{name}", v)
            return
        if key in config:
            raise InvalidArgument(f"paramwin: option '{key}' given twice")
        config[key] = option_text(key, value)

    if isinstance(options, str):
        for token in options.replace(";", " ").split():
            key, eq, value = token.partition("=")
            if not eq or not key:
                raise InvalidArgument(f"paramwin: option token '{token}' is not key=value")
            put(key, value)
    elif options is not None:
        for key, value in options.items():
            put(str(key), value)
    for key, value in keywords.items():
        put(key, value)
    return config
