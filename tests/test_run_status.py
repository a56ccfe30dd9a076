"""How a run's end is named in its summary: ok, oom, failed or interrupted."""

from __future__ import annotations

from tbdkit.agent.run import _classify


def test_a_thread_that_cannot_start_under_a_memory_cap_is_out_of_memory() -> None:
    exc = RuntimeError("can't start new thread")
    status, message = _classify(exc, None, memory_limited=True)
    assert status == "oom" and message.startswith("out of memory (can't start new thread")
    # without the cap it is some other exhaustion (threads, pids): a failure, named as it is
    assert _classify(exc, None) == ("failed", "RuntimeError: can't start new thread")
    onednn = RuntimeError("could not create a primitive")
    assert _classify(onednn, None, memory_limited=True)[0] == "oom"
    assert _classify(onednn, None)[0] == "failed"


def test_framework_oom_messages_and_interrupts() -> None:
    assert _classify(MemoryError(), None)[0] == "oom"
    assert _classify(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"), None)[0] == "oom"
    assert _classify(KeyboardInterrupt(), None)[0] == "interrupted"
    assert _classify(ValueError("bad shape"), None) == ("failed", "ValueError: bad shape")


def test_an_agent_killed_by_a_signal_under_the_memory_cap_ran_out_of_memory(tmp_path) -> None:
    from tbdkit.launch.outcome import finalize
    from tbdkit.spec.run_spec import RunSpec

    capped = RunSpec(model="deepspeech2", batch_size=8, memory_limit_mb=400)
    (tmp_path / "a").mkdir()
    status, summary = finalize(tmp_path / "a", capped, -11)
    assert status == summary["status"] == "oom"
    assert "SIGSEGV under --memory-limit-mb 400" in summary["error"] and "out of memory" in summary["error"]
    # the same death without a cap is a failure, with the exit code; so is a plain non-zero exit under it
    (tmp_path / "b").mkdir()
    assert finalize(tmp_path / "b", RunSpec(model="deepspeech2", batch_size=8), -11)[0] == "failed"
    (tmp_path / "c").mkdir()
    status, summary = finalize(tmp_path / "c", capped, 1)
    assert status == "failed" and "exited with code 1" in summary["error"]
