"""Energy over the sample window, through Zeus (the ml.energy project's `zeus` package, ZeusMonitor).

ZeusMonitor.begin_window at the window's start and end_window at its end read, for the run's GPU,
NVML's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, Volta and newer; on older GPUs Zeus
integrates nvmlDeviceGetPowerUsage samples in a helper process), and for every CPU package RAPL's
package and DRAM counters (/sys/class/powercap/intel-rapl, wraparounds tracked by Zeus). The adapter
already waits for the device at each step's end, so the windows are opened without Zeus's own
synchronization (which knows only torch, JAX and CuPy). Why Zeus and what it reads: docs/energy-and-cost.md.

Every counter that is missing or unreadable (Zeus not installed in the stack, no RAPL in a VM, no
permission, an old GPU without power readings, a MIG slice) gives null with that reason, never 0; a
counter that did not move over the window is null too (a window shorter than its update period).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from tbdkit.core.metric import metric, missing

log = logging.getLogger("tbdkit.agent.energy")

ZEUS_MISSING = (
    "zeus not installed in this stack (one of the stack's dependencies in pyproject.toml): for a stack installed "
    "from its lock, `tbdkit setup STACK --force`; for an adopted stack, adopt again with a zeus wheel in the "
    "wheels folder (`tbdkit setup STACK --adopt PYTHON --wheels DIR --force`; zeus's own dependencies may stay "
    "missing when its import works)"
)
CPU_RUN = "the run is on the CPU: there is no GPU to measure"
GPU_METHOD = (
    "Zeus ZeusMonitor over the sample window: NVML nvmlDeviceGetTotalEnergyConsumption at the window's "
    "end minus at its start (the whole board, all processes on the GPU)"
)
GPU_POLLED_METHOD = (
    "Zeus ZeusMonitor over the sample window: nvmlDeviceGetPowerUsage samples integrated by Zeus's "
    "PowerMonitor (a GPU older than Volta has no energy counter)"
)
CPU_METHOD = (
    "Zeus ZeusMonitor over the sample window: RAPL package counters (intel-rapl:N energy_uj), end minus "
    "start, summed over packages (every process on the sockets)"
)
DRAM_METHOD = "Zeus ZeusMonitor over the sample window: RAPL DRAM sub-zones (intel-rapl:N:M named dram), summed"
POWER_METHOD = "window energy / the window's wall time (Zeus's own clock at begin_window and end_window)"


def rapl_reason(roots: tuple[str, ...] | None = None) -> str | None:
    """Why this machine's RAPL counters cannot be read, or None when a package counter is readable.
    `roots`: the folders Zeus looks in (its RAPL_DIR, then the one it expects mounted in a container)."""
    if roots is None:
        from zeus.device.cpu import rapl

        roots = (rapl.RAPL_DIR, rapl.CONTAINER_RAPL_DIR)
    root = next((r for r in roots if os.path.isdir(r)), None)
    if root is None:
        return (
            f"RAPL is not exposed on this machine ({roots[0]} is absent: a virtual machine, or a CPU "
            "without RAPL): CPU and DRAM energy cannot be read"
        )
    zones = sorted(e for e in os.listdir(root) if e.startswith("intel-rapl:") and e.count(":") == 1)
    if not zones:
        return f"RAPL has no package zone under {root}: CPU and DRAM energy cannot be read"
    try:
        with open(os.path.join(root, zones[0], "energy_uj")) as fh:
            fh.read()
    except PermissionError:
        return (
            f"RAPL's counters under {root} are readable only by root (energy_uj is mode 0400 since "
            "Linux 5.10): run as root, or grant read access to intel-rapl:*/energy_uj"
        )
    except OSError as exc:
        return f"RAPL's counter {root}/{zones[0]}/energy_uj cannot be read ({exc.strerror or exc})"
    return None


def _none(reason: str) -> dict[str, dict[str, Any]]:
    return {
        "gpu_energy": missing("J", GPU_METHOD, reason),
        "gpu_power": missing("W", POWER_METHOD, reason),
        "cpu_energy": missing("J", CPU_METHOD, reason),
        "cpu_power": missing("W", POWER_METHOD, reason),
        "dram_energy": missing("J", DRAM_METHOD, reason),
        "dram_power": missing("W", POWER_METHOD, reason),
    }


def device_metrics(
    name: str, joules: Mapping[int, float] | None, seconds: float, method: str, reason: str | None, label: str
) -> dict[str, dict[str, Any]]:
    """`<name>_energy` (J) and `<name>_power` (W) from one window's per-device joules (Zeus's
    Measurement fields), or null with the reason. A counter that did not move, or went backwards,
    is null: 0 J would be read as a free window."""
    if not joules:
        why = reason or f"Zeus returned no {label} reading for the window"
        return {f"{name}_energy": missing("J", method, why), f"{name}_power": missing("W", POWER_METHOD, why)}
    total = float(sum(joules.values()))
    per = {str(k): round(float(v), 6) for k, v in joules.items()}
    if any(v < 0 for v in joules.values()):
        why = f"the {label} energy counter went backwards over the window ({per} J): a reset or a wraparound"
    elif total == 0.0:
        why = (
            f"the {label} energy counter did not move over the {seconds:.3g} s window (shorter than the "
            "counter's update period, or a stale counter): measure longer (--max-measure-s)"
        )
    elif seconds <= 0:
        why = "the window has no duration"
    else:
        return {
            f"{name}_energy": metric(total, "J", method, devices=per, window_s=round(seconds, 6)),
            f"{name}_power": metric(
                total / seconds, "W", POWER_METHOD, devices={k: round(v / seconds, 6) for k, v in per.items()}
            ),
        }
    return {f"{name}_energy": missing("J", method, why), f"{name}_power": missing("W", POWER_METHOD, why)}


def zeus_index(found: Any, cuda_index: int, uuid: str | None, pci_bus_id: str | None) -> int | str:
    """The index, among Zeus's GPUs, of the framework's GPU, or why it cannot be told. Zeus numbers
    the GPUs CUDA_VISIBLE_DEVICES leaves in NVML's (PCI) order, CUDA fastest first: the GPU is found
    by the UUID or PCI bus id the adapter reports (tbdkit.env.nvml), as NVML's collector does."""
    import pynvml

    from tbdkit.env.nvml import nvml_handle

    try:
        target = pynvml.nvmlDeviceGetUUID(nvml_handle(pynvml, cuda_index, uuid, pci_bus_id)[0])
        uuids = [pynvml.nvmlDeviceGetUUID(g.handle) for g in found.gpus]
    except LookupError as exc:
        return str(exc)
    except Exception as exc:
        return f"the GPU's UUID could not be read through NVML ({type(exc).__name__}: {exc})"
    if target not in uuids:
        return f"the framework's GPU ({target}) is not among those Zeus sees ({', '.join(uuids) or 'none'})"
    return uuids.index(target)


