"""NeMo's ``.nemo`` layout written from a transformers Parakeet model: the weights under NeMo's
key names (renamed by a table written from NeMo's module names, the inverse of transformers'
own NeMo conversion table, independently of the converter's), ``model_config.yaml`` and the
SentencePiece model, in one tar."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path
from typing import Any

import torch
import yaml

# transformers -> NeMo, the inverse of transformers' own conversion table.
HF_TO_NEMO = (
    (r"^encoder\.subsampling\.layers\.", "encoder.pre_encode.conv."),
    (r"^encoder\.subsampling\.linear\.", "encoder.pre_encode.out."),
    (r"\.conv\.norm\.", ".conv.batch_norm."),
    (r"^ctc_head\.", "decoder.decoder_layers.0."),
    (r"^decoder\.embedding\.", "decoder.prediction.embed."),
    (r"^decoder\.lstm\.", "decoder.prediction.dec_rnn.lstm."),
    (r"^encoder_projector\.", "joint.enc."),
    (r"^decoder\.decoder_projector\.", "joint.pred."),
    (r"^joint\.head\.", "joint.joint_net.2."),
    (r"\.q_proj\.", ".linear_q."), (r"\.k_proj\.", ".linear_k."), (r"\.v_proj\.", ".linear_v."),
    (r"\.o_proj\.", ".linear_out."), (r"\.relative_k_proj\.", ".linear_pos."),
    (r"\.bias_([uv])$", r".pos_bias_\1"),
)


def nemo_state(hf: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in hf.state_dict().items():
        for pat, rep in HF_TO_NEMO:
            name = re.sub(pat, rep, name)
        out[name] = t.clone()
    out["preprocessor.featurizer.window"] = torch.hann_window(400)
    return out


def write_nemo_tar(path: Path, config: dict[str, Any], state: dict[str, torch.Tensor],
                   tokenizer_model: Path) -> Path:
    """``path``: a tar of ``model_config.yaml``, ``model_weights.ckpt`` and the tokenizer
    model (named as ``config["tokenizer"]["model"]`` names it, ``nemo:`` stripped)."""
    buf = io.BytesIO()
    torch.save(state, buf)
    name = str(config["tokenizer"]["model"]).removeprefix("nemo:")
    with tarfile.open(path, "w") as tar:
        for member, data in (("./model_config.yaml", yaml.safe_dump(config).encode()),
                             ("./model_weights.ckpt", buf.getvalue()),
                             (f"./{name}", tokenizer_model.read_bytes())):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path
