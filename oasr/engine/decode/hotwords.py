"""Hotword boosting for the frame-synchronous beams (CTC prefix beam, transducer modified beam
search): a context graph in the manner of icefall's ``ContextGraph`` (sherpa-onnx's hotwords).

The graph is a trie of the phrases' token ids with Aho-Corasick fail links. A hypothesis
carries a graph state; each label it emits moves the state (``step``) and earns a bonus:

- a label that continues a match earns ``score`` (the phrase's per-token bonus);
- a label that breaks a match follows the fail links to the longest phrase prefix it still
  completes, and the bonus of the abandoned tokens is taken back (the fail arc's score is the
  new node's accumulated bonus minus what the old node had added since the last whole phrase);
- reaching the end of a phrase keeps its bonus, and phrases ending inside the match (reached
  through output links) add theirs.

At the end of the search ``finish`` takes back the bonus of a match still in progress, so a
hypothesis ends up ahead by exactly the phrases it contains. The totals this gives are
icefall's: its ``context_graph.py`` self-test table (``"HEHERSHE"`` 14, ``"HELLO"`` 7, ...)
is pinned in ``tests/engine/decode/test_hotwords.py``.

States are node ids, so hypotheses carry plain ints; transitions are memoized.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ContextGraph", "build_context", "hotword_phrases", "ROOT"]

ROOT = 0


def hotword_phrases(hotwords: str | Sequence[str] | None) -> list[str]:
    """The phrases of a request's ``hotwords``: a string is split on commas and newlines;
    blank phrases are dropped."""
    if hotwords is None:
        return []
    items = hotwords.replace("\n", ",").split(",") if isinstance(hotwords, str) else hotwords
    return [p.strip() for p in items if p.strip()]


@dataclass
class _Node:
    token: int
    node_score: float  # the bonus accumulated from the root
    local_score: float  # the bonus accumulated since the last phrase end on the path (0 at one)
    is_end: bool
    fail: int = ROOT
    output: int | None = None  # the nearest phrase end along the fail links


class ContextGraph:
    """The boosting trie of token-id phrases, each token worth ``score``."""

    def __init__(self, phrases: Sequence[Sequence[int]], score: float) -> None:
        if score < 0:
            raise ValueError(f"the hotword score must be >= 0, got {score}")
        self.score = score
        self.nodes = [_Node(-1, 0.0, 0.0, False)]
        self.next: list[dict[int, int]] = [{}]
        for phrase in phrases:
            self._insert(list(phrase))
        self._link()
        self._memo: dict[tuple[int, int], tuple[float, int]] = {}

    def _insert(self, tokens: list[int]) -> None:
        if not tokens:
            raise ValueError("a hotword phrase has no tokens")
        node = ROOT
        for token in tokens:
            child = self.next[node].get(token)
            if child is None:
                child = len(self.nodes)
                self.nodes.append(_Node(token, 0.0, 0.0, False))
                self.next.append({})
                self.next[node][token] = child
            node = child
        self.nodes[node].is_end = True  # also when the phrase is another's prefix

    def _link(self) -> None:
        """Scores, fail and output links, breadth first (Aho-Corasick): a node's fail link
        and its parent's scores are settled before it."""
        queue = deque([ROOT])
        while queue:
            node = queue.popleft()
            parent = self.nodes[node]
            for token, child in self.next[node].items():
                c = self.nodes[child]
                c.node_score = parent.node_score + self.score
                c.local_score = 0.0 if c.is_end else parent.local_score + self.score
                if node == ROOT:
                    queue.append(child)
                    continue
                fail = parent.fail
                while token not in self.next[fail] and fail != ROOT:
                    fail = self.nodes[fail].fail
                c.fail = self.next[fail].get(token, ROOT)
                out = c.fail
                while out != ROOT and not self.nodes[out].is_end:
                    out = self.nodes[out].fail
                c.output = out if out != ROOT else None
                queue.append(child)

    def step(self, state: int, token: int) -> tuple[float, int]:
        """The bonus for emitting ``token`` in ``state``, and the next state."""
        key = (state, token)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        cur = self.nodes[state]
        nxt = self.next[state].get(token)
        if nxt is not None:
            node = nxt
            bonus = self.nodes[nxt].node_score - cur.node_score
            if cur.is_end:  # a whole phrase stays earned; finish takes back from the root
                bonus += cur.node_score
        else:
            node = cur.fail
            while token not in self.next[node] and node != ROOT:
                node = self.nodes[node].fail
            node = self.next[node].get(token, ROOT)
            bonus = self.nodes[node].node_score - cur.local_score
        out = self.nodes[node].output
        while out is not None:
            bonus += self.nodes[out].node_score
            out = self.nodes[out].output
        self._memo[key] = (bonus, node)
        return bonus, node

    def finish(self, state: int) -> float:
        """The bonus to take back at the end: a match in progress earned nothing."""
        node = self.nodes[state]
        return 0.0 if node.is_end else -node.node_score


def build_context(tokenizer: Any, hotwords: str | Sequence[str] | None, score: float
                  ) -> ContextGraph | None:
    """The context graph of a request's hotwords (``None``: none), each phrase encoded by the
    model's tokenizer. Raises naming a phrase the vocabulary cannot spell."""
    phrases = hotword_phrases(hotwords)
    if not phrases:
        return None
    if tokenizer is None or not hasattr(tokenizer, "encode"):
        raise ValueError("hotwords need the model's tokenizer to encode them; load the model "
                         "with its tokenizer")
    unk = getattr(tokenizer, "unk_id", None)
    ids = []
    for phrase in phrases:
        tokens = list(tokenizer.encode(phrase))
        if not tokens or (unk is not None and unk in tokens):
            raise ValueError(f"hotword {phrase!r}: the model's vocabulary cannot spell it "
                             "(it encodes to <unk>); write it as the model's transcripts do "
                             "(many vocabularies are upper case)")
        ids.append(tokens)
    return ContextGraph(ids, score)
