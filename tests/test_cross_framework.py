"""Every catalog model with several frameworks, side by side, as `tbdkit check-workload MODEL` checks it
(tbdkit/bench/cross_framework.py): one `describe` per framework, PyTorch's weights moved through the canonical
layout into the others. The same network (parameters, canonical layers, FLOPs within 1%), the FLOPs its parity.py
expects, the non-trainable state its workload.toml lists, its parity.py's own network checks, the weights read back
unchanged and the same outputs on the probe batch ([checks.outputs]). A model added to the catalog is checked here
without an edit. The comparison's own failures are shown on made-up files. Needs every stack (`make test`). A worker's
models share one describe server per stack (a fork per describe of a process that imported its framework once)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tbdkit.bench import cross_framework
from tbdkit.spec import catalog, check_settings

MODELS = sorted(name for name, model in catalog.models().items() if len(model.frameworks) > 1)


@pytest.mark.parametrize("model", MODELS)
def test_the_frameworks_agree(model, describe_servers):
    outcomes = cross_framework.check(catalog.get(model), describe_servers)
    # a kit model states its FLOPs (parity.py's forward_flops); its own layer checks (network_gaps) are optional
    failed = [o for o in outcomes if o["status"] == "failed" or (o["status"] == "skipped" and o["check"] != "network")]
    assert not failed, failed
    frameworks = catalog.get(model).frameworks
    # every check ran: FLOPs, state and outputs on each framework, and the model's own network checks
    assert sorted((o["check"], o["framework"]) for o in outcomes) == sorted(
        [("same network", "all"), ("network", "all")] + [(c, f) for c in ("FLOPs", "framework state")
                                                         for f in frameworks] + [("same outputs", f)
                                                                                 for f in frameworks[1:]])


def test_a_describe_that_fails_says_why_and_its_server_goes_on(describe_servers, tmp_path):
    """A describe run by a server fails as its own process would (its exit status, its last words on stderr),
    and the server's next describe runs as usual."""
    argv = ["--model", "minigo", "--framework", "mxnet"]
    code, _, err = describe_servers.describe("mxnet", [*argv, "--preset", "huge"], tmp_path)
    assert code == 1 and "huge" in err.strip().splitlines()[-1], err
    code, out, _ = describe_servers.describe("mxnet", argv, tmp_path)
    assert code == 0, out
    assert json.loads(out)["parameters"] == check_settings.of(catalog.get("minigo"), "mxnet").smoke_parameters


def _npz(tmp_path, name, **arrays):
    path = tmp_path / f"{name}.npz"
    np.savez(path, **arrays)
    return np.load(path)


def test_the_comparison_names_each_difference(tmp_path):
    weight = np.arange(6.0).reshape(2, 3)
    theirs = _npz(tmp_path, "a", **{"conv1/weight": weight}, output=np.array([1.0, 100.0]),
                  log_probs=np.array([[0.0, -1.0, 9.0]]), lengths=np.array([2]), loss_a=np.array(1.0))
    same = _npz(tmp_path, "b", **{"conv1/weight": weight}, output=np.array([1.0005, 100.0]),
                log_probs=np.array([[0.0, -1.0, -7.0]]), lengths=np.array([2]), loss_a=np.array(1.0))
    outputs = check_settings.Outputs({"output": check_settings.Tolerance(1e-5, scale="largest"),
                                      "log_probs": check_settings.Tolerance(1e-4)}, ("loss_*",))
    assert cross_framework.compare_outputs(theirs, same, outputs) == []  # past the length is not compared
    other = _npz(tmp_path, "c", **{"conv1/weight": weight + 1}, output=np.array([1.01, 100.0]),
                 log_probs=np.array([[0.0, -1.0, 9.0]]), lengths=np.array([2]), loss_a=np.array(np.nan))
    gaps = cross_framework.compare_outputs(theirs, other, outputs)
    assert gaps[0] == "conv1/weight did not read back unchanged"
    assert gaps[1].startswith("output: 1 values off (by up to 0.01)") and gaps[2] == "loss_a is not finite"
    every = check_settings.Outputs()  # a model without [checks.outputs]: every output, and the same ones
    assert any(g.startswith("loss_a: 1 values off") for g in cross_framework.compare_outputs(theirs, other, every))
    fewer = _npz(tmp_path, "d", **{"conv1/weight": weight}, output=np.array([1.0, 100.0]))
    assert "outputs ['output'] against ['lengths', 'log_probs', 'loss_a', 'output']" in cross_framework.compare_outputs(
        theirs, fewer, every)


def test_each_outputs_table_parses_and_names_its_outputs():
    for name in MODELS:
        model = catalog.get(name)
        for framework in model.frameworks[1:]:
            outputs = check_settings.outputs_of(model, framework)
            assert outputs.compare or outputs.finite, (name, framework)
    with pytest.raises(Exception, match="has scale 'big': use one of one, largest, largest_or_1"):
        check_settings.outputs_from_table({"outputs": {"compare": {"x": {"atol": 1, "scale": "big"}}}}, "mxnet")
