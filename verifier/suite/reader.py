"""Strict reading of one suite TOML table (:class:`_Reader`) and the small value checks the suite schema shares.

Every key read is type-checked, leftovers are errors, and every failure is a
:class:`~verifier.errors.ConfigError` naming the file, the dotted key, the value and what is allowed
(:mod:`verifier.suite.schema` builds the suite from these).
"""

from __future__ import annotations

from typing import Any

from verifier.errors import ConfigError

__all__ = ["_Reader", "_check_choice", "_positive", "_no_duplicates"]


class _Reader:
    """Strict access to one TOML table: every key read is checked, leftovers are errors."""

    def __init__(self, data: Any, where: str, source: str) -> None:
        self.source, self.where = source, where
        if not isinstance(data, dict):
            self._fail(where, data, "a table")
        self.data = data
        self.seen: set[str] = set()

    def _fail(self, key: str, value: Any, allowed: str) -> None:
        raise ConfigError(f"{self.source}: {key}={value!r} is invalid; allowed: {allowed}")

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, types: type | tuple, default: Any = ..., allowed: str | None = None) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is ...:
                raise ConfigError(f"{self.source}: missing required key {self.path(key)!r}")
            return default
        value = self.data[key]
        types_t = types if isinstance(types, tuple) else (types,)
        bad_bool = isinstance(value, bool) and bool not in types_t
        if bad_bool or not isinstance(value, types_t):
            names = allowed or " or ".join(t.__name__ for t in types_t)
            self._fail(self.path(key), value, names)
        return value

    def get_list(self, key: str, item: type | tuple, default: Any = ..., allowed: str | None = None) -> Any:
        value = self.get(key, list, default, allowed)
        if value is default and key not in self.data:
            return value
        item_t = item if isinstance(item, tuple) else (item,)
        for v in value:
            if (isinstance(v, bool) and bool not in item_t) or not isinstance(v, item_t):
                self._fail(self.path(key), value, allowed or f"a list of {'/'.join(t.__name__ for t in item_t)}")
        return value

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            where = f" in [{self.where}]" if self.where else ""
            raise ConfigError(
                f"{self.source}: unknown key {self.path(extra[0])!r}{where}; allowed keys: {sorted(self.seen)}"
            )


def _check_choice(r: _Reader, key: str, value: Any, choices: tuple) -> None:
    if value not in choices:
        r._fail(r.path(key), value, " | ".join(map(repr, choices)))


def _positive(r: _Reader, key: str, value: Any, minimum: float = 1) -> None:
    if value < minimum:
        r._fail(r.path(key), value, f">= {minimum}")


def _no_duplicates(r: _Reader, key: str, values: Any) -> None:
    """A repeated grid entry would count the same samples twice as evidence: refuse it."""
    seen: set = set()
    for v in values or ():
        if v in seen:
            r._fail(r.path(key), list(values), f"each entry at most once ({v!r} is repeated; a repeat would "
                    "count the same samples twice)")
        seen.add(v)
