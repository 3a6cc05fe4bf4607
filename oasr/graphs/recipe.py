"""The graph recipe ``oasr graph build`` runs: a model's unit set, a lexicon (its own tokenizer's
spellings, or a ``WORD unit ...`` file), an n-gram language model (an ARPA file, or one
estimated from text) -> a TLG saved beside the model's bundle (``graphs/NAME.*``, found by
name through ``--graph NAME``) or in a folder.

The language model estimated from text is interpolated Kneser-Ney (``oasr.graphs.arpa``, the
modified-discount estimate KenLM's ``lmplz`` and SRILM's ``-kndiscount -interpolate`` make);
``--arpa-out`` keeps it as ARPA. An ARPA made by those tools is read as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oasr.graphs.arpa import NgramModel, estimate, read_arpa, sentences_from, write_arpa
from oasr.graphs.compile import build_tlg
from oasr.graphs.lexicon import Lexicon, read_lexicon, read_symbols, spell_words
from oasr.graphs.store import GRAPHS_DIR, GraphError, GraphInfo, save_graph

__all__ = ["GraphRecipe", "BuiltGraph", "build_model_graph"]

CASES = ("keep", "upper", "lower")


@dataclass
class GraphRecipe:
    model: str  # a bundle, checkpoint folder or catalogue name (its units and tokenizer)
    name: str = "tg"
    arpa: str | None = None  # an ARPA n-gram model (KenLM, SRILM, or --arpa-out of a build)
    text: str | None = None  # or text to estimate one from: one sentence per line
    order: int = 3
    case: str = "keep"  # how the text's / ARPA's words are cased before spelling
    lexicon: str | None = None  # WORD unit unit ... (units named as in --units); else BPE
    units: str | None = None  # the model's unit table for --lexicon (tokens.txt: NAME ID)
    output_dir: str | None = None  # default: the bundle's graphs/ folder
    arpa_out: str | None = None  # where to write the estimated ARPA

    def validate(self) -> None:
        if (self.arpa is None) == (self.text is None):
            raise ValueError("give the language model as --arpa FILE or --text FILE (one of "
                             "them)")
        if self.order < 1:
            raise ValueError(f"--order must be >= 1, got {self.order}")
        if self.case not in CASES:
            raise ValueError(f"--case {self.case}: use one of {', '.join(CASES)}")
        if (self.lexicon is None) != (self.units is None):
            raise ValueError("--lexicon needs --units (the unit table it is spelt in), and "
                             "--units is only read with --lexicon")
        if self.arpa_out is not None and self.text is None:
            raise ValueError("--arpa-out writes the model estimated from --text; with --arpa "
                             "the ARPA already exists")


@dataclass
class BuiltGraph:
    path: Path
    report: dict[str, Any]
    unspellable: list[str]


def _cased(word: str, case: str) -> str:
    return word.upper() if case == "upper" else word.lower() if case == "lower" else word


def _language_model(recipe: GraphRecipe) -> NgramModel:
    if recipe.arpa is not None:
        lm = read_arpa(recipe.arpa)
        if recipe.case != "keep":
            raise ValueError("--case recases text before estimating; an ARPA's words are used "
                             "as they are (rebuild it in the model's case)")
        return lm
    path = Path(recipe.text)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the text ({exc})") from None
    sentences = sentences_from(_cased(line, recipe.case) for line in lines)
    if not sentences:
        raise ValueError(f"{path}: no sentence to estimate a language model from")
    lm = estimate(sentences, recipe.order)
    if recipe.arpa_out is not None:
        write_arpa(lm, recipe.arpa_out)
    return lm


def build_model_graph(recipe: GraphRecipe) -> BuiltGraph:
    """Build ``recipe``'s TLG for its model; the words no spelling covers are reported."""
    from oasr.models.loader import ensure_bundle
    from oasr.tokenizers import build_tokenizer

    recipe.validate()
    bundle = ensure_bundle(recipe.model)
    config = bundle.build_model_config()
    blank = getattr(config, "blank_id", None)
    vocab = getattr(config, "vocab_size", None)
    if blank is None or vocab is None:
        raise GraphError(f"{recipe.model}: a {bundle.architecture} model has no CTC head "
                         "(blank_id, vocab_size); decoding graphs are for CTC models")
    lm = _language_model(recipe)
    if recipe.lexicon is not None:
        units = read_symbols(recipe.units)
        lexicon = read_lexicon(recipe.lexicon, units)
        unspellable = sorted(set(lm.vocabulary) - set(lexicon.words))
    else:
        tokenizer = build_tokenizer(bundle.tokenizer_spec, bundle.tokenizer_dir)
        lexicon, unspellable = spell_words(lm.vocabulary, tokenizer, int(blank))
    if not isinstance(lexicon, Lexicon) or not lexicon.entries:
        raise GraphError("no word of the language model could be spelt with the model's units "
                         "(mind the case: --case upper for upper-case BPE models)")
    parts = build_tlg(int(vocab), int(blank), lexicon, lm)
    parts.report["unspellable_words"] = len(unspellable)
    info = GraphInfo(kind="TLG", token_rule="entered", num_units=int(vocab), blank=int(blank),
                     build=parts.report)
    folder = Path(recipe.output_dir) if recipe.output_dir else bundle.path / GRAPHS_DIR
    path = save_graph(folder, recipe.name, parts.fst, parts.words, info, parts.lexicon.entries)
    return BuiltGraph(path, parts.report, unspellable)
