"""Llama on PyTorch (transformers' LlamaForCausalLM from a LlamaConfig): Llama 3.2 1B's and Llama 3.1 8B's
published sizes, the warm-up cosine schedule, the nanoGPT token-file reader and its checks, and the model FLOPs
the kit counts for a training step against the PaLM paper's closed form."""

import math
import tomllib

import numpy as np
import pytest
import torch

from model_checks import adapter
from tbdkit.adapters.pytorch_profiling import count_flops
from tbdkit.spec import catalog

MODEL = catalog.get("llama")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
DATA = catalog.load_module(MODEL, "data")
from _shared.errors import DataError  # noqa: E402  (on the path once the catalog loaded a workload)
TOML = tomllib.loads((MODEL.folder / "workload.toml").read_text())


def count_on_meta(hp):
    with torch.device("meta"):
        return sum(p.numel() for p in WORKLOAD.make_model(hp).parameters())


def test_published_sizes():
    """Llama 3.2 1B: 1,235,814,400 parameters (tied embeddings); Llama 3.1 8B: 8,030,261,248 (untied)."""
    assert count_on_meta(MODEL.hp("paper")) == 1_235_814_400
    assert count_on_meta(MODEL.hp("paper", "8b")) == 8_030_261_248
    config = WORKLOAD.config(MODEL.hp("paper"))
    assert config.rope_parameters["rope_type"] == "llama3" and config.num_key_value_heads == 8
    assert config._attn_implementation == "sdpa"


def test_optimizer_and_schedule():
    hp = MODEL.hp("smoke")
    training = WORKLOAD.build(hp, torch.device("cpu"))
    group = training.optimizer.param_groups[0]
    assert (group["betas"], group["weight_decay"], training.max_grad_norm) == ((0.9, 0.95), 0.1, 1.0)
    f = WORKLOAD.warmup_cosine(10, 110, 0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(59) == pytest.approx(0.55) and f(109) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)


def write_tokens(path, tokens, dtype):
    np.asarray(tokens, dtype=dtype).tofile(path)
    return path


def test_token_files_are_read_as_nanogpt_writes_them(tmp_path):
    hp = MODEL.hp("smoke")  # a vocabulary of 512: uint16 files
    stream = np.arange(1000) % hp["vocab_size"]
    write_tokens(tmp_path / "train.bin", stream, np.uint16)
    write_tokens(tmp_path / "val.bin", np.zeros(10), np.uint16)  # not read: train.bin is there
    assert "1 files, 1,000 uint16 tokens" in DATA.check_source(str(tmp_path), hp, full=True)
    batch = next(DATA.batches(str(tmp_path), hp, 3, seed=0))
    assert batch.input_ids.shape == (3, hp["seq_len"]) and batch.work == 3 * hp["seq_len"]
    for row in batch.input_ids:  # consecutive tokens of the stream
        assert np.array_equal(np.diff(row) % hp["vocab_size"], np.ones(hp["seq_len"] - 1))
    assert DATA.token_dtype(MODEL.hp("paper")) is np.uint32  # Llama 3's 128256 tokens


@pytest.mark.parametrize("case, message", [
    ("odd", "not a whole number of uint16 tokens"), ("short", "fewer than one sequence"),
    ("outside", "outside the vocabulary of 512"), ("empty", "holds no *.bin token files")])
def test_bad_token_files_are_named(tmp_path, case, message):
    hp = MODEL.hp("smoke")
    if case == "odd":
        (tmp_path / "a.bin").write_bytes(b"\0" * 201)
    elif case == "short":
        write_tokens(tmp_path / "a.bin", np.zeros(hp["seq_len"]), np.uint16)
    elif case == "outside":
        write_tokens(tmp_path / "a.bin", np.full(500, 600), np.uint16)
    with pytest.raises(DataError, match=message.replace("*", r"\*")):
        DATA.check_source(str(tmp_path), hp, full=True)


def palm_flops_per_token(hp, parameters):
    """PaLM (Chowdhery et al. 2022) appendix B: 6N + 12 L H Q T per token, N the parameters the matrix products
    use (the tied embedding once, as the output projection; the RMSNorm gains are element-wise)."""
    h, layers, heads = hp["hidden_size"], hp["num_hidden_layers"], hp["num_attention_heads"]
    norms = (2 * layers + 1) * h
    return 6 * (parameters - norms) + 12 * layers * heads * (h // heads) * hp["seq_len"]


def test_flops_of_a_training_step_match_palms_formula():
    """The kit's counter (torch.utils.flop_counter over one training step, 2 FLOPs per multiply-add) against
    6N + 12LHQT: the dense layers' 6N and attention's 12LHQT (scaled dot-product attention counted whole, the
    causal mask's skipped half included, as PaLM counts it)."""
    hp = MODEL.hp("smoke")
    a = adapter("llama", "pytorch")
    data = next(DATA.batches("synthetic", hp, 2, seed=0))
    inputs = WORKLOAD.to_device(data, torch.device("cpu"))
    flops = count_flops(torch.device("cpu"), lambda: WORKLOAD.train_step(a.training, inputs, a.precision),
                        a.training.model)
    parameters = a.model_info()["parameters"]
    assert flops / data.work == pytest.approx(palm_flops_per_token(hp, parameters), rel=1e-9)
    assert not math.isnan(flops)


def test_fp8_trains_through_torchaos_float8_layers_on_the_cpu():
    """--precision fp8: torchao's convert_to_float8_training swaps every linear layer but the output projection
    (the optimizer keeps the same Parameters), and a step runs through torch's float8 matmul on this CPU."""
    hp = MODEL.hp("smoke") | {"intermediate_size": 192}  # every projection a multiple of 16
    a = adapter("llama", "pytorch", hp=hp, precision="fp8")
    record = a.float8
    assert record["library"] == "torchao.float8" and record["kept"] == ["lm_head"]
    assert record["converted"] == record["linear_layers"] - 1 == 7 * hp["num_hidden_layers"]
    params = {id(p) for p in a.training.model.parameters()}
    assert all(id(p) in params for g in a.training.optimizer.param_groups for p in g["params"])
    data = next(DATA.batches("synthetic", hp, 2, seed=0))
    losses = [float(a.step(a.prepare(data))) for _ in range(3)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses


def test_fp8_is_refused_below_compute_capability_8_9():
    from tbdkit.analysis.peak import fp8_refusal

    assert fp8_refusal("NVIDIA H100 80GB HBM3", (9, 0)) is None and fp8_refusal("NVIDIA L4", (8, 9)) is None
    refusal = fp8_refusal("NVIDIA A100-SXM4-80GB", (8, 0))
    assert refusal.startswith("--precision fp8 needs a GPU with FP8 tensor cores") and "8.0" in refusal
