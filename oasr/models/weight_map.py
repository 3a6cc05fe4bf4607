"""``WeightMap``: a converter's key renaming, declared as an ordered list of rules.

Each ``Rule`` is a regular expression matched against the whole upstream key and either a
replacement template (``re`` syntax: ``\\1``, ``\\g<name>``) giving our key, or ``to=None``
to drop the key with a reason. The first rule that matches decides; a key no rule matches is
returned as *unmatched*, so the converter says what happens to it (drop it with a reason, keep
it for the load report to refuse, raise naming it, or a non-renaming step such as splitting a
fused projection). A rule may also reshape the tensor it renames (``tensor=``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import Any

from oasr.models.converter import MappedWeights

__all__ = ["Rule", "WeightMap", "keep_unmatched", "renames"]


@dataclass(frozen=True)
class Rule:
    """``pattern`` (the whole key; ``.`` matches any character) -> ``to``, or dropped."""

    pattern: str
    to: str | None = None
    reason: str = ""
    tensor: Callable[[Any], Any] | None = None
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.to is None and not self.reason:
            raise ValueError(f"a rule dropping {self.pattern!r} needs a reason")
        object.__setattr__(self, "_regex", re.compile(self.pattern, re.DOTALL))

    def match(self, key: str) -> re.Match[str] | None:
        return self._regex.fullmatch(key)


def renames(table: Mapping[str, str], source: str = "", target: str = "") -> tuple[Rule, ...]:
    """One rule per ``table`` entry: ``source + re.escape(upstream)`` -> ``target + ours``
    (``source`` / ``target`` carry the shared prefix pattern and its template)."""
    return tuple(Rule(source + re.escape(upstream), target + ours)
                 for upstream, ours in table.items())


class WeightMap:
    """An ordered rule list (see the module)."""

    def __init__(self, *rules: Rule) -> None:
        self.rules = rules

    def __add__(self, other: WeightMap) -> WeightMap:
        return WeightMap(*self.rules, *other.rules)

    def target(self, key: str) -> tuple[Rule, str | None] | None:
        """The rule deciding ``key`` and our key (``None``: dropped), or ``None``: unmatched."""
        for rule in self.rules:
            m = rule.match(key)
            if m is not None:
                return rule, None if rule.to is None else m.expand(rule.to)
        return None

    def apply(self, raw: Mapping[str, Any], out: MappedWeights | None = None,
              only: Container[str] | None = None,
              translate: Callable[[str], str] | None = None) -> tuple[MappedWeights, list[str]]:
        """Put every renamed tensor of ``raw`` in ``out`` and record every dropped key; return
        it with the unmatched keys, in ``raw``'s order. With ``only`` (our model's keys), a key
        renamed to one outside it is unmatched too. With ``translate``, the rules see
        ``translate(key)`` (another layout's name for it); sources stay ``raw``'s keys."""
        out = MappedWeights() if out is None else out
        unmatched = []
        for key, value in raw.items():
            found = self.target(key if translate is None else translate(key))
            if found is None or (only is not None and found[1] is not None
                                 and found[1] not in only):
                unmatched.append(key)
                continue
            rule, ours = found
            if ours is None:
                out.drop(key, rule.reason)
            else:
                out.put(ours, value if rule.tensor is None else rule.tensor(value), key)
        return out, unmatched

    def rename(self, raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """``apply`` as a plain dict of our keys (dropped keys left out) and the unmatched keys."""
        out, unmatched = self.apply(raw)
        return out.tensors, unmatched


def keep_unmatched(raw: Mapping[str, Any], out: MappedWeights,
                   unmatched: list[str]) -> MappedWeights:
    """``out`` with each unmatched key of ``raw`` kept under its own name, so the load report
    refuses it by name as unexpected (no key no rule knows is lost silently)."""
    for name in unmatched:
        out.put(name, raw[name], name)
    return out
