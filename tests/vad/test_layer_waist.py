"""The detectors' networks are built from oasr.layers, as every architecture is."""

from oasr.vad.fsmn import FsmnNet
from oasr.vad.silero import SileroNet
from tests.models.test_layer_waist import bare_torch_layers


def test_silero_and_fsmn_networks_use_only_the_layer_waist():
    nets = [SileroNet(256), SileroNet(128),
            FsmnNet(input_dim=40, input_affine_dim=8, fsmn_layers=2, linear_dim=12, proj_dim=6,
                    lorder=4, rorder=0, lstride=1, rstride=0, output_affine_dim=8, output_dim=5)]
    for net in nets:
        assert bare_torch_layers(net) == []
        assert sum(1 for _ in net.modules()) > 5  # the walk saw the layers
