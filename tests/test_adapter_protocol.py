"""The adapter protocol: the core every adapter implements, the optional capabilities checked once
by `capabilities()` (the agent asks the result, not the adapter's attributes)."""

from __future__ import annotations

import contextlib
import sys
import types

import pytest

from tbdkit import adapters


class Core:
    framework = "stand-in"
    device_label = "cpu"
    cuda_index = None

    def prepare(self, batch): return batch
    def step(self, inputs): return 1.0
    def loss_value(self, loss): return float(loss)
    def environment(self): return {}
    def model_info(self): return {}
    def memory(self): return {}
    def is_oom(self, exc): return False


class Traced(Core):
    def reset_peaks(self) -> None: ...
    def count_flops(self, step) -> int: return 1

    @contextlib.contextmanager
    def kernel_trace(self):
        yield {}


def test_a_core_adapter_has_no_optional_capability() -> None:
    caps = adapters.capabilities(Core())
    assert isinstance(Core(), adapters.Adapter)
    assert all(getattr(caps, f) is None for f in caps.__dataclass_fields__)


def test_capabilities_name_what_the_adapter_implements() -> None:
    a = Traced()
    caps = adapters.capabilities(a)
    assert caps.peak_reset is a and caps.flop_count is a and caps.kernel_trace is a
    assert caps.memory_breakdown is None and caps.distributed is None and caps.profiler_range is None


def test_load_refuses_a_module_whose_adapter_lacks_the_core(monkeypatch) -> None:
    module = types.ModuleType("tbdkit.adapters.standin")
    module.make = lambda **kw: types.SimpleNamespace(framework="standin", device_label="cpu")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tbdkit.adapters.standin", module)
    with pytest.raises(TypeError, match="lacks .*cuda_index.*prepare"):
        adapters.load("standin")
    module.make = lambda **kw: Core()  # type: ignore[attr-defined]
    assert isinstance(adapters.load("standin"), Core)


def test_one_process_replicas_are_a_capability() -> None:
    """The agent asks `caps.replicas` how one process's replicas exchange gradients, not the adapter."""

    class Mirrored(Core):
        backend = "MirroredStrategy/RING"
        comm_reason = "inside the compiled step"
        replica_devices = ["/CPU:0", "/CPU:1"]

    class Worker(Core):  # a data-parallel worker's adapter: a backend and a reason, no replicas in its process
        backend = "gloo"
        comm_reason = "FSDP2's collectives run inside its hooks"

    a = Mirrored()
    assert adapters.capabilities(a).replicas is a and adapters.capabilities(Core()).replicas is None
    assert adapters.capabilities(Worker()).replicas is None
