"""Energy over the sample window (tbdkit.agent.collectors.energy) through the real Zeus package: its
RAPL reader over a powercap tree written here (only the hardware is replaced), its absence, and the
rule that a missing or unmoved counter is null with the reason, never 0."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from nvml_shim import Device, fake_nvml  # noqa: F401  (fixture)

from tbdkit.agent.collectors import energy


def write_zone(path: Path, name: str, uj: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{uj}\n")
    (path / "max_energy_range_uj").write_text("262143328850\n")


@pytest.fixture
def rapl_tree(tmp_path, monkeypatch):
    """A powercap tree with one package and its DRAM zone, where Zeus reads RAPL."""
    from zeus.device import cpu as zeus_cpu
    from zeus.device.cpu import rapl

    root = tmp_path / "intel-rapl"
    write_zone(root / "intel-rapl:0", "package-0", 1_000_000)
    write_zone(root / "intel-rapl:0" / "intel-rapl:0:0", "dram", 500_000)
    monkeypatch.setattr(rapl, "RAPL_DIR", str(root))
    monkeypatch.setattr(rapl, "CONTAINER_RAPL_DIR", str(tmp_path / "absent"))
    rapl.rapl_is_available.cache_clear()
    monkeypatch.setattr(zeus_cpu, "_cpus", None)
    yield root
    rapl.rapl_is_available.cache_clear()


def test_rapl_counters_give_energy_and_power_per_package(rapl_tree):
    collector = energy.EnergyCollector(None)
    assert collector.cpu_reason is None and collector.reason is None
    collector.start()
    write_zone(rapl_tree / "intel-rapl:0", "package-0", 6_000_000)                  # +5 J
    write_zone(rapl_tree / "intel-rapl:0" / "intel-rapl:0:0", "dram", 1_500_000)    # +1 J
    m = collector.stop()
    assert m["cpu_energy"]["value"] == pytest.approx(5.0) and m["cpu_energy"]["unit"] == "J"
    assert m["cpu_energy"]["devices"] == {"0": pytest.approx(5.0)}
    assert m["dram_energy"]["value"] == pytest.approx(1.0)
    seconds = m["cpu_energy"]["window_s"]
    assert m["cpu_power"]["value"] == pytest.approx(5.0 / seconds, rel=1e-3) and m["cpu_power"]["unit"] == "W"
    assert m["gpu_energy"]["value"] is None and m["gpu_energy"]["reason"] == energy.CPU_RUN
    per = energy.per_work(m, work=20.0, samples=10, unit="images/s", sample_unit="images/s", on_gpu=False)
    assert per["energy_per_work"]["value"] == pytest.approx(6.0 / 20) and per["energy_per_work"]["unit"] == "J/images"
    assert "cpu_energy + dram_energy" in per["energy_per_work"]["method"]
    assert per["samples_per_kj"]["value"] == pytest.approx(10 / 6e-3) and per["samples_per_kj"]["unit"] == "images/kJ"


def test_an_unmoved_counter_is_null_never_zero(rapl_tree):
    collector = energy.EnergyCollector(None)
    collector.start()
    m = collector.stop()
    for name in ("cpu_energy", "cpu_power", "dram_energy"):
        assert m[name]["value"] is None and "did not move" in m[name]["reason"], m[name]


def test_no_rapl_folder_is_null_with_the_reason(tmp_path):
    reason = energy.rapl_reason((str(tmp_path / "intel-rapl"), str(tmp_path / "other")))
    assert reason is not None and "not exposed" in reason and "virtual machine" in reason
    (tmp_path / "intel-rapl").mkdir()
    assert "no package zone" in str(energy.rapl_reason((str(tmp_path / "intel-rapl"),)))
    write_zone(tmp_path / "intel-rapl" / "intel-rapl:0", "package-0", 1)
    assert energy.rapl_reason((str(tmp_path / "intel-rapl"),)) is None


def test_a_cpu_run_without_rapl_gives_each_reason_without_starting_zeus(tmp_path, monkeypatch):
    """Nothing for Zeus to read (no GPU, no RAPL): its monitor is not imported (3.6 s of a run's setup), and each
    counter still says why it is null. `zeus.monitor` is made unimportable: had the collector reached for it,
    every reason would be ZEUS_MISSING."""
    from zeus.device.cpu import rapl

    monkeypatch.setattr(rapl, "RAPL_DIR", str(tmp_path / "intel-rapl"))
    monkeypatch.setattr(rapl, "CONTAINER_RAPL_DIR", str(tmp_path / "absent"))
    monkeypatch.setitem(sys.modules, "zeus.monitor", None)
    collector = energy.EnergyCollector(None)
    collector.start()
    m = collector.stop()
    assert m["gpu_energy"]["value"] is None and m["gpu_energy"]["reason"] == energy.CPU_RUN
    for name in ("cpu_energy", "cpu_power", "dram_energy", "dram_power"):
        assert m[name]["value"] is None and "RAPL is not exposed on this machine" in m[name]["reason"], m[name]


def test_a_stack_without_zeus_runs_with_null_energy(monkeypatch):
    monkeypatch.setitem(sys.modules, "zeus.monitor", None)  # `import zeus.monitor` raises ImportError
    collector = energy.EnergyCollector(0)
    collector.start()
    m = collector.stop()
    assert set(m) == {"gpu_energy", "gpu_power", "cpu_energy", "cpu_power", "dram_energy", "dram_power"}
    assert all(v["value"] is None and v["reason"] == energy.ZEUS_MISSING for v in m.values())
    per = energy.per_work(m, 10.0, 10, "audio_s/s", "utterances/s", on_gpu=True)
    assert per["energy_per_work"]["value"] is None and per["energy_per_work"]["reason"] == energy.ZEUS_MISSING
    assert per["energy_per_work"]["unit"] == "J/audio_s"


def test_gpu_window_energy_from_zeus_measurement():
    m = energy.device_metrics("gpu", {0: 300.0}, 2.0, energy.GPU_METHOD, None, "GPU")
    assert m["gpu_energy"]["value"] == 300.0 and m["gpu_power"]["value"] == 150.0
    assert energy.device_metrics("gpu", {0: -1.0}, 2.0, energy.GPU_METHOD, None, "GPU")["gpu_energy"]["value"] is None
    absent = energy.device_metrics("gpu", {}, 2.0, energy.GPU_METHOD, "Zeus sees 0 GPU(s)", "GPU")
    assert absent["gpu_energy"]["reason"] == "Zeus sees 0 GPU(s)"
    per = energy.per_work({**m}, work=600.0, samples=100, unit="images/s", sample_unit="images/s", on_gpu=True)
    assert per["energy_per_work"]["value"] == pytest.approx(0.5)
    assert per["samples_per_kj"]["value"] == pytest.approx(100 / 0.3)


def test_calibrate_reads_rapl_through_zeus_and_judges_it(rapl_tree, monkeypatch):
    from tbdkit.calibrate import energy as cal

    def busy_counter(stop, clocks):  # the busy window's work: the package counter advances by 30 J
        write_zone(rapl_tree / "intel-rapl:0", "package-0", 31_000_000)
        stop.wait()
        clocks.append(0.0)

    monkeypatch.setattr("tbdkit.calibrate.host._spin", busy_counter)
    (result,) = cal.probe(seconds=0.4)
    assert result.verdict == "trusted", result
    assert result.details["idle_j"] == 0.0 and result.details["busy_j"] == pytest.approx(30.0)
    assert result.measured == pytest.approx(30.0 / result.details["busy_s"], rel=1e-3)


def test_calibrate_verdicts_on_constructed_readings():
    from tbdkit.calibrate import energy as cal

    assert cal.rapl_result(10.0, 1.0, 60.0, 2.0, 65.0).verdict == "trusted"
    assert "did not move" in cal.rapl_result(0.0, 1.0, 0.0, 2.0, None).verdict
    assert "backwards" in cal.rapl_result(10.0, 1.0, -5.0, 2.0, None).verdict
    assert "above the package's limit" in cal.rapl_result(10.0, 1.0, 300.0, 2.0, 65.0).verdict
    assert "not above the idle" in cal.rapl_result(30.0, 1.0, 40.0, 2.0, None).verdict
    assert cal.rapl_result(None, 1.0, None, 2.0, None).status == "unsupported"


def test_calibrate_without_rapl_is_unsupported_with_the_reason(tmp_path, monkeypatch):
    from zeus.device.cpu import rapl

    from tbdkit.calibrate import energy as cal

    monkeypatch.setattr(rapl, "RAPL_DIR", str(tmp_path / "absent"))
    monkeypatch.setattr(rapl, "CONTAINER_RAPL_DIR", str(tmp_path / "absent2"))
    (result,) = cal.probe(seconds=0.1)
    assert result.status == "unsupported" and "RAPL is not exposed" in result.verdict


@pytest.fixture
def zeus_over_fake_nvml(fake_nvml, monkeypatch):  # noqa: F811  (the fixture)
    """Zeus's NVIDIA path through the real pynvml over the stand-in libnvidia-ml (tests/nvml_shim.py)."""
    from zeus.device import gpu as zeus_gpu
    from zeus.device.gpu import nvidia

    monkeypatch.setattr(zeus_gpu, "_gpus", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvidia.nvml_is_available.cache_clear()
    yield fake_nvml
    nvidia.nvml_is_available.cache_clear()


A = "GPU-58f4c2a0-0000-0000-0000-000000000001"
B = "GPU-58f4c2a0-0000-0000-0000-000000000002"


def test_the_framework_gpu_is_measured_by_its_uuid_not_by_index(zeus_over_fake_nvml):
    """CUDA numbers the faster GPU first: the framework's cuda:0 is NVML's second GPU (300 W, not 100 W)."""
    import time

    zeus_over_fake_nvml([Device(A, "00000000:18:00.0", power_mw=100_000), Device(B, "00000000:3B:00.0", power_mw=300_000)])
    collector = energy.EnergyCollector(0, uuid=B.removeprefix("GPU-"), pci_bus_id=None)
    assert collector.gpu_reason is None and collector.monitor.gpu_indices == [1]
    collector.start()
    time.sleep(0.3)
    m = collector.stop()
    assert m["gpu_power"]["value"] == pytest.approx(300.0, rel=0.05) and m["gpu_power"]["devices"] == {"1": m["gpu_power"]["value"]}
    assert m["gpu_energy"]["value"] == pytest.approx(300.0 * m["gpu_energy"]["window_s"], rel=0.05)
    assert "nvmlDeviceGetTotalEnergyConsumption" in m["gpu_energy"]["method"]


def test_an_unmatched_gpu_is_null_with_the_reason_never_a_guess(zeus_over_fake_nvml):
    zeus_over_fake_nvml([Device(A, "00000000:18:00.0"), Device(B, "00000000:3B:00.0")])
    collector = energy.EnergyCollector(0)   # the adapter reported neither UUID nor PCI bus id
    assert "could not be matched" in collector.gpu_reason
    collector.start()
    m = collector.stop()
    assert m["gpu_energy"]["value"] is None and "could not be matched" in m["gpu_energy"]["reason"]


def test_a_gpu_older_than_volta_is_measured_by_zeus_power_samples(zeus_over_fake_nvml):
    zeus_over_fake_nvml([Device(A, "00000000:18:00.0", architecture=4)])   # Pascal: no energy counter
    from zeus.device import get_gpus

    assert not get_gpus().supports_get_total_energy_consumption(0)
    from tbdkit.agent.collectors.energy import GPU_POLLED_METHOD, zeus_index

    assert zeus_index(get_gpus(), 0, A, None) == 0 and GPU_POLLED_METHOD.startswith("Zeus")


def test_the_zeus_missing_advice_says_what_to_do_for_an_installed_and_an_adopted_stack() -> None:
    """"reinstall the stack" would be wrong for an adopted stack: the kit never reinstalls over one."""
    assert "`tbdkit setup STACK --force`" in energy.ZEUS_MISSING
    assert "for an adopted stack" in energy.ZEUS_MISSING and "--adopt PYTHON --wheels DIR" in energy.ZEUS_MISSING
