"""Deep Speech 2 on PyTorch: the network matches workload.toml, trains, and honours the math mode.

Runs in the PyTorch stack's environment (`make test-pytorch`).
"""

import math

import pytest
import torch

from tbdkit.spec import catalog
from tbdkit.adapters.pytorch import Precision, PyTorchAdapter

MODEL = catalog.get("deepspeech2")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
DATA = catalog.load_module(MODEL, "data")


def expected_parameters(hp):
    """Parameter count from the hyperparameters alone, layer by layer."""
    c = hp["conv_channels"]
    (k1f, k1t), (k2f, k2t) = hp["conv1_kernel"], hp["conv2_kernel"]
    conv = c * k1f * k1t + c * c * k2f * k2t + 2 * (2 * c)           # no conv bias under BatchNorm; BN gamma+beta
    freq = hp["frequency_bins"]
    for k, s in ((k1f, hp["conv1_stride"][0]), (k2f, hp["conv2_stride"][0])):
        freq = (freq + 2 * (k // 2) - k) // s + 1
    h = hp["rnn_hidden"]
    rnn, inp = 0, c * freq
    for _ in range(hp["rnn_layers"]):
        rnn += 2 * (3 * h * inp + 3 * h * h + 2 * 3 * h)               # two directions, 3 gates, b_ih and b_hh
        inp = 2 * h                                                  # directions concatenated
    f, v = hp["fc_hidden"], len(hp["alphabet"])
    return conv + rnn + (2 * h * f + f) + (f * v + v)


@pytest.mark.parametrize("preset", ["smoke", "paper"])
def test_parameter_count_matches_the_hyperparameters(preset):
    hp = MODEL.hp(preset)
    model = WORKLOAD.DeepSpeech2(hp)
    assert sum(p.numel() for p in model.parameters()) == expected_parameters(hp)
    assert model.rnn.num_layers == hp["rnn_layers"] and model.rnn.bidirectional


def test_paper_network_size():
    # The network the TBD paper trained (Table II, footnote b): 2 conv + 5 bi-GRU(1760) + FC(1760), 262.1 M.
    assert MODEL.hp("paper")["rnn_layers"] == 5
    assert expected_parameters(MODEL.hp("paper")) == 262_072_253
    # The Deep Speech 2 paper's 7 recurrent layers are a named variant: 373.6 M parameters.
    assert MODEL.hp("paper", "ds2_7layer")["rnn_layers"] == 7
    assert expected_parameters(MODEL.hp("paper", "ds2_7layer")) == 373_628_093
    assert MODEL.hp("smoke", "ds2_7layer")["rnn_layers"] == MODEL.hp("smoke")["rnn_layers"] == 2


def test_output_shapes_and_lengths():
    hp = MODEL.hp("smoke")
    batch = next(DATA.synthetic_batches(hp, 3, seed=0))
    model = WORKLOAD.DeepSpeech2(hp).eval()
    inputs = WORKLOAD.to_device(batch, torch.device("cpu"))
    with torch.no_grad():
        log_probs, lengths = model(inputs["features"], inputs["frames"])
    t = batch.features.shape[-1]
    assert log_probs.shape == (math.ceil(t / 2), 3, len(hp["alphabet"]))
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(log_probs.shape[:2]), atol=1e-4)
    assert lengths.tolist() == [(n - 1) // 2 + 1 for n in batch.feature_lengths.tolist()]


def test_math_modes():
    cpu = torch.device("cpu")
    assert not Precision("fp32", cpu).describe()["tf32_matmul"]
    assert torch.get_float32_matmul_precision() == "highest"
    tf32 = Precision("tf32", cpu).describe()
    assert tf32["tf32_matmul"] and tf32["tf32_cudnn"] and tf32["float32_matmul_precision"] == "high"
    amp = Precision("amp", cpu)
    assert amp.describe()["autocast_dtype"] == "bfloat16" and not amp.describe()["grad_scaler"]
    with amp.autocast():
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.bfloat16
    Precision("fp32", cpu)  # leave the process in fp32


def test_oom_classification():
    adapter = PyTorchAdapter(WORKLOAD, MODEL.hp("smoke"), device="cpu", precision="fp32", seed=0)
    assert adapter.is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"))
    assert adapter.is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert adapter.is_oom(MemoryError())
    assert not adapter.is_oom(ValueError("out of range"))
    assert not adapter.is_oom(RuntimeError("shape mismatch"))
    mem = adapter.memory()["framework_peak_allocated"]
    assert mem["value"] is None and "CPU" in mem["reason"]


def test_gru_canonical_form_matches_the_reference_gru():
    from tbdkit.describe.pytorch import canonical_layers
    from tbdkit.describe.canonical import reference_gru

    gru = torch.nn.GRU(4, 5, bidirectional=True)
    x = torch.randn(7, 1, 4)
    out = gru(x)[0].detach().numpy()
    fwd, bwd = canonical_layers(gru, lambda: gru(x))
    assert (fwd.direction, bwd.direction) == ("forward", "backward")
    assert abs(out[:, 0, :5] - reference_gru(x.numpy(), fwd.params)[:, 0]).max() < 1e-5
    assert abs(out[:, 0, 5:] - reference_gru(x.numpy()[::-1], bwd.params)[::-1, 0]).max() < 1e-5


def test_analytical_flops_agree_with_torch_flop_counter():
    """tbdkit.describe.canonical's forward FLOPs for the reference sample vs PyTorch's own count of the same pass."""
    from torch.utils.flop_counter import FlopCounterMode

    from tbdkit.describe import describe

    hp = MODEL.hp("smoke")
    ours = describe("deepspeech2", "pytorch", "smoke")["flops_per_sample"]["forward"]
    training = WORKLOAD.build(hp, torch.device("cpu"))
    inputs = WORKLOAD.to_device(DATA.reference_batch(hp), torch.device("cpu"))
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        WORKLOAD.forward(training, inputs)
    counted = counter.get_total_flops()
    assert counted > 0
    assert abs(counted - ours) <= 0.01 * ours, (counted, ours, counter.get_flop_counts())
