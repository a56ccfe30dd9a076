"""DiT-XL/2 on PyTorch (diffusers' DiTTransformer2DModel, DDPMScheduler): its size, its FLOPs per 256x256
image against the DiT paper's, the DDPM forward process and the noise-prediction loss, the latent reader."""

import numpy as np
import pytest
import torch

from tbdkit.adapters.pytorch_profiling import count_flops
from tbdkit.spec import catalog

MODEL = catalog.get("dit")
WORKLOAD = catalog.load_module(MODEL, "pytorch")
DATA = catalog.load_module(MODEL, "data")
from _shared.errors import DataError  # noqa: E402  (on the path once the catalog loaded a workload)

META = torch.device("meta")


def test_dit_xl_2_size():
    """DiT-XL/2 has 675.1 M parameters (the DiT repository's count: one timestep and class embedder, and its fixed
    sin-cos position table, a Parameter that does not learn). diffusers' DiTTransformer2DModel (as facebook/DiT-XL-2-256
    is converted) gives each of the 28 blocks its own embedders, 2.78 M each, and keeps the position table as a
    buffer: 749.8 M."""
    hp = MODEL.hp("paper")
    with META:
        model = WORKLOAD.make_model(hp)
    total = sum(p.numel() for p in model.parameters())
    d = hp["num_attention_heads"] * hp["attention_head_dim"]
    embedders = (hp["num_classes"] + 1) * d + (256 * d + d) + (d * d + d)
    positions = (hp["sample_size"] // hp["patch_size"]) ** 2 * d
    assert total == 749_826_464 and total - (hp["num_layers"] - 1) * embedders + positions == 675_129_632


def test_flops_per_image_match_the_dit_papers_118_6_gflops():
    """The DiT paper's 118.6 Gflops for DiT-XL/2 at 256x256 (Table 4) are multiply-adds (fvcore's count, one
    per multiply-add, as its 4.1 for ResNet-50 is): the kit's counter over one forward pass on the meta
    device, at 2 FLOPs per multiply-add, halved."""
    hp = MODEL.hp("paper")
    with META:
        model = WORKLOAD.make_model(hp).eval()
        latents, t, y = torch.zeros(1, 4, 32, 32), torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
    flops = count_flops(META, lambda: model(latents, timestep=t, class_labels=y), model)
    assert flops / 2 == pytest.approx(118.6e9, rel=0.01)


def test_noise_prediction_loss_against_numpy():
    hp = MODEL.hp("smoke")
    training = WORKLOAD.build(hp, torch.device("cpu"))
    batch = next(DATA.batches("synthetic", hp, 3, seed=0))
    inputs = WORKLOAD.to_device(batch, torch.device("cpu"))
    a = np.cumprod(1 - np.linspace(hp["beta_start"], hp["beta_end"], hp["num_train_timesteps"]))[batch.timesteps]
    noisy = np.sqrt(a)[:, None, None, None] * batch.latents + np.sqrt(1 - a)[:, None, None, None] * batch.noise
    seen = {}
    training.model.register_forward_pre_hook(lambda m, args, kwargs: seen.update(x=args[0]), with_kwargs=True)
    out = WORKLOAD.predict(training, inputs)
    assert np.allclose(seen["x"].numpy(), noisy, atol=1e-5) and out.shape == (3, 8, 8, 8)


def test_latent_folders(tmp_path):
    hp = MODEL.hp("smoke")
    np.save(tmp_path / "latents.npy", np.zeros((4, 4, 8, 8), dtype=np.float16))
    np.save(tmp_path / "labels.npy", np.array([0, 1, 2, 9]))
    assert "4 latents float16" in DATA.check_source(str(tmp_path), hp, full=True)
    batch = next(DATA.batches(str(tmp_path), hp, 2, seed=0))
    assert batch.latents.dtype == np.float32 and batch.latents.shape == (2, 4, 8, 8)
    np.save(tmp_path / "labels.npy", np.array([0, 1, 2, 10]))
    with pytest.raises(DataError, match="outside 0..9"):
        DATA.check_source(str(tmp_path), hp, full=True)
    np.save(tmp_path / "latents.npy", np.zeros((4, 4, 16, 16), dtype=np.float32))
    with pytest.raises(DataError, match=r"must be float \(N, 4, 8, 8\)"):
        DATA.check_source(str(tmp_path), hp)
