"""Qwen2-Audio-7B's shape (random weights, bf16) through the ``llm`` family beside
transformers' ``Qwen2AudioForConditionalGeneration.generate`` on the SAME weights.

* The model is built directly on the GPU (``torch.device`` context, bf16 default dtype) and
  randomly initialised there; transformers' copy is then built on the meta device and its
  parameters *assigned* our tensors (``load_state_dict(assign=True)``): one set of weights in
  memory, shared storage, so both sides compute with identical numbers.
* Fixed 64 new tokens per request on both sides: the stop ids' rows of ``lm_head`` are zeroed
  (logit 0, below the random top logit of every step) and transformers also gets
  ``min_new_tokens=64``; every output is checked to carry exactly 64 tokens.
* Requests are the first B files of ``--data`` (LibriSpeech flacs, cycled), batch 1 / 8 / 32,
  all queued at once. Ours: ``ASREngine.run`` wall time, features included, with paged KV +
  decoder-step CUDA graphs (``oasr_auto``: what ``kv_storage=auto`` picks on CUDA) and with
  dense KV, eager steps (the A/B). Theirs:
  ``generate`` on our log-mel features already on the GPU (its CPU feature extractor would
  dominate), audio tower included. Reported: generated tokens/s, batch latency, per-request
  latency (ours: time to each output), and how many greedy tokens agree with transformers'.
* The prompt is the ChatML template through a WordLevel tokenizer over Qwen's special-token
  ids (no tokenizer download on the box): the prompt's token count differs slightly from
  Qwen's BPE, the shapes do not.

Usage: python benchmarks/gpu_qwen2audio.py OUT.json --data DIR [--device cpu --small]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode.llm import build_prompts
from oasr.engine.engine import ASREngine
from oasr.engine.request import Request
from oasr.models.converter import whisper_logmel_features
from oasr.models.loader import LoadedModel
from oasr.models.qwen2_audio.config import Qwen2AudioConfig
from oasr.models.qwen2_audio.model import Qwen2AudioModel

NEW_TOKENS = 64
QWEN_SPECIALS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                 "<|AUDIO|>": 151646, "<|audio_bos|>": 151647, "<|audio_eos|>": 151648}


def model_config(small: bool) -> Qwen2AudioConfig:
    if not small:  # Qwen/Qwen2-Audio-7B's config.json
        return Qwen2AudioConfig()
    vocab = 1024
    specials = {k: vocab - 6 + i for i, k in enumerate(QWEN_SPECIALS)}
    return Qwen2AudioConfig(
        n_mels=128, audio_d_model=64, audio_layers=2, audio_heads=2, audio_ffn_dim=128,
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        audio_token_id=specials["<|AUDIO|>"],
        eos_token_ids=[specials["<|endoftext|>"], specials["<|im_end|>"]],
        pad_token_id=specials["<|endoftext|>"],
    )


def specials_of(cfg: Qwen2AudioConfig) -> dict[str, int]:
    if cfg.vocab_size > max(QWEN_SPECIALS.values()):
        return dict(QWEN_SPECIALS)
    return {k: cfg.vocab_size - 6 + i for i, k in enumerate(QWEN_SPECIALS)}


def build_tokenizer(cfg: Qwen2AudioConfig):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from oasr.tokenizers.huggingface import HuggingFaceTokenizer

    specials = specials_of(cfg)
    words = sorted(set(cfg.render_prompt(None)[0].split() + cfg.render_prompt(None)[1].split()))
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    vocab.update({f"w{i}": i for i in range(len(vocab), min(specials.values()))})
    vocab.update(specials)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(specials))
    return HuggingFaceTokenizer(tok)


def build_model(cfg: Qwen2AudioConfig, device: torch.device, dtype: torch.dtype
                ) -> Qwen2AudioModel:
    """Random weights made where they live (no CPU init of 8B parameters)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2AudioModel(cfg)
    finally:
        torch.set_default_dtype(old)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layer_norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias") or "norm" in name:
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=gen)
        for t in cfg.eos_token_ids:  # fixed-length generation: never a stop id
            model.decoder.lm_head.weight[t].zero_()
        # The embedding's padding past the tokenizer: ours never picks it, so neither may
        # transformers' copy (a zero row's logit 0 is below every step's random top logit).
        model.decoder.lm_head.weight[max(specials_of(cfg).values()) + 1:].zero_()
    return model.eval()


