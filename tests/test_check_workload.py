"""`tbdkit check-workload DIR|MODEL`: every built-in model's [checks] table holds what the generated tests and the
command read; a folder that breaks the contract fails in one sentence before any stack starts; the tiny outside
model passes in the PyTorch stack, and a framework file without train_step fails there in one sentence, as does a
step whose memory the analyses after a bench run's window cannot probe; ResNet-50 on PyTorch passes as a user types
it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from model_checks import BF16_REFUSALS, NOT_COMPILED_REASONS, cli
from tbdkit.cli.main import app
from tbdkit.spec import catalog, check_settings

TINY = Path(__file__).parent / "fixtures" / "workloads" / "tiny_mlp"


@pytest.mark.parametrize("name", sorted(catalog.models()))
def test_every_built_in_model_has_its_checks(name):
    model = catalog.get(name)
    for framework in model.frameworks:
        settings = check_settings.of(model, framework)
        assert settings.smoke_parameters, (name, framework)
        assert settings.learning is not None and settings.math_modes is not None, (name, framework)
        if settings.parity is not None:  # the reasons it quotes are the adapters' own words
            assert settings.parity.not_compiled in {None, *NOT_COMPILED_REASONS}, settings.parity
            assert settings.parity.bf16_refused in {None, *BF16_REFUSALS}, settings.parity


def test_an_unknown_check_key_is_one_sentence():
    with pytest.raises(Exception, match=r"has unknown keys stepz: use "):
        check_settings.from_table({"learning": {"batch_size": 1, "stepz": 2, "factor": 0.9}}, "pytorch")


def _copy(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(TINY, folder)
    toml = folder / "workload.toml"
    toml.write_text(toml.read_text().replace('name = "tiny_mlp"', f'name = "{name}"'))
    return folder


def test_a_broken_folder_fails_in_one_sentence_before_any_stack(tmp_path, monkeypatch):
    folder = _copy(tmp_path, "tiny_no_samples")
    data = folder / "data.py"
    data.write_text(data.read_text().replace("def samples(self)", "def examples(self)"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["check-workload", "tiny_no_samples"])
    assert result.exit_code == 1, result.output
    assert "tiny_no_samples/data.py's Batch has no samples: add a property `samples`" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_path_that_is_not_a_folder_is_one_sentence(tmp_path):
    result = CliRunner().invoke(app, ["check-workload", str(tmp_path / "nowhere")])
    assert result.exit_code != 0 and "is not a folder: name a model folder" in result.output, result.output


def test_the_tiny_outside_model_passes_and_a_missing_train_step_fails_in_its_stack(tmp_path):
    proc = cli("check-workload", str(TINY), "--framework", "pytorch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for check in ("contract", "model code only", "parameters", "learning", "math modes", "analyses"):
        assert any(line.split("│")[1].strip() == check and "passed" in line
                   for line in proc.stdout.splitlines() if line.count("│") > 3), (check, proc.stdout)  # fmt: skip

    folder = _copy(tmp_path, "tiny_no_step")
    code = folder / "pytorch.py"
    code.write_text(code.read_text().replace("def train_step(", "def training_step("))
    proc = cli("check-workload", str(folder), "--framework", "pytorch")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = " ".join(proc.stdout.replace("│", " ").split())
    assert "pytorch.py has no function train_step: add `def train_step(training, inputs, precision) -> loss`" in said


# A step that takes its gradients with torch.func (as per-sample-gradient and meta-learning code does): it trains,
# but PyTorch refuses the saved-tensor hooks the memory breakdown counts feature maps with
TORCH_FUNC_STEP = '''def train_step(training: Training, inputs: dict[str, torch.Tensor], precision: Any) -> torch.Tensor:
    weights = {n: p.detach() for n, p in training.model.named_parameters()}

    def loss_of(weights):
        with precision.autocast():
            out = torch.func.functional_call(training.model, weights, (inputs["features"],))
        return nn.functional.cross_entropy(out.float(), inputs["labels"])

    grads, loss = torch.func.grad_and_value(loss_of)(weights)
    for n, p in training.model.named_parameters():
        p.grad = grads[n]
    training.optimizer.step()
    return loss.detach()
'''


def test_a_step_the_memory_breakdown_cannot_probe_fails_the_analyses_check(tmp_path):
    """The analyses a bench run takes after its window, which there would leave null metrics in a run that says ok,
    fail check-workload on the CPU in one sentence, PyTorch's own last line; the step trains, so the checks
    before pass."""
    folder = _copy(tmp_path, "tiny_torch_func")
    code = folder / "pytorch.py"
    text = code.read_text()
    code.write_text(text[: text.index("def train_step(")] + TORCH_FUNC_STEP)
    proc = cli("check-workload", str(folder), "--framework", "pytorch")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {cells[1].strip(): cells[3].strip() for line in proc.stdout.splitlines()
            if (cells := line.split("│")) and len(cells) > 4 and cells[1].strip()}  # fmt: skip
    assert {c: rows[c] for c in ("learning", "math modes", "analyses")} == {
        "learning": "passed", "math modes": "passed", "analyses": "failed"}, proc.stdout  # fmt: skip
    said = " ".join(proc.stdout.replace("│", " ").split())
    assert "the memory breakdown raised RuntimeError: torch.func" in said and "saved tensor hooks" in said, said


def test_resnet50_on_pytorch_passes_as_typed():
    proc = cli("check-workload", "resnet50", "--framework", "pytorch")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed" not in proc.stdout and "learning" in proc.stdout, proc.stdout


def _described(parameters: int, forward: int) -> dict:
    return {"parameters": parameters, "layers": [{"name": "conv1", "params": {"weight": [8, 3, 3, 3]}}],
            "flops_per_sample": {"forward": forward}}  # fmt: skip


def test_the_same_network_on_every_framework():
    from tbdkit.bench import cross_framework

    model = catalog.get("resnet50")
    same = dict.fromkeys(model.frameworks, _described(216, 1000))
    assert cross_framework.network_parity(model, same)["status"] == "passed"
    differs = {"pytorch": _described(216, 1000), "tensorflow": _described(217, 1000), "mxnet": _described(216, 1020)}
    outcome = cross_framework.network_parity(model, differs)
    assert outcome["status"] == "failed", outcome
    assert "tensorflow has 217 parameters, pytorch 216" in outcome["detail"]
    assert "mxnet's forward FLOPs 1,020 against pytorch's 1,000 (over 1%)" in outcome["detail"]


def test_the_paper_count_and_its_known_differences_are_settings():
    """[checks.paper_parameters]: Inception-v3's published size leaves the auxiliary classifier out, DiT's differs
    from the published one by a known count, said why; the default tolerance is 1%."""
    assert check_settings.of(catalog.get("inception_v3"), "pytorch").paper_parameters.exclude == ("AuxLogits.",)
    dit = check_settings.of(catalog.get("dit"), "pytorch").paper_parameters
    assert dit.expected == 749_826_464 and "embedders" in dit.differs
    assert check_settings.of(catalog.get("resnet50"), "mxnet").paper_parameters == check_settings.PaperParameters()
