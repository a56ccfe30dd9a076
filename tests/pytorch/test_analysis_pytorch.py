"""PyTorch's analysis probes on a network small enough to count by hand (CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

import torch

from tbdkit.adapters.pytorch_profiling import SavedTensors, count_flops, memory_breakdown, tensor_bytes
from tbdkit.analysis.memory import breakdown


def tiny() -> SimpleNamespace:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return SimpleNamespace(model=model, optimizer=optimizer)


def step_of(training: SimpleNamespace, batch: int = 2):
    def step() -> None:
        training.optimizer.zero_grad(set_to_none=True)
        loss = training.model(torch.randn(batch, 4)).square().sum()
        loss.backward()
        training.optimizer.step()
    return step


def test_tensor_bytes_counts_a_storage_once() -> None:
    t = torch.zeros(10)
    assert tensor_bytes(iter([t, t[2:5], t.view(2, 5)])) == 40
    assert tensor_bytes(iter([t, torch.zeros(3, dtype=torch.float64)])) == 64


def test_breakdown_of_a_two_layer_network_by_hand() -> None:
    training = tiny()
    got = memory_breakdown(training, torch.device("cpu"), step_of(training))
    cats = got["categories"]
    params = (4 * 3 + 3 + 3 * 2 + 2) * 4
    assert cats["weights"]["bytes"] == params
    assert cats["weight_gradients"]["bytes"] == params
    assert cats["dynamic"]["bytes"] == params      # one momentum buffer per parameter
    # saved for backward: input of layer 1 (2x4), ReLU output (2x3, reused as layer 2's input),
    # layer 2's output for square (2x2); weights excluded: 32 + 24 + 16 bytes
    assert cats["feature_maps"]["bytes"] == 72
    assert cats["workspace"]["bytes"] is None and "CPU" in cats["workspace"]["reason"]
    assert got["peak"]["bytes"] is None
    doc = breakdown("cpu", cats, got["peak"])
    assert doc["unattributed"]["bytes"] is None


def test_feature_maps_grow_with_the_batch() -> None:
    training = tiny()
    small = memory_breakdown(training, torch.device("cpu"), step_of(training, 2))["categories"]["feature_maps"]["bytes"]
    large = memory_breakdown(training, torch.device("cpu"), step_of(training, 8))["categories"]["feature_maps"]["bytes"]
    assert large == 4 * small


def test_saved_tensor_hooks_leave_autograd_results_unchanged() -> None:
    torch.manual_seed(1)
    x = torch.randn(3, 4, requires_grad=True)
    (x.sin() * x).sum().backward()
    plain = x.grad.clone()
    x.grad = None
    with SavedTensors([]).hooks() as saved:
        (x.sin() * x).sum().backward()
    assert torch.equal(plain, x.grad) and saved.peak > 0


def test_flops_of_one_training_step() -> None:
    training = tiny()
    # forward 2*B*(4*3 + 3*2); backward: weight grads of both layers, input grad of layer 2 only
    b = 2
    forward = 2 * b * (4 * 3 + 3 * 2)
    backward = 2 * b * (4 * 3 + 3 * 2) + 2 * b * 3 * 2
    assert count_flops(torch.device("cpu"), step_of(training, b)) == forward + backward


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_flop_counter_hands_ctc_loss_its_lengths_as_lists_with_the_same_loss_and_gradient(reduction) -> None:
    """Under a dispatch mode (FlopCounterMode), ctc_loss keeps its CPU length tensors as tensors: the
    Tensor overloads' CUDA kernels refuse them, and the mean reduction divides GPU losses by them (Deep
    Speech 2's FLOP count failed on a GPU both ways). The counter's step must take the path a step takes
    with its lengths as lists (outside any mode), op for op, and compute the same loss and gradient."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    weight = torch.randn(12, 6)
    lengths, label_lengths = torch.tensor([50, 41, 30]), torch.tensor([10, 7, 5])
    labels = torch.randint(1, 6, (3, 10))
    features = torch.randn(50, 3, 12)
    got: list[tuple[torch.Tensor, torch.Tensor]] = []

    def step(il: object = lengths, tl: object = label_lengths) -> None:
        w = weight.clone().requires_grad_()
        loss = torch.nn.CTCLoss(reduction=reduction)((features @ w).log_softmax(-1), labels, il, tl)
        loss.backward()
        got.append((loss.detach(), w.grad))

    with Seen():
        step(lengths.tolist(), label_lengths.tolist())
    as_lists, seen[:] = list(seen), []
    with Seen():
        flops = count_flops(torch.device("cpu"), step)
    assert "aten._ctc_loss.default" in seen and "aten._ctc_loss_backward.default" in seen
    assert seen == as_lists
    assert flops == 2 * 50 * 3 * 12 * 6 * 2  # the projection forward and its weight gradient; CTC counts 0
    assert torch.equal(got[0][0], got[1][0]) and torch.equal(got[0][1], got[1][1])


