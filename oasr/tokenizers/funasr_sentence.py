"""FunASR's sentence post-processing of a char / word-piece token sequence, with each
character traced back to the token that wrote it.

FunASR renders a Paraformer's tokens with ``funasr.utils.postprocess_utils.sentence_postprocess``
(funasr 1.4.16): specials dropped; an all-CJK sequence joined with no spaces; Latin words
(``@@`` marks a piece that the next token continues) separated by one space, the space before a
CJK character removed; then runs of single Latin letters separated by spaces joined and
upper-cased (``x j`` -> ``XJ``, FunASR's ``abbr_dispose``); the result stripped. This module
follows those rules step for step, including their quirks (a trailing ``@@`` piece is dropped;
FunASR's "Chinese" test also admits digits and ``@``; a token that is neither CJK nor Latin
letters is copied as it is without ending a pending word), so the text equals FunASR's.

Each output character belongs to a token, so word timings can cut the same text: a separating
space goes to the token after it, and a character that FunASR writes after a later token's text
(a pending word flushed after a punctuation token) goes to that later token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["sentence_pieces", "sentence_text"]

DROPPED = ("<s>", "</s>", "<unk>", "<OOV>")
WASHED = (" ", "</s>", "<s>", "<unk>", "<OOV>")
SPACE = -1  # the token index of a separating space: the next token's

Part = tuple[int, str]  # (token index, text)


def _is_chinese(text: str) -> bool:
    # FunASR compares whole strings (lexicographically) against the CJK range and the digits.
    return "\u4e00" <= text <= "\u9fff" or "0" <= text <= "9" or text == "@"


def _washed(text: str) -> str:
    for s in WASHED:
        text = text.replace(s, "")
    return text


def _all_chinese(items: Iterable[str]) -> bool:
    washed = [_washed(t) for t in items]
    return bool(washed) and all(_is_chinese(t) for t in washed)


def _all_alpha(items: Iterable[str]) -> bool:
    washed = [_washed(t) for t in items]
    if not washed:
        return False
    for t in washed:
        if not t.isalpha() and t != "'":
            return False
        if t.isalpha() and _is_chinese(t):
            return False
    return True


def _single_letter(word: list[Part]) -> bool:
    text = "".join(t for _, t in word)
    return len(text) == 1 and text.encode("utf-8").isalpha()


def _words(tokens: list[Part]) -> list[list[Part]]:
    """FunASR's word list (before abbreviations), each word as its tokens' parts."""
    texts = [t for _, t in tokens]
    space: list[Part] = [(SPACE, " ")]
    if _all_chinese(texts):
        return [[(i, t.replace(" ", ""))] for i, t in tokens]
    words: list[list[Part]] = []
    pending: list[Part] = []
    if _all_alpha(texts):
        for i, t in tokens:
            if "@@" in t:
                pending.append((i, t.replace("@@", "")))
            else:
                words += [pending + [(i, t)], space]
                pending = []
        return words
    alpha_blank = False
    for i, t in tokens:
        if _all_chinese(t):
            if alpha_blank:
                words.pop()
            words.append([(i, t)])
            alpha_blank = False
        elif "@@" in t:
            pending.append((i, t.replace("@@", "")))
            alpha_blank = False
        elif _all_alpha(t):
            words += [pending + [(i, t)], space]
            pending = []
            alpha_blank = True
        else:
            words.append([(i, t)])
    return words


def _abbreviations(words: list[list[Part]]) -> list[list[Part]]:
    """FunASR's ``abbr_dispose``: single letters separated by single spaces -> one upper-cased
    word."""
    def is_space(k: int) -> bool:
        return k < len(words) and "".join(t for _, t in words[k]) == " "

    out: list[list[Part]] = []
    k = 0
    while k < len(words):
        if not (_single_letter(words[k]) and is_space(k + 1) and k + 2 < len(words)
                and _single_letter(words[k + 2])):
            out.append(words[k])
            k += 1
            continue
        end = k + 2
        while is_space(end + 1) and end + 2 < len(words) and _single_letter(words[end + 2]):
            end += 2
        out.append([(i, t.upper()) for w in words[k:end + 1:2] for i, t in w])
        k = end + 1
    return out


def _stripped(parts: list[Part]) -> list[Part]:
    """``"".join(parts).strip()`` on the parts: whitespace off both ends."""
    parts = list(parts)
    for order in (range(len(parts)), range(len(parts) - 1, -1, -1)):
        for k in order:
            i, t = parts[k]
            kept = t.lstrip() if order.step == 1 else t.rstrip()
            parts[k] = (i, kept)
            if kept:
                break
    return parts


def sentence_pieces(tokens: Sequence[str]) -> list[str]:
    """One string per token; joined they are FunASR's sentence for ``tokens``."""
    kept = [(i, t) for i, t in enumerate(tokens) if t not in DROPPED]
    parts = _stripped([p for w in _abbreviations(_words(kept)) for p in w])
    pieces = [""] * len(tokens)
    last, waiting = 0, ""
    for i, t in parts:
        if i == SPACE:
            waiting += t
            continue
        last = max(last, i)  # text FunASR moved before an earlier token's stays in order
        pieces[last] += waiting + t
        waiting = ""
    if waiting and parts:  # unreachable after the strip; kept so no character is lost
        pieces[last] += waiting
    return pieces


def sentence_text(tokens: Sequence[str]) -> str:
    """FunASR's ``sentence_postprocess(tokens)[0]``."""
    return "".join(sentence_pieces(tokens))
