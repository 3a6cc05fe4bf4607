"""Paraformer's configuration: FunASR's ``config.yaml`` (``encoder_conf``, ``predictor_conf``,
``decoder_conf``, ``frontend_conf``) as one dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oasr.models.config_dict import DictConfig

__all__ = ["ParaformerConfig"]


@dataclass
class ParaformerConfig(DictConfig):
    """Shapes of a FunASR Paraformer (SAN-M encoder, CifPredictorV2, ParaformerSANMDecoder).

    ``input_dim`` is the stacked feature width, ``lfr_m * num_mel_bins`` (560 for 80 mels and
    ``lfr_m = 7``). ``blank_id`` / ``sos_id`` / ``eos_id`` are dropped from the argmax output
    as FunASR's ``inference`` drops them.
    """

    input_dim: int = 560
    vocab_size: int = 8404
    d_model: int = 512
    encoder_layers: int = 50
    encoder_heads: int = 4
    encoder_linear_units: int = 2048
    encoder_kernel_size: int = 11
    encoder_sanm_shift: int = 0
    decoder_layers: int = 16
    decoder_att_layers: int = 16
    decoder_heads: int = 4
    decoder_linear_units: int = 2048
    decoder_kernel_size: int = 11
    decoder_sanm_shift: int = 0
    predictor_l_order: int = 1
    predictor_r_order: int = 1
    predictor_threshold: float = 1.0
    predictor_smooth_factor: float = 1.0
    predictor_noise_threshold: float = 0.0
    predictor_tail_threshold: float = 0.45
    blank_id: int = 0
    sos_id: int = 1
    eos_id: int = 2
    num_mel_bins: int = 80
    lfr_m: int = 7
    lfr_n: int = 6

    def __post_init__(self) -> None:
        if self.d_model % self.encoder_heads or self.d_model % self.decoder_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by the head counts")
        if not 0 < self.decoder_att_layers <= self.decoder_layers:
            raise ValueError(f"decoder_att_layers {self.decoder_att_layers} must be in "
                             f"[1, decoder_layers={self.decoder_layers}]")

    @classmethod
    def from_funasr(cls, conf: dict[str, Any], vocab_size: int) -> ParaformerConfig:
        """From a parsed FunASR ``config.yaml``; refuses the variants not implemented."""
        for key, want in (("encoder", "SANMEncoder"), ("decoder", "ParaformerSANMDecoder"),
                          ("predictor", "CifPredictorV2")):
            if conf.get(key) != want:
                raise ValueError(f"config.yaml {key}={conf.get(key)!r}: only {want} is "
                                 "implemented for paraformer")
        enc, dec = conf.get("encoder_conf", {}), conf.get("decoder_conf", {})
        pred, front = conf.get("predictor_conf", {}), conf.get("frontend_conf", {})
        if enc.get("input_layer", "pe") != "pe":
            raise ValueError(f"encoder input_layer={enc.get('input_layer')!r}: only 'pe'")
        if not enc.get("normalize_before", True) or not dec.get("normalize_before", True):
            raise ValueError("normalize_before=False is not implemented for paraformer")
        lfr_m, n_mels = int(front.get("lfr_m", 7)), int(front.get("n_mels", 80))
        model_conf = conf.get("model_conf", {})
        return cls(
            input_dim=int(conf.get("input_size") or lfr_m * n_mels),
            vocab_size=vocab_size,
            d_model=int(enc.get("output_size", 256)),
            encoder_layers=int(enc.get("num_blocks", 6)),
            encoder_heads=int(enc.get("attention_heads", 4)),
            encoder_linear_units=int(enc.get("linear_units", 2048)),
            encoder_kernel_size=int(enc.get("kernel_size", 11)),
            encoder_sanm_shift=int(enc.get("sanm_shfit", 0)),
            decoder_layers=int(dec.get("num_blocks", 6)),
            decoder_att_layers=int(dec.get("att_layer_num", dec.get("num_blocks", 6))),
            decoder_heads=int(dec.get("attention_heads", 4)),
            decoder_linear_units=int(dec.get("linear_units", 2048)),
            decoder_kernel_size=int(dec.get("kernel_size", 21)),
            decoder_sanm_shift=int(dec.get("sanm_shfit", 0)),
            predictor_l_order=int(pred.get("l_order", 1)),
            predictor_r_order=int(pred.get("r_order", 1)),
            predictor_threshold=float(pred.get("threshold", 1.0)),
            predictor_smooth_factor=float(pred.get("smooth_factor", 1.0)),
            predictor_noise_threshold=float(pred.get("noise_threshold", 0.0)),
            predictor_tail_threshold=float(pred.get("tail_threshold", 0.0)),
            blank_id=int(model_conf.get("blank_id", 0)),
            sos_id=int(model_conf.get("sos", 1)),
            eos_id=int(model_conf.get("eos", 2)),
            num_mel_bins=n_mels,
            lfr_m=lfr_m,
            lfr_n=int(front.get("lfr_n", 6)),
        )
