"""Hot words: a boosting automaton over the graph's words, walked beside it during the search
(an on-the-fly composition: a token's search state is its graph state and its node here).

The phrases (word sequences) form a trie with Aho-Corasick fail links; a search path's node is
the longest suffix of its words that starts a phrase. Along a word history H the bonus is

    completed(H) + pending(H)

``completed`` sums, over every phrase occurrence ending in H (overlaps included), the phrase's
bonus; ``pending`` is the bonus of the phrase prefix H ends in when that prefix is not itself a
whole phrase (0 otherwise). A phrase's bonus is ``score`` per unit of its words' spellings, so a
phrase earns what the prefix beam's hotwords give it per token. Each word moves the node and
adds the change of the total; a path ending in a node pays its pending bonus back, so a finished
path is ahead by exactly the phrases it contains. Costs are negated bonuses (the graph's
tropical semiring).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["HotwordGraph"]

ROOT = 0


@dataclass
class _Node:
    depth_bonus: float  # the bonus of the phrase prefix this node spells
    is_end: bool
    fail: int = ROOT
    done: float = 0.0  # bonus of the phrases ending here (itself and along its fail links)


class HotwordGraph:
    """The boosting automaton of ``phrases`` (sequences of word labels); ``bonus[label]`` is
    what one occurrence of the word adds to a phrase's bonus."""

    def __init__(self, phrases: Sequence[Sequence[int]], bonus: dict[int, float]) -> None:
        self.nodes = [_Node(0.0, False)]
        self.next: list[dict[int, int]] = [{}]
        self.bonus = dict(bonus)
        for phrase in phrases:
            if not phrase:
                raise ValueError("a hotword phrase has no words")
            node = ROOT
            for label in phrase:
                child = self.next[node].get(label)
                if child is None:
                    child = len(self.nodes)
                    self.nodes.append(_Node(self.nodes[node].depth_bonus + self.bonus[label],
                                            False))
                    self.next.append({})
                    self.next[node][label] = child
                node = child
            self.nodes[node].is_end = True
        self.labels = sorted({lab for p in phrases for lab in p})
        self._link()

    def _link(self) -> None:
        queue = deque([ROOT])
        while queue:
            node = queue.popleft()
            for label, child in self.next[node].items():
                fail = ROOT if node == ROOT else self._goto(self.nodes[node].fail, label)
                c = self.nodes[child]
                c.fail = fail
                c.done = (c.depth_bonus if c.is_end else 0.0) + self.nodes[fail].done
                queue.append(child)

    def _goto(self, node: int, label: int) -> int:
        while True:
            nxt = self.next[node].get(label)
            if nxt is not None:
                return nxt
            if node == ROOT:
                return ROOT
            node = self.nodes[node].fail

    def pending(self, node: int) -> float:
        n = self.nodes[node]
        return 0.0 if n.is_end else n.depth_bonus

    def step(self, node: int, label: int) -> tuple[int, float]:
        """The next node after word ``label`` and the bonus the step adds."""
        to = self._goto(node, label)
        return to, self.nodes[to].done + self.pending(to) - self.pending(node)

    def tables(self) -> dict[str, np.ndarray]:
        """The automaton as the search reads it (``oasr._C.wfst.Boosting``): per node its
        transitions on the phrases' words (sorted), in costs; any other word goes to the root
        at the node's default cost; the final cost pays the pending bonus back."""
        offsets, labels, cost, nxt = [0], [], [], []
        for node in range(len(self.nodes)):
            for label in self.labels:
                to, gain = self.step(node, label)
                labels.append(label)
                cost.append(-gain)
                nxt.append(to)
            offsets.append(len(labels))
        pend = np.array([self.pending(n) for n in range(len(self.nodes))], dtype=np.float32)
        return {"offsets": np.array(offsets, dtype=np.int64),
                "labels": np.array(labels, dtype=np.int32),
                "cost": np.array(cost, dtype=np.float32), "next": np.array(nxt, dtype=np.int32),
                "default_cost": pend, "final_cost": pend.copy()}

    def native(self) -> Any:
        from oasr.native import native

        return native("wfst").Boosting(**self.tables())
