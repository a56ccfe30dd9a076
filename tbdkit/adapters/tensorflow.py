"""TensorFlow adapter: device, math mode, seeding, device synchronization and memory statistics."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tbdkit.adapters.cuda_driver import identity, why_no_gpu
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


def gpu_probe() -> tuple[int, str | None]:
    """(GPUs TensorFlow sees, why none when 0): what `--preset auto` and `--device cuda` go by."""
    n = len(tf.config.list_physical_devices("GPU"))
    build = tf.sysconfig.get_build_info()
    return n, None if n else why_no_gpu("TensorFlow", build.get("cuda_version") if build.get("is_cuda_build") else None)


def resolve_device(requested: str) -> tuple[str, int | None]:
    """The TensorFlow device name and the GPU's CUDA ordinal in this process (None on the CPU)."""
    gpus, why = gpu_probe()
    if requested == "auto":
        requested = "cuda:0" if gpus else "cpu"
    if requested == "cpu":
        return "/CPU:0", None
    if not gpus:
        raise RuntimeError(f"--device {requested} cannot run: {why}")
    index = int(requested.partition(":")[2] or 0)
    if index >= gpus:
        raise RuntimeError(f"device '{requested}' was asked for but TensorFlow sees {gpus} GPU(s)")
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

    def optimizer_state_bytes(self) -> int | None:
        """Bytes of every optimizer's variables (slots such as momentum buffers, and its counters);
        None if the workload's training state holds no Keras optimizer."""
        optimizers = [o for o in _attributes(self.training) if isinstance(o, keras.optimizers.Optimizer)]
        if not optimizers:
            return None
        seen: dict[int, Any] = {}
        for opt in optimizers:
            for inner in (opt, getattr(opt, "inner_optimizer", None)):  # a LossScaleOptimizer's own too
                for v in getattr(inner, "variables", None) or ():
                    seen[id(v)] = v
        return sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in seen.values())

    def memory_breakdown(self, step: Any) -> dict[str, Any]:
        """memory.json's categories over steps after the window (tbdkit.adapters.tensorflow_memory)."""
        from tbdkit.adapters.tensorflow_memory import breakdown

        return breakdown(self.model_info()["parameter_bytes"], _attributes(self.training), self.optimizer_state_bytes,
                         self.tf_device.strip("/") if self.cuda_index is not None else None, step)

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
            # TensorFlow names its GPUs by CUDA ordinal only; the driver API says which physical GPU that is.
            env["device_properties"] = {"compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                                        **identity(self.cuda_index)}
        return env


def make(**kwargs: Any) -> TensorFlowAdapter:
    return TensorFlowAdapter(**kwargs)


def _is_lstm_cell(layer: Any) -> bool:
    """A cell with PyTorch's LSTM parameters (kernel, recurrent_kernel, bias_input, bias_hidden; gates i, f, g, o)."""
    return all(hasattr(layer, a) for a in ("kernel", "recurrent_kernel", "bias_input", "bias_hidden"))


def _is_fusion(layer: Any) -> bool:
    """A layer holding the weights of a weighted sum of its inputs (BiFPN's fast normalized fusion)."""
    return isinstance(getattr(layer, "edge_weights", None), keras.Variable)


def _positions(layer: Any, out: Any) -> int:
    if isinstance(layer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D)):
        return int(out.shape[0] * out.shape[1] * out.shape[2])  # every map in the batch (a detector head: one per RoI)
    if isinstance(layer, (keras.layers.Dense, keras.layers.Embedding)):
        return int(np.prod(out.shape[:-1]))
    if isinstance(layer, keras.layers.GRU):
        sequence = out[0] if isinstance(out, (list, tuple)) else out
        return int(sequence.shape[1])
    if _is_lstm_cell(layer):
        return int(out[0].shape[0])
    if isinstance(layer, keras.layers.RNN):  # wrapping an LSTM cell: its steps, from the output sequence
        return int((out[0] if isinstance(out, (list, tuple)) else out).shape[1])
    return 0


