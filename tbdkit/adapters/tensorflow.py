"""TensorFlow adapter: device, math mode, seeding, device synchronization and memory statistics."""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tbdkit.adapters.cuda_driver import identity, why_no_gpu
from tbdkit.adapters.replicas import split
from tbdkit.adapters.tensorflow_compile import XlaStep
from tbdkit.analysis.peak import bf16_refusal
from tbdkit.core.metric import metric


class Precision:
    """fp32 (TF32 off), tf32 (TF32 matmuls and convolutions), amp (mixed_float16 on a GPU with loss
    scaling, mixed_bfloat16 on a CPU), bf16 (mixed_bfloat16 without loss scaling, on a GPU of compute
    capability 8.0 or newer, or on a CPU). Set before the model is built: Keras reads the dtype policy
    then. `gpu`: the run's GPU as tf.config.experimental.get_device_details gives it, None on the CPU."""

    def __init__(self, mode: str, on_gpu: bool, gpu: dict[str, Any] | None = None) -> None:
        if mode == "bf16" and gpu and gpu.get("compute_capability"):
            refusal = bf16_refusal(str(gpu.get("device_name") or "this GPU"), tuple(gpu["compute_capability"]))
            if refusal:
                raise RuntimeError(refusal)
        self.mode = mode
        tf.config.experimental.enable_tensor_float_32_execution(mode == "tf32")
        policy = "float32"
        if mode == "amp":
            policy = "mixed_float16" if on_gpu else "mixed_bfloat16"
        elif mode == "bf16":
            policy = "mixed_bfloat16"
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


def set_threads(threads: tuple[int, int] | None) -> dict[str, Any]:
    """(intra-op, inter-op) threads from the run's CPU budget (tbdkit.env.cpus), set before TensorFlow's
    runtime starts (it refuses them after); what TensorFlow then reports, for env.json."""
    out: dict[str, Any] = {"requested": None if threads is None else {"intra_op": threads[0], "inter_op": threads[1]}}
    if threads is not None:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads[0])
            tf.config.threading.set_inter_op_parallelism_threads(threads[1])
        except RuntimeError as exc:  # the runtime was already initialized: its threads stay, and env.json says so
            out["error"] = str(exc)
    out.update(
        intra_op=tf.config.threading.get_intra_op_parallelism_threads(),
        inter_op=tf.config.threading.get_inter_op_parallelism_threads(),
        method="tf.config.threading.set_intra_op / set_inter_op_parallelism_threads, read back with get_*",
    )
    return out


def worker_of_job(env: dict[str, str] | None = None) -> int | None:
    """This process's index among the job's workers when the launcher wrote it a TF_CONFIG naming
    more than one worker, else None (a single-worker run)."""
    raw = (os.environ if env is None else env).get("TF_CONFIG")
    if not raw:
        return None
    config = json.loads(raw)
    workers = config.get("cluster", {}).get("worker", [])
    return int(config["task"]["index"]) if len(workers) > 1 else None


def multi_worker_strategy(on_gpu: bool) -> tf.distribute.Strategy:
    """MultiWorkerMirroredStrategy over the cluster in TF_CONFIG: NCCL all-reduce between GPUs,
    RING (TensorFlow's own collective over gRPC) between CPUs. It configures the collective ops
    of the eager context, so it is made before anything else touches TensorFlow's runtime."""
    impl = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(implementation=impl.NCCL if on_gpu else impl.RING)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def replica_devices(replicas: int, on_gpu: bool) -> list[str]:
    """The devices of one process's replicas (--one-process): its first `replicas` GPUs, or on the CPU
    `replicas` logical CPU devices split from the one physical CPU (their ops share its thread pools).
    Called before TensorFlow's runtime starts: logical devices cannot be made after."""
    if on_gpu:
        gpus = gpu_probe()[0]
        if gpus < replicas:
            raise RuntimeError(
                f"--gpus-per-node {replicas} --one-process needs {replicas} GPUs and TensorFlow sees {gpus}: "
                "ask for fewer, or make more visible (CUDA_VISIBLE_DEVICES)"
            )
        return [f"/GPU:{i}" for i in range(replicas)]
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    return [f"/CPU:{i}" for i in range(replicas)]


def mirrored_strategy(devices: list[str], on_gpu: bool) -> tuple[tf.distribute.Strategy, str]:
    """MirroredStrategy over one process's devices: NCCL all-reduce between GPUs; between logical
    CPU devices a reduction to the first (NCCL has no CPU path). The strategy and its backend's name."""
    ops = tf.distribute.NcclAllReduce() if on_gpu else tf.distribute.ReductionToOneDevice(reduce_to_device=devices[0])
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=ops), (
        f"MirroredStrategy/{type(ops).__name__} ({len(devices)} replicas in one process)"
    )


