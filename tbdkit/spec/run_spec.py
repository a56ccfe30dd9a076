"""RunSpec: what one benchmark run trains, where, and how it is measured.

A spec is validated completely before anything runs; an invalid one becomes a UserError that
names the field and the values it allows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tbdkit.core.errors import UserError
from tbdkit.core.frameworks import KNOWN_FRAMEWORKS
from tbdkit.core.statistics import DRIFT_PROJECTION
from tbdkit.spec import catalog, launchers
from tbdkit.spec.provenance import WorkloadRecord

# bf16: bfloat16 autocast, no loss scaling; fp8: PyTorch only, torchao's float8 linear layers under bf16 autocast
Precision = Literal["fp32", "tf32", "amp", "bf16", "fp8"]
# standard: the paper's settings, each framework as it trains by default (PyTorch eager, TensorFlow's
# tf.function graphs, MXNet hybridized with static_alloc); compiled: each at its compiler's best
# (torch.compile with inductor, XLA, MXNet's static shapes: tbdkit/adapters/*_compile.py)
Graph = Literal["standard", "compiled"]
# private: each compiled run compiles from an empty cache of its own (compile_s: the cold cost); shared: PyTorch's
# inductor and Triton caches kept across runs (compile_s: the warm cost where an earlier run compiled the same graphs)
CompileCache = Literal["private", "shared"]
_RATE = re.compile(r"^[1-9][0-9]{0,8}(kbit|mbit|gbit)$")
_RATE_UNITS = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
Preset = Literal["smoke", "paper", "converge"]  # converge: train to a quality target (tbdkit/agent/converge.py)
Launcher = launchers.Name  # the table of launchers and what each can run: tbdkit/spec/launchers.py
_DEVICE = re.compile(r"^(auto|cpu|cuda(:[0-9]{1,6})?)$")
# Validation context: a spec recorded by a run (a bundle's spec.json) is checked without asking whether
# its dataset path exists here (the run read it where it ran).
RECORDED = "recorded"
# Every framework and NumPy take a seed in [0, 2**31 - 1] (a worker adds its rank: still below 2**32).
SEED_MAX = 2**31 - 1

# The bounds of every field a spec (or a bundle's spec.json) can set: a run here never asks for more
# than a careful user would type. Each bound's sentence (why it is there) is in BOUNDS below.
MAX_PHASE_S = 3600.0  # a warm-up cap and a window cap: an hour each
MAX_ITERATIONS = 1_000_000
MAX_WARMUP_WINDOW = 10_000
MAX_WARMUP_STRETCH = 10.0
MIN_SAMPLE_INTERVAL_S, MAX_SAMPLE_INTERVAL_S = 0.01, 60.0
MAX_SYNTHETIC_POOL = 1024
MAX_BATCH = 65_536
MAX_MEMORY_LIMIT_MB = 2**24  # 16 TiB
MAX_NODES = MAX_GPUS_PER_NODE = 64
MAX_CPUS = 4096
MAX_CUDA_INDEX = 63
MIN_LINK_BITS, MAX_LINK_BITS = 1_000, 400 * 10**9  # 1kbit to 400gbit
WORKERS_PER_CORE = 2  # a data-parallel job on the CPU: at most this many worker processes per core
BOUNDS: dict[str, str] = {
    "max_warmup_s": f"a warm-up cap is a number of seconds above 0 and at most {MAX_PHASE_S:.0f}, an hour (the "
    "paper preset's is 120)",
    "max_measure_s": f"a sample window's cap is a number of seconds above 0 and at most {MAX_PHASE_S:.0f}, an hour "
    "(the paper preset's is 180)",
    "min_warmup_iterations": f"must be a whole number from 1 to {MAX_ITERATIONS:,}",
    "max_warmup_iterations": f"must be a whole number from 1 to {MAX_ITERATIONS:,}",
    "min_measure_iterations": f"must be a whole number from 2 to {MAX_ITERATIONS:,}",
    "max_measure_iterations": f"must be a whole number from 2 to {MAX_ITERATIONS:,}",
    "warmup_window": f"must be a whole number of iterations from 2 to {MAX_WARMUP_WINDOW:,}",
    "warmup_tolerance": "must be a fraction above 0 and below 1, e.g. 0.05",
    "max_warmup_stretch": f"must be a multiple of the warm-up cap from 1 (a fixed cap) to {MAX_WARMUP_STRETCH:g}, e.g. 2",
    "warmup_drift_projection": "must be a multiple of the iterations so far above 0 and at most 10, e.g. 1.5",
    "target_ci": "must be a fraction above 0 and below 1, e.g. 0.01",
    "sample_interval_s": f"the collectors sample every {MIN_SAMPLE_INTERVAL_S} to {MAX_SAMPLE_INTERVAL_S:.0f} s "
    "(faster than 10 ms the sampling itself becomes the load it measures)",
    "synthetic_pool": f"must be a whole number of batches from 1 to {MAX_SYNTHETIC_POOL} (the synthetic batches "
    "are all held in memory)",
    "foreign_cpu_limit": f"must be a number of cores above 0 and at most {MAX_CPUS}",
    "batch_size": f"a batch size is a whole number from 1 to {MAX_BATCH:,} (per worker)",
    "batches": f"batch sizes are whole numbers from 1 to {MAX_BATCH:,} or 'max', at most 64 of them",
    "max_batch_limit": f"the max-batch search's limit is a whole number from 1 to {MAX_BATCH:,}",
    "memory_limit_mb": f"a memory cap is a whole number of MiB from 1 to {MAX_MEMORY_LIMIT_MB:,} (16 TiB)",
    "nodes": f"a job has 1 to {MAX_NODES} nodes",
    "gpus_per_node": f"a node has 1 to {MAX_GPUS_PER_NODE} GPUs (workers)",
    "cpus": f"a run is given 1 to {MAX_CPUS} cores",
    "repeat": "a grid point runs 1 to 100 times",
    "retry_disturbed": "a disturbed point is retried 0 to 10 times",
    "cv_limit": "must be a fraction above 0 and below 1, e.g. 0.05",
    "frameworks": "one to 16 frameworks",
    "precisions": "one to 16 precisions, each fp32, tf32 or amp",
}


# The models TensorFlow's data parallelism is built and checked for: the paper's Fig. 9 cells, ResNet-50 and
# MiniGo (every TensorFlow step divides its loss by the replicas in the update they share, workloads/_shared/tf_amp.py,
# so that the strategy's summed gradients are their mean; only these steps are checked under a strategy: the
# classifiers' shared step, and MiniGo's in tests/tensorflow/test_one_process_tensorflow.py).
TF_DATA_PARALLEL_MODELS = frozenset({"inception_v3", "minigo", "resnet50"})
# The models that train several replicas in one process (--one-process: TensorFlow's MirroredStrategy,
# MXNet's `device` kvstore): the image classifiers, whose shared steps take one part of the batch per
# replica (workloads/_shared/keras_classifier.py, gluon_classifier.py).
ONE_PROCESS_MODELS = frozenset({"inception_v3", "resnet50"})
ONE_PROCESS_FRAMEWORKS = ("tensorflow", "mxnet")
# The models whose PyTorch workload names the layers FSDP2 shards (`shard_units`) and builds its optimizer over
# the sharded parameters (`optimize`): --parallel fsdp (tbdkit.adapters.pytorch_fsdp).
FSDP_MODELS = frozenset({"llama"})


def link_bits(rate: str) -> int:
    """A tc rate such as 100mbit in bits per second."""
    unit = rate[-4:]
    return int(rate[:-4]) * _RATE_UNITS[unit]


class MeasurePolicy(BaseModel):
    """How warm-up is detected and when the sample window stops.

    Warm-up ends when the cost per unit of work (seconds per audio second, per image, ...) has
    stopped drifting over a trailing horizon of at least 2 x `warmup_window` iterations (the later
    half of all so far): the halves' means agree within `warmup_tolerance`, the slope's interval
    moves it by less than that, and Mann-Kendall finds no trend (core/statistics.py::warmup_done);
    after at least `min_warmup_iterations`; or at a warm-up cap. The window
    then runs until the 95% confidence half-width of the throughput is below `target_ci`
    (relative) with at least `min_measure_iterations`, or a time or iteration cap is hit.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    min_warmup_iterations: int = Field(100, ge=1, le=MAX_ITERATIONS)
    warmup_window: int = Field(50, ge=2, le=MAX_WARMUP_WINDOW)
    warmup_tolerance: float = Field(0.05, gt=0, lt=1)
    # how far (x the iterations so far) the slope's interval is carried in the warm-up rule's drift test
    warmup_drift_projection: float = Field(DRIFT_PROJECTION, gt=0, le=10)
    max_warmup_s: float = Field(120.0, gt=0, le=MAX_PHASE_S)
    # up to this multiple of max_warmup_s the warm-up cap grows where, at the pace and noise measured, the
    # iterations the rule needs would not fit max_warmup_s (core/statistics.py::stretched_warmup_cap); 1: fixed
    max_warmup_stretch: float = Field(1.0, ge=1, le=MAX_WARMUP_STRETCH)
    max_warmup_iterations: int = Field(5000, ge=1, le=MAX_ITERATIONS)
    target_ci: float = Field(0.01, gt=0, lt=1)
    min_measure_iterations: int = Field(10, ge=2, le=MAX_ITERATIONS)
    max_measure_s: float = Field(180.0, gt=0, le=MAX_PHASE_S)
    max_measure_iterations: int = Field(2000, ge=2, le=MAX_ITERATIONS)
    sample_interval_s: float = Field(0.5, ge=MIN_SAMPLE_INTERVAL_S, le=MAX_SAMPLE_INTERVAL_S)
    synthetic_pool: int = Field(8, ge=1, le=MAX_SYNTHETIC_POOL)
    foreign_cpu_limit: float = Field(
        0.25,
        gt=0,
        le=MAX_CPUS,
        description="core-equivalents of other processes' CPU time on the "
        "run's cores above which its window is disturbed (tbdkit.agent.disturbance)",
    )

    @property
    def longest_warmup_s(self) -> float:
        return longest_warmup_s(self.max_warmup_s, self.max_warmup_stretch)


