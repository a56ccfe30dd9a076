"""PyTorch's half of the analyses, taken in extra iterations after the sample window so they
never slow what is timed: the memory breakdown (parameters, gradients, tensors saved for
backward, optimizer state, the caching allocator's peak), model FLOPs (torch.utils.flop_counter)
and the CUDA kernel timeline (torch.profiler)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from tbdkit.analysis.memory import entry
from tbdkit.analysis.trace import ANCHOR_EVENT


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        storage = t.untyped_storage()
    except Exception:  # tensors without storage (sparse, functional wrappers)
        return None
    return storage.data_ptr(), storage.nbytes()


def tensor_bytes(tensors: Iterator[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one storage count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        key = _storage_key(t)
        if key is not None and key[0] != 0:
            seen[key[0]] = max(seen.get(key[0], 0), key[1])
    return sum(seen.values())


class _Saved:
    """What autograd keeps in a saved slot while the hooks are on: the tensor, and a release
    callback run when autograd drops the slot (after backward, or when the graph is freed)."""

    __slots__ = ("tensor", "_release")

    def __init__(self, tensor: torch.Tensor, release: Callable[[], None] | None) -> None:
        self.tensor = tensor
        self._release = release

    def __del__(self) -> None:
        if self._release is not None:
            self._release()


class SavedTensors:
    """Bytes of the activations autograd keeps for backward (the paper's feature maps), as the
    maximum held at once during one step: every tensor packed by
    torch.autograd.graph.saved_tensors_hooks is counted from when it is saved until autograd
    releases its slot (backward frees it, or its graph dies), by distinct storage (views of one
    storage, and one tensor saved by several ops, count once), parameters excluded (they are
    weights). A multi-pass step (several critic iterations, a double backward) counts what is
    alive together, never the sum over passes."""

    def __init__(self, parameters: list[torch.Tensor]) -> None:
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in parameters}
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, saved slots holding it]
        self.current = 0
        self.peak = 0
        self.session = 0

    def _pack(self, t: torch.Tensor) -> _Saved:
        key = _storage_key(t)
        if key is None or key[0] == 0 or key[0] in self.param_ptrs:
            return _Saved(t.detach(), None)
        ptr, nbytes = key
        held = self.live.get(ptr)
        if held is None:
            self.live[ptr] = [nbytes, 1]
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        else:
            held[1] += 1
        # the slot holds the tensor's data (detached: holding `t` itself would make a reference cycle
        # through its grad_fn), so its storage and address live at least as long as the slot
        session = self.session
        return _Saved(t.detach(), lambda: self._release(ptr, session))

    def _release(self, ptr: int, session: int) -> None:
        held = self.live.get(ptr)
        if held is None or session != self.session:  # a slot saved under an earlier hooks() session
            return
        held[1] -= 1
        if held[1] == 0:
            self.current -= held[0]
            del self.live[ptr]

    @staticmethod
    def _unpack(saved: _Saved) -> torch.Tensor:
        return saved.tensor

    @contextlib.contextmanager
    def hooks(self) -> Iterator[SavedTensors]:
        self.live.clear()
        self.current = self.peak = 0
        self.session += 1
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield self


# Functions of PyTorch's C++ source that allocate a cuDNN or cuBLAS workspace through the caching
# allocator (aten/src/ATen/native/cudnn/Conv_v8.cpp: run_conv_plan, run_conv_plan_fused,
# generate_and_filter_plans; aten/src/ATen/cuda/CublasHandlePool.cpp: getNewWorkspace and the
# cuBLASLt workspace). cuDNN RNNs allocate theirs with at::empty inside _cudnn_rnn, beside the
# op's outputs: they cannot be told apart by stack and stay in 'unattributed'.
WORKSPACE_FRAMES = ("run_conv_plan", "generate_and_filter_plans", "getNewWorkspace", "getCUDABlasLtWorkspace")
WORKSPACE_METHOD = (
    "max bytes of cuDNN/cuBLAS workspace allocations live at once over one step, from the CUDA "
    "caching allocator's history (torch.cuda.memory._record_memory_history, C++ stacks): "
    "allocations made under " + ", ".join(WORKSPACE_FRAMES) + " (cuBLAS workspaces are "
    "released before the step so they are allocated inside it; cuDNN RNN workspaces are "
    "not separable and stay in 'unattributed')"
)


# torch symbolizes the allocator history's C++ frames when the snapshot is taken, in the mode TORCH_SYMBOLIZE_MODE
# names (read once per process): `addr2line` (torch 2.14's default) starts addr2line over each library, and on a
# GPU's libtorch_cuda.so a step's thousands of frames can take minutes; `fast` is torch's in-process DWARF
# reader (its newest source makes it the default); `dladdr` names only exported functions, leaving PyTorch's
# internal ones unnamed (what each took here: docs/measured-here.md, "Single runs").
SYMBOLIZE_ENV = "TORCH_SYMBOLIZE_MODE"
SYMBOLIZE_DEFAULT = "fast"
UNNAMED = (None, "", "??")


def symbolize_mode() -> str:
    """The mode torch symbolizes C++ frames in: the user's TORCH_SYMBOLIZE_MODE, else `fast`, set before the
    first symbolization of this process (torch reads it once)."""
    return os.environ.setdefault(SYMBOLIZE_ENV, SYMBOLIZE_DEFAULT)


def is_workspace(frames: list[dict[str, Any]]) -> bool:
    """Whether an allocation's stack passes through one of PyTorch's workspace allocation sites."""
    return any(site in str(f.get("name", "")) for f in frames for site in WORKSPACE_FRAMES)


def workspace_peak(trace: list[dict[str, Any]]) -> int:
    """Max bytes of workspace allocations live at once in an allocator history (one device's
    TraceEntry list of torch.cuda.memory._snapshot()['device_traces']): counted from 'alloc' to
    'free_requested' (its user released it)."""
    live: dict[Any, int] = {}  # by address, as the trace gives it
    current = peak = 0
    for e in trace:
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc" and is_workspace(e.get("frames") or []):
            live[addr] = int(e["size"])
            current += live[addr]
            peak = max(peak, current)
        elif action == "free_requested" and addr in live:
            current -= live.pop(addr)
    return peak


def workspace_entry(trace: list[dict[str, Any]], mode: str, seconds: float | None) -> dict[str, Any]:
    """memory.json's workspace from one step's allocator history: its peak, or null with the reason when
    the history cannot tell workspaces apart (no allocation, or frames without names: never a silent 0)."""
    allocs = [e for e in trace if e.get("action") == "alloc"]
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    if not allocs:
        return entry(None, WORKSPACE_METHOD, "the allocator's history of the step holds no allocation")
    if all(f.get("name") in UNNAMED for e in allocs for f in e.get("frames") or []):
        return entry(
            None,
            WORKSPACE_METHOD,
            f"the allocator's history carries no C++ frame names (torch's symbolizer, {SYMBOLIZE_ENV}={mode}, "
            f"named none of its frames{took}), so workspace allocations cannot be told apart from the others; "
            f"{SYMBOLIZE_ENV}=addr2line (slower) may name them",
        )
    return entry(workspace_peak(trace), f"{WORKSPACE_METHOD}; frames symbolized by torch's {mode} mode{took}")


@contextlib.contextmanager
def allocator_history(device: torch.device) -> Iterator[dict[str, Any]]:
    """Record the CUDA caching allocator's history (with C++ stacks) around the block; on exit the
    dict holds 'trace', this device's TraceEntry list, and how its frames were symbolized ('mode',
    'symbolize_s': the snapshot's time, which is the symbolizer's). cuBLAS workspaces are released
    first, so the step allocates them again inside the record."""
    out: dict[str, Any] = {"mode": symbolize_mode()}
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="all")
    try:
        yield out
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        snapshot = torch.cuda.memory._snapshot()  # every device's history; ours is picked below
        out["symbolize_s"] = time.perf_counter() - start
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    index = device.index if device.index is not None else torch.cuda.current_device()
    traces = snapshot.get("device_traces") or []
    out["trace"] = traces[index] if index < len(traces) else []


def optimizers_of(training: Any) -> list[torch.optim.Optimizer]:
    """The optimizers a workload's training state holds (WGAN-GP has one per network)."""
    values = vars(training).values() if hasattr(training, "__dict__") else ()
    return list({id(v): v for v in values if isinstance(v, torch.optim.Optimizer)}.values())