def hf_twin(model: Qwen2AudioModel, cfg: Qwen2AudioConfig, dtype: torch.dtype):
    """transformers' model over OUR tensors (assigned, not copied)."""
    import transformers

    hf_cfg = transformers.Qwen2AudioConfig(
        audio_config=dict(model_type="qwen2_audio_encoder", num_mel_bins=cfg.n_mels,
                          encoder_layers=cfg.audio_layers, encoder_attention_heads=cfg.audio_heads,
                          encoder_ffn_dim=cfg.audio_ffn_dim, d_model=cfg.audio_d_model,
                          max_source_positions=cfg.max_source_positions),
        text_config=dict(model_type="qwen2", vocab_size=cfg.vocab_size,
                         hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                         num_hidden_layers=cfg.num_hidden_layers,
                         num_attention_heads=cfg.num_attention_heads,
                         num_key_value_heads=cfg.num_key_value_heads,
                         max_position_embeddings=cfg.max_position_embeddings,
                         rope_theta=cfg.rope_theta, rms_norm_eps=cfg.rms_norm_eps,
                         tie_word_embeddings=False),
        audio_token_index=cfg.audio_token_id,
    )
    with torch.device("meta"):
        hf = transformers.Qwen2AudioForConditionalGeneration(hf_cfg)
    ours = {}
    for k, v in model.state_dict().items():
        if k.startswith("encoder."):
            k = "model.audio_tower." + k[len("encoder."):]
        elif k.startswith("multi_modal_projector."):
            k = "model." + k
        elif k.startswith("decoder.lm_head."):
            k = k[len("decoder."):]
        elif k.startswith("decoder."):
            k = "model.language_model." + k[len("decoder."):]
        ours[k] = v
    missing, unexpected = hf.load_state_dict(ours, strict=False, assign=True)
    if unexpected or any("rotary" not in m for m in missing):
        raise RuntimeError(f"weights do not map onto transformers: missing {missing}, "
                           f"unexpected {unexpected}")
    device = next(model.parameters()).device
    # Non-persistent buffers (the rotary frequencies) are still on meta: rebuild them.
    lm = hf.model.language_model
    lm.rotary_emb = type(lm.rotary_emb)(lm.rotary_emb.config).to(device)
    for name, buf in hf.named_buffers():
        if buf.is_meta:
            raise RuntimeError(f"transformers buffer {name} is still on the meta device")
    shared = all(a.data_ptr() == b.data_ptr() for a, b in
                 zip(model.decoder.lm_head.parameters(), hf.lm_head.parameters()))
    return hf.eval(), shared


def load_audio(data: Path, n: int) -> list[np.ndarray]:
    files = sorted(data.rglob("*.flac"))[:32]
    if not files:
        raise SystemExit(f"no .flac under {data}")
    out = []
    for f in files:
        a, sr = sf.read(f, dtype="float32")
        if sr != 16000:
            raise SystemExit(f"{f}: {sr} Hz; the benchmark reads 16 kHz audio")
        out.append(a[: 30 * 16000])
    return [out[i % len(out)] for i in range(n)]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_ours(loaded: LoadedModel, audio: list[np.ndarray], device: torch.device, dtype: str,
             batch: int, **cfg_kw) -> tuple[dict, list]:
    engine = ASREngine(EngineConfig(device=str(device), dtype=dtype, max_batch_size=batch,
                                    max_new_tokens=NEW_TOKENS, max_decode_slots=max(batch, 1),
                                    **cfg_kw), loaded)

    def once():
        reqs = [Request(f"r{i}", a) for i, a in enumerate(audio[:batch])]
        sync(device)
        t0 = time.perf_counter()
        done = {}
        for out in engine.run(reqs):
            done[out.request_id] = (time.perf_counter() - t0, out)
        sync(device)
        return time.perf_counter() - t0, done

    once()  # warm-up: graph captures, cuBLAS plans
    wall, done = once()
    outs = [done[f"r{i}"][1] for i in range(batch)]
    bad = [o for o in outs if o.error or len(o.token_ids) != NEW_TOKENS]
    if bad:
        raise RuntimeError(f"ours: {len(bad)} outputs without exactly {NEW_TOKENS} tokens: "
                           f"{bad[0]}")
    lat = [done[f"r{i}"][0] for i in range(batch)]
    stats = getattr(engine.strategy.step_graphs, "stats", None)
    return {
        "wall_s": wall, "tokens_per_s": batch * NEW_TOKENS / wall,
        "latency_mean_s": statistics.mean(lat), "latency_max_s": max(lat),
        "kv_storage": engine.strategy.kv_storage,
        "graph_stats": dict(stats) if stats else None,
    }, [o.token_ids for o in outs]


