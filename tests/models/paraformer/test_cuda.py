"""Paraformer on CUDA equals CPU (no FunASR needed: the GPU host does not have it)."""

from __future__ import annotations

import pytest
import torch

from oasr.models.paraformer.config import ParaformerConfig
from oasr.models.paraformer.model import ParaformerModel


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    torch.manual_seed(0)
    cfg = ParaformerConfig(input_dim=56, vocab_size=40, d_model=32, encoder_layers=3,
                           encoder_heads=2, encoder_linear_units=48, decoder_layers=3,
                           decoder_att_layers=2, decoder_heads=2, decoder_linear_units=48)
    model = ParaformerModel(cfg).eval()
    with torch.no_grad():
        model.predictor.cif_output.weight.mul_(4.0)
    feats, lens = torch.randn(3, 60, 56), torch.tensor([60, 41, 17])
    with torch.no_grad():
        ids_cpu, cif_cpu = model.transcribe_ids(feats, lens)
        hid_cpu, _ = model.encode_offline(feats, lens)
        model = model.cuda()
        ids_gpu, cif_gpu = model.transcribe_ids(feats.cuda(), lens.cuda())
        hid_gpu, _ = model.encode_offline(feats.cuda(), lens.cuda())
    mask = torch.arange(60)[None, :] < lens[:, None]
    assert (hid_gpu.cpu() - hid_cpu)[mask].abs().max() < 1e-3
    assert (cif_gpu.alphas.cpu() - cif_cpu.alphas).abs().max() < 1e-4
    assert torch.equal(cif_gpu.token_lens.cpu(), cif_cpu.token_lens)
    assert ids_gpu == ids_cpu and sum(map(len, ids_cpu)) > 10