def memory_breakdown(training: Any, device: torch.device, step: Callable[[], Any]) -> dict[str, Any]:
    """Run `step` (one training iteration) with the probes on; return the categories and peak."""
    model, optimizers = training.model, optimizers_of(training)
    params = [p for p in model.parameters()]
    saved = SavedTensors(params)
    cuda = device.type == "cuda"
    history: contextlib.AbstractContextManager[dict[str, Any]] = (
        allocator_history(device) if cuda else contextlib.nullcontext({})
    )
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    with history as allocations, saved.hooks():
        step()
    if cuda:
        torch.cuda.synchronize(device)
    grads = tensor_bytes(p.grad for p in params if p.grad is not None)
    where = "CUDA" if cuda else "CPU"
    cats = {
        "weights": entry(tensor_bytes(iter(params)), "bytes of the model's parameters (distinct storages)"),
        "weight_gradients": entry(grads, "bytes of the parameters' .grad tensors after one training step"),
        "feature_maps": entry(
            saved.peak,
            "max bytes of tensors held for backward at once over one step: "
            "torch.autograd.graph.saved_tensors_hooks count each from when it is saved until "
            "autograd releases it (distinct storages, parameters excluded)",
        ),
        "dynamic": entry(
            tensor_bytes(
                v for o in optimizers for s in o.state.values() for v in s.values() if isinstance(v, torch.Tensor)
            )
            if optimizers
            else None,
            "bytes of the optimizers' state tensors (e.g. momentum, Adam's moments) after one step",
            None if optimizers else "the workload exposes no optimizer",
        ),
    }
    if cuda:
        cats["workspace"] = workspace_entry(allocations["trace"], allocations["mode"], allocations.get("symbolize_s"))
        peak = entry(
            torch.cuda.max_memory_allocated(device),
            "torch.cuda.max_memory_allocated over one training step after the sample window "
            "(peak stats reset before it)",
        )
    else:
        cats["workspace"] = entry(
            None, "cuDNN/cuBLAS workspaces", f"the run is on the {where}: no GPU library workspaces"
        )
        peak = entry(
            None,
            "torch.cuda.max_memory_allocated",
            "the run is on the CPU: there is no CUDA caching allocator whose peak the categories "
            "could be checked against (the process's peak RSS is in summary.json)",
        )
    return {"categories": cats, "peak": peak}