class EnergyCollector:
    """A collector (tbdkit.agent.collectors): one Zeus window over the sample window. Zeus is imported
    here, lazily, so a stack without it still runs (its energy is null with ZEUS_MISSING)."""

    name = "energy"
    KEY = "tbdkit-sample-window"

    def __init__(
        self,
        cuda_index: int | None,
        uuid: str | None = None,
        pci_bus_id: str | None = None,
        monitor: Callable[..., Any] | None = None,
    ) -> None:
        self.monitor: Any = None
        self.reason: str | None = None  # why nothing at all is measured
        self.gpu_reason: str | None = None if cuda_index is not None else CPU_RUN
        self.cpu_reason: str | None = None
        self.gpu_method = GPU_METHOD
        self.result: dict[str, dict[str, Any]] | None = None
        if cuda_index is None and monitor is None:
            try:
                self.cpu_reason = rapl_reason()
            except ImportError:
                self.reason = ZEUS_MISSING
                return
            if self.cpu_reason is not None:
                # No GPU and no RAPL: Zeus would read nothing, so its monitor is not started (its import,
                # scikit-learn's among it, is seconds of each CPU run's setup).
                return
        try:
            if monitor is None:
                from zeus.monitor import ZeusMonitor

                monitor = ZeusMonitor
            from zeus.device import get_gpus
            from zeus.device.gpu.common import ZeusGPUInitError
        except ImportError:
            self.reason = ZEUS_MISSING
            return
        gpus: list[int] = []
        try:
            if cuda_index is not None:
                try:
                    found = get_gpus()
                except ZeusGPUInitError as exc:  # no NVML, or MIG slices (NVML has no per-slice energy)
                    self.gpu_reason = f"Zeus cannot measure the GPU through NVML ({exc})"
                except Exception as exc:  # e.g. CUDA_VISIBLE_DEVICES given as UUIDs, which Zeus reads as integers
                    self.gpu_reason = f"Zeus could not list the GPUs ({type(exc).__name__}: {exc})"
                else:
                    index = zeus_index(found, cuda_index, uuid, pci_bus_id)
                    if isinstance(index, str):
                        self.gpu_reason = index
                    else:
                        gpus = [index]
                        if not found.supports_get_total_energy_consumption(index):
                            self.gpu_method = GPU_POLLED_METHOD
            self.cpu_reason = rapl_reason()
            self.monitor = monitor(gpu_indices=gpus, cpu_indices=None if self.cpu_reason is None else [])
            if self.cpu_reason is None and not self.monitor.cpu_indices:
                self.cpu_reason = "Zeus found no readable RAPL package"
        except Exception as exc:  # a Zeus failure is a measurement gap, never a crash of the run
            self.reason = f"Zeus could not start its monitor ({type(exc).__name__}: {exc})"
            self.monitor = None

    def start(self) -> None:
        self.result = None
        if self.monitor is None:
            return
        try:
            self.monitor.begin_window(self.KEY, sync_execution=False, restart=True)
        except Exception as exc:
            self.reason = f"Zeus could not open the window ({type(exc).__name__}: {exc})"

    def sample(self) -> dict[str, Any]:
        return {}

    def stop(self) -> dict[str, dict[str, Any]]:
        if self.monitor is None and self.reason is None:  # nothing to read: each counter's own reason
            return self._metrics(None, None, None, 0.0)
        if self.monitor is None or self.reason is not None:
            return _none(self.reason or ZEUS_MISSING)
        try:
            with warnings.catch_warnings():  # Zeus warns of a zero reading; it becomes a null with the reason here
                warnings.simplefilter("ignore")
                m = self.monitor.end_window(self.KEY, sync_execution=False)
        except Exception as exc:
            return _none(f"Zeus could not close the window ({type(exc).__name__}: {exc})")
        return self._metrics(m.gpu_energy, m.cpu_energy, m.dram_energy, float(m.time))

    def _metrics(
        self,
        gpu: Mapping[int, float] | None,
        cpu: Mapping[int, float] | None,
        dram: Mapping[int, float] | None,
        seconds: float,
    ) -> dict[str, dict[str, Any]]:
        return {
            **device_metrics("gpu", gpu, seconds, self.gpu_method, self.gpu_reason, "GPU"),
            **device_metrics("cpu", cpu, seconds, CPU_METHOD, self.cpu_reason, "CPU package"),
            **device_metrics(
                "dram",
                dram,
                seconds,
                DRAM_METHOD,
                self.cpu_reason or "RAPL exposes no DRAM zone on this machine",
                "DRAM",
            ),
        }


