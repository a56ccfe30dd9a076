"""A real run (PyTorch, CPU) whose window is capped at 3 iterations finishes `ok` but marked
`unstable`, with the reason and the rule in its summary; its window names the cap."""

from __future__ import annotations

from tbdkit.spec import run_spec as specs
from tbdkit.agent.run import STABILITY_RULE, execute
from tbdkit.results.summary import MEASURED  # a disturbed run (a busy machine) finished too
from run_invariants import assert_run_holds


def test_a_three_iteration_window_is_unstable(tmp_path):
    spec = specs.build(model="deepspeech2", framework="pytorch", batch_size=1, preset="smoke", device="cpu",
                       analyses=False, measure={"min_warmup_iterations": 1, "warmup_window": 2,
                                                "max_warmup_iterations": 2, "min_measure_iterations": 2,
                                                "max_measure_iterations": 3, "target_ci": 1e-9})
    assert execute(spec, tmp_path) == 0
    summary = assert_run_holds(tmp_path, launched=False)
    assert summary["status"] in MEASURED and summary["window"]["stop_reason"] == "iteration_cap"
    assert summary["window"]["iterations"] == 3
    assert summary["unstable"] is True and summary["stability_rule"] == STABILITY_RULE
    assert "3 iteration(s), fewer than 5" in summary["instability_reason"]