def canonical_layers(model: keras.Model, forward: Any) -> list[Any]:
    """The model's layers in forward order, parameters in tbdkit.canonical's layouts, with the output
    positions each layer's weights were applied at during `forward()` (run eagerly on one sample),
    summed over the layer's calls. A layer with a `tied_to` embedding is a dense layer using that
    embedding's table as its weight (BERT's decoder). Learned scalars held by the model itself come
    last ("scale")."""
    from tbdkit.canonical import Layer, gates_from_canonical, reorder_gates

    kinds = (keras.layers.Conv2D, keras.layers.Conv2DTranspose, keras.layers.DepthwiseConv2D, keras.layers.BatchNormalization, keras.layers.GRU, keras.layers.Dense,
             keras.layers.Embedding, keras.layers.LayerNormalization,
             keras.layers.GroupNormalization)
    everything = list(model._flatten_layers(include_self=True, recursive=True))
    # An LSTM cell inside a keras RNN is counted by the RNN's output (the RNN calls it once more
    # than there are steps, to learn its output's shape); a cell called directly, by its calls.
    wrapped = {id(x.cell) for x in everything if isinstance(x, keras.layers.RNN) and _is_lstm_cell(x.cell)}
    # (an RNN over an LSTM cell counts even when it is the model handed in, as a test's lone layer)
    sublayers = [x for x in everything if (
                 (x is not model and (isinstance(x, kinds) or hasattr(x, "tied_to") or _is_fusion(x)
                                      or (_is_lstm_cell(x) and id(x) not in wrapped)))
                 or (isinstance(x, keras.layers.RNN) and id(getattr(x, "cell", None)) in wrapped))]
    in_bidirectional = {id(b.forward_layer) for b in everything if isinstance(b, keras.layers.Bidirectional)}
    seen: dict[int, tuple[Any, int]] = {}  # insertion order = order of first call

    def hook(layer: Any) -> None:
        original = layer.call

        def call(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            if isinstance(layer, keras.layers.Conv2DTranspose):  # counted at its input (canonical.LAYOUTS)
                n = int(np.prod(args[0].shape[:3]))
            else:
                n = int(np.prod(out.shape[:-1])) if hasattr(layer, "tied_to") else _positions(layer, out)
            seen[id(layer)] = (layer, seen.get(id(layer), (layer, 0))[1] + n)
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
    canon: dict[str, tuple[Any, Any, Any]]  # canonical name: (variable, to canonical layout, back)
    for layer, positions in seen.values():
        if isinstance(layer, keras.layers.RNN) and id(layer.cell) in wrapped:
            layer = layer.cell
        if hasattr(layer, "tied_to"):  # with a bias of its own (BERT's decoder) or none (the Transformer's)
            canon = {"bias": (layer.bias, None, None)} if getattr(layer, "bias", None) is not None else {}
            layers.append(Layer("dense", {k: v.numpy() for k, (v, _, _) in canon.items()}, positions=positions,
                                tied={"weight": tuple(layer.tied_to.embeddings.shape)}, assign=_setter(canon)))
            continue
        if _is_fusion(layer):  # fusion weights (BiFPN's edge_weights): one per input
            canon = {"weights": (layer.edge_weights, None, None)}
            layers.append(Layer("fusion", {"weights": layer.edge_weights.numpy()}, assign=_setter(canon)))
            continue
        if isinstance(layer, keras.layers.Conv2D):
            canon = {"weight": (layer.kernel, lambda a: np.transpose(a, (3, 2, 0, 1)),
                                lambda a: np.transpose(a, (2, 3, 1, 0)))}
            kind = "conv2d"
        elif isinstance(layer, keras.layers.Conv2DTranspose):  # (kh, kw, out, in) -> PyTorch's (in, out, kh, kw)
            canon = {"weight": (layer.kernel, lambda a: np.transpose(a, (3, 2, 0, 1)),
                                lambda a: np.transpose(a, (2, 3, 1, 0)))}
            kind = "conv_transpose2d"
        elif isinstance(layer, keras.layers.DepthwiseConv2D):  # PyTorch's grouped conv: (C x M, 1, kh, kw)
            canon = {"weight": (layer.kernel, _depthwise_to_canonical,
                                lambda a, shape=tuple(layer.kernel.shape): _depthwise_from_canonical(a, shape))}
            kind = "conv2d"
        elif isinstance(layer, keras.layers.BatchNormalization):  # scale/center off: no gamma/beta
            canon = {k: (v, None, None) for k, v in (("gamma", layer.gamma), ("beta", layer.beta)) if v is not None}
            kind, positions = "batchnorm", 0
        elif isinstance(layer, (keras.layers.LayerNormalization, keras.layers.GroupNormalization)):
            if isinstance(layer, keras.layers.GroupNormalization) and layer.groups != 1:
                raise ValueError(f"{layer.name}: only GroupNormalization(groups=1), a layer norm, has a canonical layout")
            canon = {"gamma": (layer.gamma, None, None), "beta": (layer.beta, None, None)}
            kind, positions = "layernorm", 0
        elif isinstance(layer, keras.layers.Dense):
            canon = {"weight": (layer.kernel, np.transpose, np.transpose)}
            kind = "dense"
        elif isinstance(layer, keras.layers.Embedding):
            canon, kind = {"weight": (layer.embeddings, None, None)}, "embedding"
        elif _is_lstm_cell(layer):
            canon = {"w_input": (layer.kernel, np.transpose, np.transpose),
                     "w_hidden": (layer.recurrent_kernel, np.transpose, np.transpose),
                     "b_input": (layer.bias_input, None, None), "b_hidden": (layer.bias_hidden, None, None)}
            layers.append(Layer("lstm", {k: (to(v.numpy()) if to else v.numpy()) for k, (v, to, _) in canon.items()},
                                positions=positions, direction=getattr(layer, "direction", None),
                                assign=_setter(canon)))
            continue
        else:
            layers.append(_canonical_gru(layer, positions, id(layer) in in_bidirectional, Layer, reorder_gates,
                                         gates_from_canonical))
            continue
        if kind in ("conv2d", "conv_transpose2d", "dense") and layer.use_bias:
            canon["bias"] = (layer.bias, None, None)
        layers.append(Layer(kind, {k: (to(v.numpy()) if to else v.numpy()) for k, (v, to, _) in canon.items()},
                            positions=positions, assign=_setter(canon)))
    held = {id(w) for layer in everything if layer is not model for w in layer.trainable_weights}
    for w in model.trainable_weights:
        if id(w) not in held and int(np.prod(w.shape)) == 1:
            canon = {"value": (w, lambda a: np.reshape(a, ()), lambda a, shape=tuple(w.shape): np.reshape(a, shape))}
            layers.append(Layer("scale", {"value": np.reshape(w.numpy(), ())}, assign=_setter(canon)))
    return layers


def _depthwise_to_canonical(kernel: np.ndarray) -> np.ndarray:
    """A depthwise kernel (kh, kw, C, M) as PyTorch's Conv2d(groups=C) weight (C x M, 1, kh, kw)."""
    kh, kw, c, m = kernel.shape
    return np.transpose(kernel, (2, 3, 0, 1)).reshape(c * m, 1, kh, kw)


def _depthwise_from_canonical(weight: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    kh, kw, c, m = shape
    return np.transpose(np.reshape(weight, (c, m, kh, kw)), (2, 3, 0, 1))


def _setter(canon: dict[str, tuple[Any, Any, Any]]) -> Any:
    """Assigns canonical arrays to Keras variables, each through its inverse layout change."""
    def assign(arrays: dict[str, np.ndarray]) -> None:
        for key, (variable, _, back) in canon.items():
            variable.assign(back(arrays[key]) if back else arrays[key])
    return assign


def _canonical_gru(layer: Any, steps: int, in_bidirectional: bool, Layer: Any, reorder: Any, unorder: Any) -> Any:
    cell = layer.cell
    if not cell.reset_after:
        raise ValueError(f"{layer.name}: a GRU with reset_after=False is a different network from "
                         "PyTorch's and cuDNN's; build it with reset_after=True")
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
    return Layer("gru", params, positions=steps, direction=direction, assign=assign)


def _attributes(training: Any) -> list[Any]:
    """A workload's training state's attributes, and the items of those that are lists, tuples or dicts."""
    out: list[Any] = []
    for value in vars(training).values() if hasattr(training, "__dict__") else ():
        out.append(value)
        if isinstance(value, (list, tuple)):
            out.extend(value)
        elif isinstance(value, dict):
            out.extend(value.values())
    return out
