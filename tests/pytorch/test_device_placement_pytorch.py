"""Every PyTorch workload's input copy and train step create no tensor without a device: run on the
CPU with device-less tensors from workload code sent to the meta device (device_placement.py), a
CPU-only tensor in a GPU path fails here as it would on the GPU."""

from __future__ import annotations

import pytest
import torch

from tbdkit.spec import catalog
from tbdkit.adapters.pytorch import Precision

from device_placement import factories_on_meta

CPU = torch.device("cpu")
PYTORCH_MODELS = sorted(n for n, m in catalog.models().items() if "pytorch" in m.frameworks)


def test_the_check_catches_a_device_less_tensor():
    lengths = torch.tensor([2, 3])
    with factories_on_meta() as mode:
        ok = torch.arange(4, device=lengths.device)[None, :] >= lengths[:, None]
        namespace = {"torch": torch, "lengths": lengths}
        code = compile("torch.arange(4)[None, :] >= lengths[:, None]", f"{catalog.get('transformer').folder}/pytorch.py", "eval")
        with pytest.raises(RuntimeError, match="device"):
            eval(code, namespace)
    assert ok.shape == (2, 4) and mode.moved == ["arange"]


@pytest.mark.parametrize("name", PYTORCH_MODELS)
def test_train_step_places_every_tensor_on_the_run_device(name):
    model = catalog.get(name)
    workload, data = catalog.load_module(model, "pytorch"), catalog.load_module(model, "data")
    hp = model.hp("smoke")
    torch.manual_seed(0)
    training = workload.build(hp, CPU)
    batch = next(data.batches("synthetic", hp, 2, seed=0))
    precision = Precision("fp32", CPU)
    with factories_on_meta():
        loss = workload.train_step(training, workload.to_device(batch, CPU), precision)
    assert loss.device == CPU and torch.isfinite(loss)