def work_unit(rate_unit: str) -> str:
    """'images/s' -> 'images': what one unit of a throughput counts."""
    return rate_unit.removesuffix("/s")


def per_work(
    metrics: Mapping[str, Mapping[str, Any]], work: float, samples: int, unit: str, sample_unit: str, on_gpu: bool
) -> dict[str, dict[str, Any]]:
    """Energy per unit of work (J/<unit>) and samples per kJ over the window, from the energy of the
    device that trained: the GPU's on a GPU run, the CPU packages' (and DRAM's, where RAPL has it)
    on a CPU run. Null with the reason where that energy is null."""
    names = ["gpu"] if on_gpu else ["cpu", "dram"]
    first = metrics.get(f"{names[0]}_energy") or {}
    parts = [(n, (metrics.get(f"{n}_energy") or {}).get("value")) for n in names]
    joules = [v for _, v in parts if isinstance(v, (int, float))]
    used = " + ".join(f"{n}_energy" for n, v in parts if isinstance(v, (int, float)))
    per_unit, per_kj = f"J/{work_unit(unit)}", f"{work_unit(sample_unit)}/kJ"
    method_j = f"{used} / the window's work ({unit} x s summed over its iterations)"
    method_s = f"samples in the window / ({used}) in kJ"
    if not isinstance(first.get("value"), (int, float)):
        why = first.get("reason") or f"{names[0]}_energy was not measured"
        return {
            "energy_per_work": missing(per_unit, f"{names[0]}_energy / the window's work", why),
            "samples_per_kj": missing(per_kj, f"samples / {names[0]}_energy in kJ", why),
        }
    total = float(sum(joules))
    return {
        "energy_per_work": metric(total / work, per_unit, method_j)
        if work > 0
        else missing(per_unit, method_j, "the window holds no work"),
        "samples_per_kj": metric(samples / (total / 1e3), per_kj, method_s),
    }