class _GlobalOnly:
    """Stands in for FlopCounterMode's ModuleTracker: every count goes to 'Global' (the only total
    the kit reads), and no hook is put on the modules' inputs."""

    parents = frozenset({"Global"})

    def __enter__(self) -> _GlobalOnly:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def attention_formulas() -> dict[Any, Any]:
    """Model FLOPs of scaled dot-product attention, as PaLM's MFU counts them (Chowdhery et al. 2022, appendix
    B: 12 L H Q T per token for a training step): Q K^T and the weighted sum of V, 2 FLOPs per multiply-add,
    counted whole (a causal mask's skipped half included), the backward pass twice the forward (the gradients
    of Q, K, V and the scores). torch.utils.flop_counter counts the fused kernels' backward as 2.5 x the forward
    (the recomputed scores too: hardware FLOPs, not the model's) and has no formula for the CPU's fused kernel
    (a CPU step's attention counted 0 FLOPs); these formulas replace and complete its own."""
    from torch.utils import flop_counter

    def forward(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return int(flop_counter.sdpa_flop_count(query, key, value))

    def backward(grad: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return 2 * int(flop_counter.sdpa_flop_count(query, key, value))

    aten = torch.ops.aten
    kernels = (
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    formulas: dict[Any, Any] = {}
    for name in kernels:
        for op, formula in ((name, forward), (f"{name}_backward", backward)):
            if hasattr(aten, op):
                formulas[getattr(aten, op)] = formula
    return formulas


LENGTHS = ("input_lengths", "target_lengths")  # ctc_loss's arguments 2 and 3, by name


class _LengthsAsLists(TorchFunctionMode):
    """Hands CTC loss its lengths as lists of ints, the path a step takes outside any mode. Without a
    mode, ctc_loss reads CPU length tensors into lists before it dispatches; under one (FlopCounterMode)
    it keeps them as tensors: the `Tensor` overloads' CUDA kernels refuse lengths on another device
    than the log-probs, and the mean reduction divides the GPU losses by the CPU target lengths (both
    failed Deep Speech 2's FLOP count on a GPU). A function mode sees the call before it decomposes;
    the values computed are the same, and CTC has no FLOP formula, so the count is unchanged."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.ctc_loss or func is torch.ctc_loss:  # only these: every other call as it is
            args = [a.tolist() if i in (2, 3) and isinstance(a, torch.Tensor) else a for i, a in enumerate(args)]
            kwargs = {k: v.tolist() if k in LENGTHS and isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return func(*args, **kwargs)


def count_flops(device: torch.device, step: Callable[[], Any], model: torch.nn.Module | None = None) -> int:
    """FLOPs of one training step (forward, backward, and any double backward) by
    torch.utils.flop_counter. Its module tracker, which attributes FLOPs to modules, is left out:
    the tracker hooks each module's inputs with register_multi_grad_hook, which fails under
    torch.autograd.grad of a leaf (pytorch/pytorch#131753: WGAN-GP's gradient penalty), and only the
    total is read. On CUDA, for a model with recurrent layers, cuDNN is off for this step so they
    run as counted matmuls instead of one opaque cuDNN RNN call the counter cannot see. Fused
    attention kernels are counted as PaLM's MFU counts attention, on every device (attention_formulas). CTC
    loss gets its lengths as lists inside the counter (_LengthsAsLists)."""
    from torch.utils.flop_counter import FlopCounterMode

    recurrent = model is None or any(isinstance(m, torch.nn.RNNBase) for m in model.modules())
    counter = FlopCounterMode(display=False, custom_mapping=attention_formulas())
    counter.mod_tracker = _GlobalOnly()  # type: ignore[assignment]
    flags = (
        torch.backends.cudnn.flags(enabled=False) if device.type == "cuda" and recurrent else contextlib.nullcontext()
    )
    with flags, counter, _LengthsAsLists():
        step()
    return int(counter.get_total_flops())


@contextlib.contextmanager
def chrome_trace(activities: list[Any], sync: Callable[[], None]) -> Iterator[dict[str, Any]]:
    """Profile the block with torch.profiler; on exit the dict holds the profiler's Chrome trace
    ('chrome_trace') and the clock anchor: a user annotation (ANCHOR_EVENT) recorded first inside the
    profile, between two time.perf_counter() reads ('anchor_perf_s' is their midpoint,
    'anchor_uncertainty_s' half their distance), which puts the profiler's events on the loop's clock."""
    import json
    import tempfile
    import time

    from torch.profiler import profile, record_function

    out: dict[str, Any] = {}
    sync()
    with profile(activities=activities) as prof:
        before = time.perf_counter()
        with record_function(ANCHOR_EVENT):
            pass
        after = time.perf_counter()
        yield out
        sync()
    out["anchor_perf_s"], out["anchor_uncertainty_s"] = (before + after) / 2, (after - before) / 2
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/trace.json"
        prof.export_chrome_trace(path)
        with open(path) as f:
            out["chrome_trace"] = json.load(f)


@contextlib.contextmanager
def kernel_trace(device: torch.device) -> Iterator[dict[str, Any]]:
    """Record CUDA kernels with torch.profiler; on exit the dict holds 'kernels' and 'elapsed_us',
    read from the profiler's Chrome trace (tbdkit.analysis.timeline.from_chrome_trace), and the
    trace itself with its clock anchor (chrome_trace)."""
    from torch.profiler import ProfilerActivity

    from tbdkit.analysis.timeline import chrome_events, from_chrome_trace

    with chrome_trace([ProfilerActivity.CPU, ProfilerActivity.CUDA], lambda: torch.cuda.synchronize(device)) as out:
        yield out
    doc = out["chrome_trace"]
    events = chrome_events(doc)
    # the anchor is the kit's, not the step's: it stays out of the traced span
    out["kernels"], out["elapsed_us"] = from_chrome_trace([e for e in events if e.get("name") != ANCHOR_EVENT])
