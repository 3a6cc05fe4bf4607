"""Local agreement: commit the word prefix that two consecutive decodes of a growing buffer agree
on (LocalAgreement-2, as whisper_streaming's ``HypothesisBuffer`` does).

Words carry times on the stream's clock. A new hypothesis first drops the words that end before
the last committed word (they re-transcribe audio already committed), then any leading n-gram
(n <= 5) that repeats the tail of the committed text; what remains is compared word by word with
the previous hypothesis and the common prefix is committed. Committed words are never changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PUNCT = re.compile(r"[^\w']+")
SENTENCE_END = (".", "?", "!")


@dataclass(frozen=True)
class Word:
    """A word on the stream's clock (seconds)."""

    text: str
    start: float
    end: float
    confidence: float | None = None

    @property
    def key(self) -> str:
        """The form two hypotheses are compared in: case and punctuation do not count."""
        return _PUNCT.sub("", self.text.lower())

    @property
    def ends_sentence(self) -> bool:
        return self.text.rstrip().endswith(SENTENCE_END)


@dataclass
class HypothesisBuffer:
    committed_end: float = 0.0  # end time of the last committed word
    committed_tail: list[Word] = field(default_factory=list)  # committed words still in the audio
    previous: list[Word] = field(default_factory=list)  # last hypothesis, uncommitted part

    def insert(self, words: list[Word]) -> list[Word]:
        """A new decode's words -> the part that is new (not already committed)."""
        fresh = [w for w in words if w.start > self.committed_end - 0.1]
        if fresh and self.committed_tail and abs(fresh[0].start - self.committed_end) < 1.0:
            tail = [w.key for w in self.committed_tail]
            for n in range(min(len(tail), len(fresh), 5), 0, -1):
                if tail[-n:] == [w.key for w in fresh[:n]]:
                    fresh = fresh[n:]
                    break
        return fresh

    def agree(self, words: list[Word]) -> list[Word]:
        """Insert a new hypothesis; -> the words committed by it (the agreed prefix)."""
        fresh = self.insert(words)
        n = 0
        while n < min(len(fresh), len(self.previous)) and fresh[n].key == self.previous[n].key:
            n += 1
        commit = [w for w in fresh[:n] if w.key]
        self._commit(commit)
        self.previous = fresh[n:]
        return commit

    def commit_all(self, words: list[Word]) -> list[Word]:
        """The final decode of an utterance: commit everything new in it."""
        commit = [w for w in self.insert(words) if w.key]
        self._commit(commit)
        self.previous = []
        return commit

    def commit_previous(self) -> list[Word]:
        """Commit the latest hypothesis as it stands (a buffer that must be cut with nothing
        agreed in it)."""
        commit = [w for w in self.previous if w.key]
        self._commit(commit)
        self.previous = []
        return commit

    def _commit(self, words: list[Word]) -> None:
        if words:
            self.committed_end = max(self.committed_end, words[-1].end)
            self.committed_tail += words

    def drop_before(self, t: float) -> None:
        """The audio before ``t`` left the buffer: forget committed words inside it."""
        self.committed_tail = [w for w in self.committed_tail if w.end > t]

    @property
    def partial(self) -> list[Word]:
        return list(self.previous)
