"""TensorFlow adapter: device, math mode, seeding, device synchronization and memory statistics."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tbdkit.metric import metric


class Precision:
    """fp32 (TF32 off), tf32 (TF32 matmuls and convolutions), amp (mixed_float16 on a GPU with loss
    scaling, mixed_bfloat16 on a CPU). Set before the model is built: Keras reads the dtype policy then."""

    def __init__(self, mode: str, on_gpu: bool) -> None:
        self.mode = mode
        tf.config.experimental.enable_tensor_float_32_execution(mode == "tf32")
        policy = "float32"
        if mode == "amp":
            policy = "mixed_float16" if on_gpu else "mixed_bfloat16"
        keras.mixed_precision.set_global_policy(policy)
        self.loss_scaling = mode == "amp" and on_gpu

    def wrap_optimizer(self, optimizer: keras.optimizers.Optimizer) -> keras.optimizers.Optimizer:
        return keras.optimizers.LossScaleOptimizer(optimizer) if self.loss_scaling else optimizer

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "tf32_matmul": tf.config.experimental.tensor_float_32_execution_enabled(),
            "tf32_cudnn": tf.config.experimental.tensor_float_32_execution_enabled(),
            "keras_dtype_policy": keras.mixed_precision.global_policy().name,
            "loss_scaling": self.loss_scaling,
        }


def resolve_device(requested: str) -> tuple[str, int | None]:
    """The TensorFlow device name and the GPU index NVML sees (None on the CPU)."""
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "auto":
        requested = "cuda:0" if gpus else "cpu"
    if requested == "cpu":
        return "/CPU:0", None
    index = int(requested.partition(":")[2] or 0)
    if index >= len(gpus):
        raise RuntimeError(f"device '{requested}' was asked for but TensorFlow sees {len(gpus)} GPU(s)")
    return f"/GPU:{index}", index


class TensorFlowAdapter:
    framework = "tensorflow"

    def __init__(self, workload: ModuleType, hp: dict[str, Any], device: str, precision: str, seed: int) -> None:
        keras.utils.set_random_seed(seed)  # Python, NumPy and TensorFlow
        self.tf_device, self.cuda_index = resolve_device(device)
        self.device_label = "cpu" if self.cuda_index is None else f"cuda:{self.cuda_index}"
        if self.cuda_index is not None:
            for gpu in tf.config.list_physical_devices("GPU"):
                tf.config.experimental.set_memory_growth(gpu, True)  # peak memory means what was used
        self.precision = Precision(precision, self.cuda_index is not None)
        self.workload = workload
        with tf.device(self.tf_device):
            self.training = workload.build(hp, self.precision)

    def prepare(self, batch: Any) -> Any:
        return self.workload.to_device(batch, self.tf_device)

    def step(self, inputs: Any) -> Any:
        with tf.device(self.tf_device):
            loss = self.workload.train_step(self.training, inputs, self.precision)
        if self.cuda_index is not None:
            tf.test.experimental.sync_devices()
        return loss

    def loss_value(self, loss: Any) -> float:
        return float(loss.numpy())

    def reset_peaks(self) -> None:
        if self.cuda_index is not None:
            tf.config.experimental.reset_memory_stats(self.tf_device.strip("/"))

    def model_info(self) -> dict[str, Any]:
        model = self.training.model
        weights = model.weights
        return {
            "parameters": sum(int(w.numpy().size) for w in model.trainable_weights),
            "trainable_parameters": sum(int(w.numpy().size) for w in model.trainable_weights),
            "non_trainable_state": sum(int(w.numpy().size) for w in model.non_trainable_weights),
            "parameter_bytes": sum(int(w.numpy().nbytes) for w in weights if w.trainable),
        }

    def memory(self) -> dict[str, Any]:
        method = "tf.config.experimental.get_memory_info(...)['peak'] over the sample window (reset at its start)"
        if self.cuda_index is None:
            reason = "the run is on the CPU: TensorFlow's GPU allocator is not in use (see peak_rss)"
            return {
                "framework_peak_allocated": metric(None, "MiB", method, reason=reason),
                "framework_peak_reserved": metric(None, "MiB", "BFC allocator pool", reason=reason),
            }
        info = tf.config.experimental.get_memory_info(self.tf_device.strip("/"))
        return {
            "framework_peak_allocated": metric(info["peak"] / 2**20, "MiB", method),
            "framework_peak_reserved": metric(
                None, "MiB", "BFC allocator pool",
                reason="TensorFlow does not report its allocator's reserved pool; NVML's memory used covers it"),
        }

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, (tf.errors.ResourceExhaustedError, MemoryError)):
            return True
        text = str(exc)
        return "OOM when allocating" in text or "out of memory" in text.lower()

    def environment(self) -> dict[str, Any]:
        build = tf.sysconfig.get_build_info()
        env: dict[str, Any] = {
            "framework": "tensorflow",
            "framework_version": tf.__version__,
            "keras_version": keras.__version__,
            "cuda_build": bool(build.get("is_cuda_build")),
            "cuda_runtime": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
            "cuda_available": bool(tf.config.list_physical_devices("GPU")),
            "device": self.device_label,
            "tf_device": self.tf_device,
            "device_name": "cpu",
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "math_mode": self.precision.describe(),
        }
        if self.cuda_index is not None:
            details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[self.cuda_index])
            env["device_name"] = details.get("device_name")
            cc = details.get("compute_capability")
            env["device_properties"] = {"compute_capability": f"{cc[0]}.{cc[1]}" if cc else None}
        return env


def make(**kwargs: Any) -> TensorFlowAdapter:
    return TensorFlowAdapter(**kwargs)


def canonical_layers(model: keras.Model, forward: Any) -> list[Any]:
    """The model's layers in forward order, parameters in tbdkit.canonical's layouts, with the output
    positions each layer's weights were applied at during `forward()` (run eagerly on one sample)."""
    from tbdkit.canonical import Layer, gates_from_canonical, reorder_gates

    kinds = (keras.layers.Conv2D, keras.layers.BatchNormalization, keras.layers.GRU, keras.layers.Dense)
    sublayers = [x for x in model._flatten_layers(include_self=False, recursive=True) if isinstance(x, kinds)]
    in_bidirectional = {id(b.forward_layer) for b in model._flatten_layers(include_self=False, recursive=True)
                        if isinstance(b, keras.layers.Bidirectional)}
    seen: list[tuple[Any, Any]] = []

    def hook(layer: Any) -> None:
        original = layer.call

        def call(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            seen.append((layer, out))
            return out
        object.__setattr__(layer, "call", call)

    for layer in sublayers:
        hook(layer)
    try:
        forward()
    finally:
        for layer in sublayers:
            object.__delattr__(layer, "call")
    layers: list[Any] = []
    for layer, out in seen:
        if isinstance(layer, keras.layers.Conv2D):
            canon = {"weight": (layer.kernel, lambda a: np.transpose(a, (3, 2, 0, 1)),
                                lambda a: np.transpose(a, (2, 3, 1, 0)))}
            kind, positions = "conv2d", int(out.shape[1] * out.shape[2])
        elif isinstance(layer, keras.layers.BatchNormalization):
            canon = {"gamma": (layer.gamma, None, None), "beta": (layer.beta, None, None)}
            kind, positions = "batchnorm", 0
        elif isinstance(layer, keras.layers.Dense):
            canon = {"weight": (layer.kernel, np.transpose, np.transpose)}
            kind, positions = "dense", int(np.prod(out.shape[:-1]))
        else:
            layers.append(_canonical_gru(layer, out, id(layer) in in_bidirectional, Layer, reorder_gates,
                                         gates_from_canonical))
            continue
        if kind != "batchnorm" and layer.use_bias:
            canon["bias"] = (layer.bias, None, None)
        layers.append(Layer(kind, {k: (to(v.numpy()) if to else v.numpy()) for k, (v, to, _) in canon.items()},
                            positions=positions, assign=_setter(canon)))
    return layers


def _setter(canon: dict[str, tuple[Any, Any, Any]]) -> Any:
    """Assigns canonical arrays to Keras variables, each through its inverse layout change."""
    def assign(arrays: dict[str, np.ndarray]) -> None:
        for key, (variable, _, back) in canon.items():
            variable.assign(back(arrays[key]) if back else arrays[key])
    return assign


def _canonical_gru(layer: Any, out: Any, in_bidirectional: bool, Layer: Any, reorder: Any, unorder: Any) -> Any:
    cell = layer.cell
    if not cell.reset_after:
        raise ValueError(f"{layer.name}: a GRU with reset_after=False is a different network from "
                         "PyTorch's and cuDNN's; build it with reset_after=True")
    sequence = out[0] if isinstance(out, (list, tuple)) else out
    direction = "backward" if layer.go_backwards else "forward" if in_bidirectional else None
    bias = cell.bias.numpy()
    params = {
        "w_input": reorder(cell.kernel.numpy().T, "zrn"),
        "w_hidden": reorder(cell.recurrent_kernel.numpy().T, "zrn"),
        "b_input": reorder(bias[0], "zrn"),
        "b_hidden": reorder(bias[1], "zrn"),
    }

    def assign(arrays: dict[str, np.ndarray]) -> None:
        cell.kernel.assign(unorder(arrays["w_input"], "zrn").T)
        cell.recurrent_kernel.assign(unorder(arrays["w_hidden"], "zrn").T)
        cell.bias.assign(np.stack([unorder(arrays["b_input"], "zrn"), unorder(arrays["b_hidden"], "zrn")]))
    return Layer("gru", params, positions=int(sequence.shape[1]), direction=direction, assign=assign)