def run_hf(hf, loaded: LoadedModel, audio: list[np.ndarray], device: torch.device,
           dtype: torch.dtype, batch: int) -> tuple[dict, list]:
    from oasr.engine.input_processor import InputProcessor

    cfg, tok = loaded.model.config, loaded.tokenizer
    inputs = InputProcessor(loaded.feature_config, device)
    reqs = [Request(f"r{i}", a) for i, a in enumerate(audio[:batch])]
    feats, lens = inputs(reqs)
    n_audio = [((int(n) - 1) // 2 + 1 - 2) // 2 + 1 for n in lens.tolist()]
    before, after = cfg.render_prompt(None)
    prompts = build_prompts([tok.encode(before)] * batch, [tok.encode(after)] * batch, n_audio,
                            cfg.audio_frames, cfg.audio_token_id, cfg.pad_token_id)
    ids = prompts.ids.to(device)
    attn = (torch.arange(ids.shape[1], device=device)[None]
            >= prompts.starts.to(device)[:, None]).long()
    feat_mask = (torch.arange(feats.shape[1], device=device)[None] < lens[:, None]).long()
    kw = dict(input_ids=ids, attention_mask=attn, input_features=feats.transpose(1, 2).to(dtype),
              feature_attention_mask=feat_mask, max_new_tokens=NEW_TOKENS,
              min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=cfg.eos_token_ids,
              pad_token_id=cfg.pad_token_id)
    with torch.no_grad():
        hf.generate(**kw)  # warm-up
        sync(device)
        t0 = time.perf_counter()
        gen = hf.generate(**kw)
        sync(device)
        wall = time.perf_counter() - t0
    new = gen[:, ids.shape[1]:].tolist()
    if any(len(t) != NEW_TOKENS for t in new):
        raise RuntimeError("transformers did not generate the fixed token count")
    return {"wall_s": wall, "tokens_per_s": batch * NEW_TOKENS / wall,
            "latency_mean_s": wall, "latency_max_s": wall}, new


def agreement(a: list[list[int]], b: list[list[int]]) -> dict:
    """Tokens equal position by position, and the mean length of the common prefix."""
    same = sum(x == y for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    prefix = []
    for ra, rb in zip(a, b):
        k = 0
        while k < min(len(ra), len(rb)) and ra[k] == rb[k]:
            k += 1
        prefix.append(k)
    return {"equal_tokens_fraction": same / max(1, sum(len(r) for r in a)),
            "mean_common_prefix": statistics.mean(prefix), "rows_identical":
            sum(ra == rb for ra, rb in zip(a, b))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", type=Path, required=True, help="folder of 16 kHz .flac files")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="a tiny config (CPU smoke test)")
    ap.add_argument("--batches", default=None, help="comma list (default 1,8,32; small: 1,2)")
    args = ap.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    dtype_name = "bf16" if dtype == torch.bfloat16 else "fp32"
    batches = [int(b) for b in (args.batches or ("1,2" if args.small else "1,8,32")).split(",")]
    if device.type == "cpu":
        torch.set_num_threads(max(1, torch.get_num_threads()))

    cfg = model_config(args.small)
    t0 = time.perf_counter()
    model = build_model(cfg, device, dtype)
    sync(device)
    built_s = time.perf_counter() - t0
    loaded = LoadedModel(model=model, tokenizer=build_tokenizer(cfg),
                         feature_config=whisper_logmel_features(cfg.n_mels),
                         name="qwen2-audio-7b-shape-random" if not args.small else "small")
    hf, shared = hf_twin(model, cfg, dtype)
    audio = load_audio(args.data, max(batches))
    import transformers

    result = {
        "model": "Qwen2-Audio-7B shape" if not args.small else "small smoke config",
        "params": sum(p.numel() for p in model.parameters()),
        "dtype": dtype_name, "device": torch.cuda.get_device_name() if device.type == "cuda"
        else "cpu", "torch": torch.__version__, "transformers": transformers.__version__,
        "new_tokens": NEW_TOKENS, "weights_shared_with_transformers": shared,
        "build_s": built_s, "batches": {},
    }
    for b in batches:
        row = {}
        row["oasr_auto"], ours = run_ours(loaded, audio, device, dtype_name, b)
        row["oasr_dense_eager"], ours_dense = run_ours(
            loaded, audio, device, dtype_name, b, kv_storage="dense",
            decode_options={"use_step_graphs": False})
        row["transformers_generate"], theirs = run_hf(hf, loaded, audio, device, dtype, b)
        row["speedup_vs_transformers"] = (row["transformers_generate"]["wall_s"]
                                          / row["oasr_auto"]["wall_s"])
        row["auto_over_dense_time"] = (row["oasr_auto"]["wall_s"]
                                               / row["oasr_dense_eager"]["wall_s"])
        row["greedy_agreement_vs_transformers"] = agreement(ours, theirs)
        row["greedy_agreement_paged_vs_dense"] = agreement(ours, ours_dense)
        result["batches"][str(b)] = row
        print(json.dumps({b: {k: (v if not isinstance(v, dict) else
                                  {kk: vv for kk, vv in v.items() if kk != "graph_stats"})
                              for k, v in row.items()}}, indent=1), flush=True)
        if device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()
    if device.type == "cuda":
        result["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