class TensorFlowAdapter:
    framework = "tensorflow"
    comm = None  # the all-reduce runs inside the compiled step: TensorFlow exposes no per-collective timing
    comm_reason = (
        "the strategy's all-reduce runs inside the compiled training step; TensorFlow "
        "exposes no timing of its collectives outside a profiler trace"
    )

    def __init__(
        self,
        workload: ModuleType,
        hp: dict[str, Any],
        device: str,
        precision: str,
        seed: int,
        threads: tuple[int, int] | None = None,
        replicas: int = 1,
        graph: str = "standard",
    ) -> None:
        self.threads = set_threads(threads)
        self.strategy: tf.distribute.Strategy | None = None
        self.backend: str | None = None
        self.replica_devices: list[str] = []
        if replicas > 1 or worker_of_job() is not None:
            on_gpu = device != "cpu" and gpu_probe()[0] > 0
            if replicas > 1:  # one process, several replicas (--one-process): MirroredStrategy
                self.replica_devices = replica_devices(replicas, on_gpu)
                self.strategy, self.backend = mirrored_strategy(self.replica_devices, on_gpu)
            else:  # one replica per worker process: the launcher gives each one GPU at most
                self.strategy = multi_worker_strategy(on_gpu)
                self.backend = "MultiWorkerMirroredStrategy/" + ("NCCL" if on_gpu else "RING")
        keras.utils.set_random_seed(seed)  # Python, NumPy and TensorFlow
        self.tf_device, self.cuda_index = resolve_device(device)
        self.device_label = "cpu" if self.cuda_index is None else f"cuda:{self.cuda_index}"
        if self.cuda_index is not None:
            for gpu in tf.config.list_physical_devices("GPU"):
                tf.config.experimental.set_memory_growth(gpu, True)  # peak memory means what was used
        gpu = (
            tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[self.cuda_index])
            if self.cuda_index is not None
            else None
        )
        self.precision = Precision(precision, self.cuda_index is not None, gpu)
        self.workload = workload
        with self.strategy.scope() if self.strategy is not None else tf.device(self.tf_device):
            self.training = workload.build(hp, self.precision)
        # --graph compiled: the workload's tf.functions again with jit_compile=True (XLA), where it has them
        self.graph = graph
        self.xla = XlaStep(self.training, self.strategy is not None) if graph == "compiled" else None
        self._replicated = self._replicated_step() if self.strategy is not None else None

    def _replicated_step(self) -> Any:
        """The workload's step run by the strategy on this worker's replica (each worker its own batch;
        the optimizer all-reduces the gradients); this worker's own loss comes back."""
        strategy = self.strategy
        assert strategy is not None
        # A tf.function inside strategy.run may not hold a synchronization point (the optimizer's
        # all-reduce): the workload's compiled step runs as plain Python, traced into this one.
        compiled = getattr(self.training, "step", None)
        if compiled is not None and hasattr(compiled, "python_function"):
            self.training.step = compiled.python_function

        @tf.function
        def step(inputs: Any) -> Any:
            losses = strategy.run(lambda i: self.workload.train_step(self.training, i, self.precision), args=(inputs,))
            if self.replica_devices:  # each replica's loss is the mean over its part of the batch
                return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)
            return strategy.experimental_local_results(losses)[0]

        return step

    def join(self, world_size: int) -> None:
        if self.strategy is None:
            raise RuntimeError(
                "this TensorFlow worker has no TF_CONFIG naming several workers: start data-parallel "
                "jobs through tbdkit's launchers"
            )
        if self.strategy.num_replicas_in_sync != world_size:
            raise RuntimeError(
                f"MultiWorkerMirroredStrategy has {self.strategy.num_replicas_in_sync} replicas and the "
                f"job {world_size} workers: give each worker process one GPU (CUDA_VISIBLE_DEVICES) or none"
            )

    def leave(self) -> None:
        """Nothing to end: the strategy's gRPC server goes with the process."""

    def prepare(self, batch: Any) -> Any:
        if not self.replica_devices:
            return self.workload.to_device(batch, self.tf_device)
        # one part of the batch per replica, each on its replica's device
        parts = [
            self.workload.to_device(part, d)
            for part, d in zip(split(batch, len(self.replica_devices)), self.replica_devices)
        ]
        assert self.strategy is not None
        return self.strategy.experimental_distribute_values_from_function(
            lambda ctx: parts[ctx.replica_id_in_sync_group]
        )

    def step(self, inputs: Any) -> Any:
        if self._replicated is not None:
            loss = self._replicated(inputs)
        else:
            with tf.device(self.tf_device):
                loss = (
                    self.xla.run(lambda: self.workload.train_step(self.training, inputs, self.precision))
                    if self.xla is not None
                    else self.workload.train_step(self.training, inputs, self.precision)
                )
        if self.cuda_index is not None:
            tf.test.experimental.sync_devices()
        return loss

    def loss_value(self, loss: Any) -> float:
        return float(loss.numpy())

    def compilations(self) -> int | None:
        return self.xla.compilations() if self.xla is not None else None

    def compile_record(self) -> dict[str, Any]:
        if self.xla is None:
            return {"graph": "standard", "compiler": "none: the workload's tf.function graphs (the paper's setting)"}
        return self.xla.record()

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

        return breakdown(
            self.model_info()["parameter_bytes"],
            _attributes(self.training),
            self.optimizer_state_bytes,
            self.tf_device.strip("/") if self.cuda_index is not None else None,
            step,
        )

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
                None,
                "MiB",
                "BFC allocator pool",
                reason="TensorFlow does not report its allocator's reserved pool; NVML's memory used covers it",
            ),
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
            "threads": {
                **self.threads,
                "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
            },
            "math_mode": self.precision.describe(),
            "graph": self.graph,
            "compile": self.xla.config() if self.xla is not None else self.compile_record(),
            "distribute_strategy": type(self.strategy).__name__ if self.strategy is not None else None,
            "replica_devices": self.replica_devices or None,
        }
        if self.cuda_index is not None:
            details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[self.cuda_index])
            env["device_name"] = details.get("device_name")
            cc = details.get("compute_capability")
            # TensorFlow names its GPUs by CUDA ordinal only; the driver API says which physical GPU that is.
            env["device_properties"] = {
                "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                **identity(self.cuda_index),
            }
        return env


def make(**kwargs: Any) -> TensorFlowAdapter:
    return TensorFlowAdapter(**kwargs)


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