def test_resnet50_training_flops_match_the_published_count() -> None:
    """ResNet-50 is 4.089 GMACs per 224x224 image forward (fc 2.048 M of them); at 64x64 every
    conv map shrinks by exactly (2/7)^2. A training step is about 3x the forward pass (backward:
    input and weight gradients), less conv1's input gradient, which autograd skips."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batch = 2

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(torch.randn(batch, 3, 64, 64)), torch.zeros(batch, dtype=torch.long)).backward()
        optimizer.step()

    forward_macs = (4.089e9 - 2.048e6) * (2 / 7) ** 2 + 2.048e6
    conv1_macs = 64 * 3 * 7 * 7 * 32 * 32
    expected = 2 * batch * (3 * forward_macs - conv1_macs)
    assert count_flops(torch.device("cpu"), step) == pytest.approx(expected, rel=0.01)


def test_this_torch_profilers_chrome_trace_has_the_layout_the_timeline_reads(tmp_path) -> None:
    """A CPU-only trace from this PyTorch: complete events with ts/dur in microseconds (what
    from_chrome_trace reads); no 'kernel' events without a GPU."""
    import json

    from torch.profiler import ProfilerActivity, profile

    from tbdkit.analysis.timeline import from_chrome_trace

    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            x = (x @ x).tanh()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    assert any(e["name"] == "aten::mm" for e in ops)
    kernels, elapsed = from_chrome_trace(doc)
    assert kernels == [] and 0 < elapsed < 60e6


def wgan_gp(batch: int, n_critic: int = 2, gp_weight: float = 10.0):
    """A WGAN-GP step as the workload runs it, on networks small enough to count by hand: n_critic
    critic iterations (real, fake and interpolate through the critic, the gradient penalty by a
    double backward), then one generator iteration. The real batches are prefetched, as a data
    loader holds them, so each critic iteration saves tensors at new addresses."""
    torch.manual_seed(0)
    gen = torch.nn.Linear(2, 4, bias=False)
    critic = torch.nn.Sequential(torch.nn.Linear(4, 8, bias=False), torch.nn.ReLU(), torch.nn.Linear(8, 1, bias=False))
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.0, 0.9))
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.0, 0.9))
    reals = [torch.randn(batch, 4) for _ in range(n_critic)]

    def step() -> None:
        for real in reals:
            opt_c.zero_grad(set_to_none=True)
            with torch.no_grad():
                fake = gen(torch.randn(batch, 2))
            eps = torch.rand(batch, 1)
            mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
            d_mixed = critic(mixed)
            grad, = torch.autograd.grad(d_mixed, mixed, torch.ones_like(d_mixed), create_graph=True)
            penalty = gp_weight * ((grad.norm(2, dim=1) - 1) ** 2).mean()
            loss = critic(fake).mean() - critic(real).mean() + penalty
            loss.backward()
            opt_c.step()
        opt_g.zero_grad(set_to_none=True)
        (-critic(gen(torch.randn(batch, 2))).mean()).backward()
        opt_g.step()

    return SimpleNamespace(model=torch.nn.ModuleList([gen, critic]), g_optimizer=opt_g, c_optimizer=opt_c), step


def test_feature_maps_of_a_wgan_gp_step_are_the_most_held_at_once() -> None:
    """Hand count (float32, N = batch; critic weights excluded). One critic iteration holds, until its
    backward: for each of D(real), D(fake), D(mixed) the critic's input (N x 4: 16N bytes) and its ReLU
    output (N x 8, saved by ReLU and by the second layer: 32N once) = 3 x 48N; the double backward's
    graph: grad_outputs ones (N x 1, saved by the second layer's input-gradient mm: 4N), the gradient
    into the ReLU (N x 8, saved by the first layer's input-gradient mm: 32N); the penalty: the
    gradient (N x 4) and its norm (N) saved by vector_norm (16N + 4N), norm - 1 (N) saved by pow (4N).
    Total 144N + 60N = 204N. The backward frees all of it before the next critic iteration; the
    generator iteration holds less (z: 8N, fake 16N, ReLU output 32N = 56N). So the peak is 204N, not
    the sum over the iterations (which counting every address ever saved gives)."""
    for batch in (3, 5):
        training, step = wgan_gp(batch)
        cats = memory_breakdown(training, torch.device("cpu"), step)["categories"]
        assert cats["feature_maps"]["bytes"] == 204 * batch, cats["feature_maps"]
        # both networks' Adam state: two moments per weight (2 x 4 + 4 x 8 + 8 x 1 floats) and a
        # float step counter per weight tensor (3)
        assert cats["dynamic"]["bytes"] == 2 * (8 + 32 + 8) * 4 + 3 * 4


def test_saved_slots_are_released_by_backward() -> None:
    torch.manual_seed(2)
    layer = torch.nn.Linear(4, 4)
    saved = SavedTensors(list(layer.parameters()))
    with saved.hooks():
        for _ in range(3):
            layer(torch.randn(2, 4)).relu().sum().backward()
            assert saved.current == 0 and not saved.live
    assert saved.peak == (2 * 4 + 2 * 4) * 4  # the input and the ReLU output of one pass


def test_workspace_is_the_most_library_workspace_live_at_once() -> None:
    """A constructed allocator history (the layout of torch.cuda.memory._snapshot()['device_traces'][i],
    not recorded on a GPU): two cuDNN convolution workspaces (run_conv_plan) freed in turn, a cuBLAS
    workspace kept, and an activation allocated by a convolution op (not a workspace)."""
    from tbdkit.adapters.pytorch_profiling import workspace_peak

    conv = [{"name": "at::native::run_conv_plan(cudnnContext*, at::Tensor const&, at::Tensor const&, "
                     "at::Tensor const&, cudnn_frontend::ExecutionPlan const&)", "filename": "Conv_v8.cpp", "line": 1},
            {"name": "at::native::cudnn_convolution_forward_out", "filename": "Conv.cpp", "line": 2}]
    cublas = [{"name": "at::cuda::getNewWorkspace()", "filename": "CublasHandlePool.cpp", "line": 3}]
    output = [{"name": "at::empty_cuda", "filename": "EmptyTensor.cpp", "line": 4},
              {"name": "at::native::cudnn_convolution", "filename": "Conv.cpp", "line": 5}]
    trace = [
        {"action": "segment_alloc", "addr": 0, "size": 1 << 21, "frames": conv},
        {"action": "alloc", "addr": 100, "size": 4096, "frames": output},
        {"action": "alloc", "addr": 200, "size": 1000, "frames": conv},
        {"action": "alloc", "addr": 300, "size": 512, "frames": cublas},
        {"action": "free_requested", "addr": 200, "size": 1000, "frames": []},
        {"action": "free_completed", "addr": 200, "size": 1000, "frames": []},
        {"action": "alloc", "addr": 400, "size": 2000, "frames": conv},
        {"action": "free_requested", "addr": 400, "size": 2000, "frames": []},
        {"action": "free_requested", "addr": 100, "size": 4096, "frames": []},
    ]
    assert workspace_peak(trace) == 2000 + 512
    assert workspace_peak([e for e in trace if e["frames"] is not conv]) == 512
    assert workspace_peak([]) == 0


def test_workspace_is_null_with_the_reason_when_the_frames_carry_no_names() -> None:
    """A symbolizer that names no frame (a stripped build, or dladdr on internal functions) leaves no way to
    tell workspaces apart: memory.json's workspace is null with the reason, never a silent 0."""
    from tbdkit.adapters.pytorch_profiling import workspace_entry

    unnamed = [{"name": "??", "filename": "", "line": 0}, {"name": None, "filename": "", "line": 0}]
    trace = [{"action": "alloc", "addr": 1, "size": 4096, "frames": unnamed},
             {"action": "free_requested", "addr": 1, "size": 4096, "frames": []}]
    got = workspace_entry(trace, "dladdr", 0.4)
    assert got["bytes"] is None and "no C++ frame names" in got["reason"] and "TORCH_SYMBOLIZE_MODE=dladdr" in got["reason"]
    assert workspace_entry([], "fast", None)["reason"] == "the allocator's history of the step holds no allocation"
    named = [{"name": "at::cuda::getNewWorkspace()", "filename": "CublasHandlePool.cpp", "line": 3}]
    ok = workspace_entry([{"action": "alloc", "addr": 2, "size": 512, "frames": named}], "fast", 0.25)
    assert ok["bytes"] == 512 and ok["reason"] is None and "torch's fast mode in 0.2 s" in ok["method"]
    # a step that allocated only activations: a measured 0, with names to prove it
    other = [{"name": "at::empty_cuda", "filename": "EmptyTensor.cpp", "line": 4}]
    assert workspace_entry([{"action": "alloc", "addr": 3, "size": 64, "frames": other}], "fast", 0.1)["bytes"] == 0


SYMBOLIZE = """
import json, os, sys, time
from tbdkit.adapters.pytorch_profiling import symbolize_mode
mode = symbolize_mode()
from torch._C._profiler import gather_traceback, symbolize_tracebacks
tbs = [gather_traceback(python=False, script=False, cpp=True) for _ in range(2)]
t = time.perf_counter(); frames = [f for tb in symbolize_tracebacks(tbs) for f in tb]
print(json.dumps({"mode": mode, "env": os.environ.get("TORCH_SYMBOLIZE_MODE"), "s": time.perf_counter() - t,
                  "frames": len(frames), "named": sum(1 for f in frames if f.get("name") not in (None, "", "??"))}))
"""


@pytest.mark.parametrize("chosen", [None, "dladdr"])
def test_the_symbolizer_runs_in_fast_mode_unless_the_user_chose_one(chosen) -> None:
    """torch reads TORCH_SYMBOLIZE_MODE once per process: the kit sets `fast` before the first symbolization
    (torch 2.14's default is addr2line, a process per library), and a user's choice stands. Through the real
    unwinder and symbolizer on this CPU (the allocator history's frames go through the same ones on a GPU)."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_SYMBOLIZE_MODE"}
    if chosen:
        env["TORCH_SYMBOLIZE_MODE"] = chosen
    proc = subprocess.run([sys.executable, "-c", SYMBOLIZE], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["mode"] == got["env"] == (chosen or "fast")
    if chosen is None:  # fast mode names the frames of PyTorch's own functions
        assert got["frames"] > 10 and got["named"] >= 0.8 * got["frames"], got


def test_the_pytorch_adapter_has_the_core_and_its_capabilities() -> None:
    from model_checks import assert_capabilities

    assert_capabilities("pytorch", {"distributed", "flop_count", "graph_compile", "inference", "kernel_trace", "memory_breakdown", "peak_reset", "profiler_range"})