def longest_warmup_s(cap_s: float, stretch: float) -> float:
    """The longest a warm-up may take: its cap stretched as far as the policy allows, within MAX_PHASE_S."""
    return max(cap_s, min(cap_s * stretch, MAX_PHASE_S))


# smoke: the warm-up rule's minimum (60 iterations, a horizon of at least 60) fits its 45 s cap for a
# model that takes up to 0.7 s an iteration; the default's 100 would not fit Deep Speech 2's smoke network
# on 2 CPU cores. Its drift test carries the slope's interval over the horizon alone (0.5 x the
# iterations so far), not 1.5 x: its window is as short as its warm-up, and with 1.5 a settled series
# with 4.8% noise per iteration needs about 770 iterations (core/statistics.py::warmup_iterations_needed).
# Both presets let the warm-up cap stretch (max_warmup_stretch) where the rule's own minimum, or the iterations the
# measured noise needs, would not fit the cap at the measured pace: a slow step (Deep Speech 2's, on a slow CPU or at
# the paper's batch on a GPU) would otherwise end every warm-up capped, whatever its cost did. Smoke stays a short
# run (at most twice its cap); the paper preset may take three times its cap to warm up.
# What it was chosen on: docs/measurements.md, "Warm-up"; what it held on which machine: docs/measured-here.md.
PRESET_POLICY: dict[str, dict[str, Any]] = {
    "smoke": {
        "max_warmup_s": 45.0,
        "max_measure_s": 45.0,
        "min_warmup_iterations": 60,
        "warmup_window": 30,
        "warmup_drift_projection": 0.5,
        "max_warmup_stretch": 2.0,
    },
    "paper": {"max_warmup_stretch": 3.0},
    "converge": {},  # no sample window: the preset's own target and max_train_s end the run
}


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    framework: str = "pytorch"
    batch_size: int = Field(gt=0, le=MAX_BATCH)
    precision: Precision = "fp32"
    graph: Graph = "standard"
    compile_cache: CompileCache = "private"
    preset: Preset = "smoke"
    variant: str | None = Field(None, description="one of the model's [setting.<name>] tables, under the preset")
    device: str = "auto"
    launcher: Launcher = "native"
    # the `tbdkit render` target the job's files were written for (slurm, k8s, compose, torchrun); None when a
    # launcher of the kit started it
    rendered_for: Literal["torchrun", "slurm", "k8s", "compose"] | None = None
    data: str = "synthetic"
    seed: int = 0
    memory_limit_mb: int | None = Field(
        None,
        gt=0,
        le=MAX_MEMORY_LIMIT_MB,
        description="cap on the agent's memory growth (its address space above what it holds "
        "once the framework and model are loaded): allocations past it fail as out-of-memory instead of swapping or waking the OOM killer",
    )
    measure: MeasurePolicy = Field(default_factory=MeasurePolicy)
    analyses: bool = Field(
        True,
        description="after the window: memory breakdown, model FLOPs and MFU, "
        "kernel trace on CUDA (tbdkit.agent.after_window), in extra iterations outside it",
    )
    # Data parallelism (paper Sec. IV-E): the per-worker mini-batch is batch_size, fixed; the
    # global batch grows with nodes x gpus_per_node. On CPUs a "GPU" is a worker process.
    # PyTorch: DDP through torchrun; TensorFlow: MultiWorkerMirroredStrategy; MXNet: kvstore dist_sync.
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    gpus_per_node: int = Field(1, ge=1, le=MAX_GPUS_PER_NODE)
    parallel: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="PyTorch jobs: ddp replicates the model on each worker (DistributedDataParallel); fsdp shards "
        "parameters, gradients and optimizer state over the workers (FSDP2's fully_shard)",
    )
    link_rate: str | None = Field(
        None, description="shape each node's link to this rate with tc (netns launcher), e.g. 1gbit"
    )
    one_process: bool = Field(
        False,
        description="train the node's gpus_per_node replicas in one process, as the paper's single-machine "
        "runs did: TensorFlow's MirroredStrategy, MXNet's `device` kvstore (on CPUs, logical CPU devices); "
        "otherwise each replica is a worker process of its own",
    )
    cpus: int | None = Field(
        None,
        ge=1,
        le=MAX_CPUS,
        description="cores the run is given (split over its workers on this machine): "
        "the frameworks' threads are set from it (tbdkit.env.cpus); None: every core of the "
        "affinity mask and cgroup quota",
    )
    pin: bool = Field(False, description="pin the agent to the first `cpus` cores of its affinity mask")
    workload: WorkloadRecord | None = Field(
        None,
        description="written by the launcher into the run's spec.json (never typed): the hyperparameters the run "
        "resolved and a sha256 of every file of the model's folder and of the _shared files it imports",
    )

    @property
    def world_size(self) -> int:
        """Replicas of the model the job trains (GPUs; on CPUs, workers or logical devices)."""
        return self.nodes * self.gpus_per_node

    @property
    def replicas_per_process(self) -> int:
        return self.gpus_per_node if self.one_process else 1

    @property
    def processes(self) -> int:
        """The job's worker processes (each trains replicas_per_process replicas)."""
        return self.world_size // self.replicas_per_process

    @property
    def processes_per_node(self) -> int:
        return self.gpus_per_node // self.replicas_per_process

    @property
    def workers_here(self) -> int:
        """How many of the job's worker processes share this machine's cores (tbdkit.spec.launchers)."""
        return launchers.workers_here(self.processes, self.processes_per_node, self.launcher)

    @field_validator("link_rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None and not (_RATE.match(value) and MIN_LINK_BITS <= link_bits(value) <= MAX_LINK_BITS):
            raise ValueError("must be a tc rate from 1kbit to 400gbit, such as 100mbit, 1gbit or 10gbit")
        return value

    @model_validator(mode="after")
    def _distributed(self) -> RunSpec:
        only = TF_DATA_PARALLEL_MODELS if self.framework == "tensorflow" else None
        if self.world_size > 1 and only is not None and self.model not in only:
            raise ValueError(
                f"model: data-parallel TensorFlow (MultiWorkerMirroredStrategy) is built for "
                f"{', '.join(sorted(only))}, whose shared training step averages the replicas' gradients; "
                f"run {self.model} with --framework pytorch or mxnet, or with --nodes 1 --gpus-per-node 1"
            )
        traits = launchers.TRAITS[self.launcher]
        if self.world_size > 1 and not traits.several_workers:
            raise ValueError(
                "launcher: several workers run natively (one process each) or over network namespaces "
                "(--launcher netns); for containers on a cluster use `tbdkit render`"
            )
        if self.nodes > 1 and not (traits.nodes_here or traits.elsewhere):
            raise ValueError(
                "launcher: several nodes on this machine need --launcher netns (one network namespace per "
                "node); on a cluster use --launcher slurm (or `tbdkit render --target slurm|k8s`)"
            )
        if self.link_rate is not None and not traits.shapes_links:
            raise ValueError("link_rate: shaping the link needs --launcher netns")
        if self.one_process:
            self._check_one_process()
        if self.parallel == "fsdp":
            self._check_fsdp()
        if self.precision == "fp8" and self.framework != "pytorch":
            raise ValueError("precision: fp8 trains through PyTorch's torchao float8 layers; use --framework pytorch")
        return self

    def _check_fsdp(self) -> None:
        if self.framework != "pytorch" or self.model not in FSDP_MODELS:
            raise ValueError(
                f"parallel: fsdp (PyTorch's FSDP2) is built for {', '.join(sorted(FSDP_MODELS))} on PyTorch; "
                f"run {self.model} on {self.framework} with --parallel ddp"
            )
        if self.world_size < 2:
            raise ValueError("parallel: fsdp shards over the workers of a job: use --gpus-per-node 2 or more")

    def _check_one_process(self) -> None:
        if self.framework not in ONE_PROCESS_FRAMEWORKS:
            raise ValueError(
                "one_process: several replicas in one process are TensorFlow's MirroredStrategy and MXNet's "
                f"`device` kvstore; {self.framework} runs one worker process per GPU (drop --one-process)"
            )
        if self.model not in ONE_PROCESS_MODELS:
            raise ValueError(
                f"one_process: built for {', '.join(sorted(ONE_PROCESS_MODELS))}, whose shared step trains one "
                f"part of the batch per replica; run {self.model} without --one-process (a process per GPU)"
            )
        if self.nodes != 1 or self.gpus_per_node < 2:
            raise ValueError(
                "one_process: it is for several GPUs of one machine: use --nodes 1 --gpus-per-node 2 or more "
                "(across machines every node runs its own workers)"
            )
        if not launchers.TRAITS[self.launcher].one_process:
            raise ValueError("one_process: one process on this machine runs with --launcher native")

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        known = catalog.models()
        if value not in known:
            raise ValueError(f"must be one of {', '.join(known)}")
        return value

    @field_validator("framework")
    @classmethod
    def _known_framework(cls, value: str) -> str:
        if value not in KNOWN_FRAMEWORKS:
            raise ValueError(f"unknown framework '{value}'; known frameworks are {', '.join(KNOWN_FRAMEWORKS)}")
        return value

    @field_validator("seed")
    @classmethod
    def _seed(cls, value: int) -> int:
        if not 0 <= value <= SEED_MAX:
            raise ValueError(
                f"must be a whole number from 0 to {SEED_MAX} (NumPy and every framework take "
                "seeds in that range): pass e.g. --seed 0"
            )
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not _DEVICE.match(value) or int(value.partition(":")[2] or 0) > MAX_CUDA_INDEX:
            raise ValueError(f"must be auto, cpu, cuda or cuda:N (N from 0 to {MAX_CUDA_INDEX})")
        return value

    @field_validator("data")
    @classmethod
    def _data(cls, value: str, info: ValidationInfo) -> str:
        if value == "synthetic" or (info.context or {}).get(RECORDED):
            return value
        try:
            exists = Path(value).exists()
        except OSError as exc:  # a name longer than the file system allows, a path it refuses
            raise ValueError(f"is neither 'synthetic' nor a path this machine can read ({exc.strerror})") from None
        if not exists:
            raise ValueError(f"is neither 'synthetic' nor an existing path ({value} does not exist)")
        return value

    @model_validator(mode="after")
    def _framework_of_model(self) -> RunSpec:
        model = catalog.get(self.model)
        if self.framework not in model.frameworks:
            raise ValueError(
                f"framework: model {self.model} has no '{self.framework}' implementation; "
                f"it has {', '.join(model.frameworks) or 'none'}"
            )
        if self.preset not in model.presets:
            raise ValueError(
                f"preset: model {self.model} has no '{self.preset}' preset; it has {', '.join(model.presets)}"
            )
        if self.compile_cache == "shared" and (self.graph != "compiled" or self.framework != "pytorch"):
            raise ValueError(
                "compile_cache: shared keeps PyTorch's inductor and Triton caches across runs, so it goes with "
                "--graph compiled on pytorch (XLA and MXNet compile in each process)"
            )
        if self.preset == "converge" and (self.framework != "pytorch" or self.world_size > 1):
            raise ValueError(
                "preset: converge (train to a quality target) runs on pytorch with one worker; "
                "use --framework pytorch --nodes 1 --gpus-per-node 1"
            )
        if self.variant is not None and self.variant not in model.variants:
            raise ValueError(
                f"variant: model {self.model} has no variant '{self.variant}'; "
                f"it has {', '.join(model.variants) or 'none'}"
            )
        return self

    def to_json(self) -> str:
        return json.dumps(self.model_dump(), indent=2)

    def recorded(self) -> RunSpec:
        """This spec as a run records it: with its workload's hyperparameters and files' hashes as they are now."""
        from tbdkit.spec import provenance

        model = catalog.get(self.model)
        return self.model_copy(update={"workload": provenance.record(model, model.hp(self.preset, self.variant))})


def build(**fields: Any) -> RunSpec:
    """Make a RunSpec, applying the preset's measurement defaults under explicit overrides."""
    preset = fields.get("preset", "smoke")
    explicit = fields.pop("measure", None) or {}
    if "max_warmup_s" in explicit:  # a cap the user gave is the cap: it stretches only where they say so too
        explicit = {"max_warmup_stretch": 1.0, **explicit}
    policy = {**PRESET_POLICY.get(preset, {}), **explicit}
    return parse({**fields, "measure": policy})


def parse(data: dict[str, Any], recorded: bool = False) -> RunSpec:
    """A validated RunSpec or one UserError; `recorded`: a spec a run wrote (its data path is not
    looked for here)."""
    try:
        return RunSpec.model_validate(data, context={RECORDED: recorded})
    except ValidationError as exc:
        raise UserError(describe_errors(exc)) from None


def load(path: Path) -> RunSpec:
    return parse(json.loads(Path(path).read_text()))


def describe_errors(exc: ValidationError) -> str:
    """One sentence per invalid field, naming it and what it allows (its bound's sentence, BOUNDS)."""
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        field = ".".join(loc)
        msg = err["msg"].removeprefix("Value error, ")
        bound = next((BOUNDS[p] for p in reversed(loc) if p in BOUNDS), None)
        if bound is not None and err["type"] in BOUND_ERRORS:
            msg = bound
        got = err.get("input")
        # the value, unless the message already quotes it (a path that does not exist says which)
        shown = (
            "" if isinstance(got, dict) or (isinstance(got, str) and got and got in msg) else f" (got {_shown(got)})"
        )
        parts.append(f"{field}: {msg}{shown}" if field else msg)
    return "Invalid run spec: " + "; ".join(parts) + "."


BOUND_ERRORS = frozenset(
    {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_long", "too_short", "finite_number"}
)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fits_here(spec: RunSpec) -> str | None:
    """Why `spec` cannot run on this machine as it is now (one sentence with the fix), or None: its
    workers against this machine's cores (on the CPU) or GPUs, its --cpus against the cores this
    process may use. Checked before a run starts, not in parse: a spec rendered for a cluster is valid."""
    from tbdkit.env import cpus
    from tbdkit.env.machine import gpu_count

    if launchers.TRAITS[spec.launcher].elsewhere:
        return None  # the scheduler places the job on machines it knows
    why = cpus.check_request(spec.cpus)
    if why:
        return why[0].upper() + why[1:]
    if spec.world_size == 1:
        return None
    where = f"{spec.nodes} node(s) x {spec.gpus_per_node} worker(s)"
    gpus = gpu_count() if spec.device != "cpu" else 0  # the launchers' rule: a worker per GPU where NVML sees GPUs
    if gpus and spec.world_size > gpus:
        return (
            f"{where} need {spec.world_size} GPUs and this machine has {gpus}: use fewer --nodes or "
            "--gpus-per-node, or --device cpu"
        )
    cores = cpus.available()
    most = WORKERS_PER_CORE * cores
    if not gpus and spec.processes > most:
        return (
            f"{where} are {spec.processes} worker processes on the CPU and this machine gives this process "
            f"{cores} core(s): at most {most} ({WORKERS_PER_CORE} per core); use fewer --nodes or --gpus-per-node"
        )
    return None
