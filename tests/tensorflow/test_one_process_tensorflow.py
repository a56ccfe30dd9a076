"""Several replicas in one TensorFlow process (--one-process): MirroredStrategy over the process's
devices, on the CPU two logical CPU devices split from the one. Logical devices can be made only
before TensorFlow's runtime starts, and this suite's process started it long ago: the check runs in
a fresh Python of this stack. The network is MiniGo's: a residual tower with batch norm trained by SGD with
momentum, as ResNet-50 is, whose two traces (two replicas, then one) took 99 s alone against MiniGo's 35 s.
Runs in the TensorFlow stack."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

CHECK = r"""
import json, sys
import numpy as np
import tensorflow as tf
from tbdkit.spec import catalog
from tbdkit.adapters.replicas import split
from tbdkit.adapters.tensorflow import TensorFlowAdapter

model = catalog.get("minigo")
hp = model.hp("smoke")
make = lambda replicas: TensorFlowAdapter(catalog.load_module(model, "tensorflow"), hp, "cpu", "fp32", 0, replicas=replicas)
batch = next(catalog.load_module(model, "data").batches("synthetic", hp, 4, 1))

both = make(2)
start = both.training.model.get_weights()
inputs = both.prepare(batch)
loss = both.loss_value(both.step(inputs))
after = both.training.model.get_weights()
replicas = [[v.numpy() for v in both.strategy.experimental_local_results(w.value)] for w in both.training.model.trainable_weights]

one = make(1)
singles = []
for part in split(batch, 2):
    one.training.model.set_weights(start)
    for v in one.training.optimizer.variables:  # momentum and the step counter back to a first step
        if "learning_rate" not in v.path:
            v.assign(tf.zeros_like(v))
    singles.append((one.loss_value(one.step(one.prepare(part))), one.training.model.get_weights()))

trainable = {id(w) for w in both.training.model.trainable_weights}
index = [i for i, w in enumerate(both.training.model.weights) if id(w) in trainable]
worst, moved = 0.0, 0.0
for i in index:
    update = after[i] - start[i]
    expected = (singles[0][1][i] + singles[1][1][i]) / 2 - start[i]
    ulp = 4 * np.finfo(np.float32).eps * float(np.abs(start[i]).max())
    scale = float(np.abs(expected).max())
    excess = np.abs(update - expected) - (1e-3 * np.abs(expected) + max(1e-5 * scale, ulp))
    worst, moved = max(worst, float(excess.max())), max(moved, scale)
env = both.environment()
print(json.dumps({
    "backend": both.backend, "devices": env["replica_devices"], "strategy": env["distribute_strategy"],
    "parts_on": [t.device for t in inputs["features"].values],
    "loss": loss, "single_losses": [s[0] for s in singles],
    "worst_excess": worst, "moved": moved,
    "replicas_equal": all(len(r) == 2 and np.array_equal(r[0], r[1]) for r in replicas),
}))
"""


@pytest.fixture(scope="module")
def checked() -> dict:
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_two_logical_cpu_devices_under_mirrored_strategy(checked):
    assert checked["strategy"] == "MirroredStrategy" and checked["devices"] == ["/CPU:0", "/CPU:1"]
    assert checked["backend"] == "MirroredStrategy/ReductionToOneDevice (2 replicas in one process)"
    assert [d.rsplit("/", 1)[-1] for d in checked["parts_on"]] == ["device:CPU:0", "device:CPU:1"]


def test_the_first_update_is_the_mean_of_the_replicas_updates(checked):
    """SGD with momentum's first step is linear in the gradient: the one-process step on parts A and B
    gives the mean of what single-replica steps on A and on B give from the same weights (each part's
    loss is divided by the replicas, the strategy sums). A sum instead of a mean doubles the update."""
    assert checked["moved"] > 1e-4 and checked["worst_excess"] <= 0.0, checked
    assert checked["replicas_equal"]  # every replica holds the same weights after the step
    assert checked["loss"] == pytest.approx(sum(checked["single_losses"]) / 2, rel=1e-4)


def test_more_replicas_than_gpus_is_one_sentence():
    from tbdkit.adapters.tensorflow import replica_devices

    with pytest.raises(RuntimeError, match=r"^--gpus-per-node 2 --one-process needs 2 GPUs and TensorFlow sees 0: ask"):
        replica_devices(2, on_gpu=True)  # this machine has none
