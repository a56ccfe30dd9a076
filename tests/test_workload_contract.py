"""The workload contract (tbdkit.spec.contract): every built-in folder meets it, describe's input shapes come
through it unchanged, and a folder that breaks one part of it gets one sentence naming the file and the fix."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from tbdkit.spec import catalog, contract

TINY = Path(__file__).parent / "fixtures" / "workloads" / "tiny_mlp"


@pytest.mark.parametrize("name", sorted(catalog.models()))
def test_every_built_in_folder_meets_the_contract(name):
    assert contract.folder_gaps(catalog.get(name).folder) == []


# describe's reference_sample.input_shape of every built-in model and preset, as it was when describe guessed
# the batch's fields by name (images, features, source_lengths): the contract gives the same shapes
DESCRIBED_SHAPES = {
    ("a3c", "smoke"): [4, 84, 84], ("bert", "paper"): [128], ("bert", "smoke"): [32],
    ("deepspeech2", "paper"): [1, 161, 1299], ("deepspeech2", "smoke"): [1, 161, 199],
    ("efficientdet", "paper"): [3, 512, 512], ("efficientdet", "smoke"): [3, 256, 256],
    ("faster_rcnn", "smoke"): [3, 375, 500], ("inception_v3", "paper"): [3, 299, 299],
    ("inception_v3", "smoke"): [3, 160, 160], ("mask_rcnn", "smoke"): [3, 480, 640],
    ("minigo", "paper"): [17, 19, 19], ("minigo", "smoke"): [17, 9, 9], ("resnet50", "paper"): [3, 224, 224],
    ("resnet50", "smoke"): [3, 64, 64], ("resnet50", "converge"): [3, 16, 16], ("seq2seq", "paper"): [25, 26],
    ("seq2seq", "smoke"): [10, 11], ("transformer", "paper"): [27, 29], ("transformer", "smoke"): [10, 11],
    ("wgan_gp", "smoke"): [1, 3, 64, 64],
}  # fmt: skip


@pytest.mark.parametrize("name, preset", sorted(DESCRIBED_SHAPES))
def test_describe_input_shapes_come_through_the_contract(name, preset):
    model = catalog.get(name)
    hp = model.hp(preset)
    data = catalog.load_module(model, "data")
    assert contract.input_shape(data, data.reference_batch(hp), hp) == DESCRIBED_SHAPES[(name, preset)]


def test_the_tiny_fixture_meets_the_contract():
    assert contract.folder_gaps(TINY) == []


def _broken(tmp_path: Path, name: str, file: str, old: str, new: str) -> Path:
    """A copy of the tiny model named `name` (its own module names), `old` replaced by `new` in `file`."""
    folder = tmp_path / name
    shutil.copytree(TINY, folder)
    for path in folder.iterdir():
        if path.is_file():
            path.write_text(path.read_text().replace('name = "tiny_mlp"', f'name = "{name}"'))
    text = (folder / file).read_text()
    assert old in text, old
    text = text.replace(old, new)
    if "# type: ignore" in new:  # lists, not arrays: a count that does not need .shape
        text = text.replace("int(self.features.shape[0])", "len(self.features)")
    (folder / file).write_text(text)
    return folder


def _one_sentence(gaps: list[str], *parts: str) -> str:
    """The one gap: a single sentence (no line break, one full stop at its end) holding each of `parts`."""
    assert len(gaps) == 1, gaps
    (gap,) = gaps
    assert "\n" not in gap and gap.endswith(".") and ": " in gap, gap
    for part in parts:
        assert part in gap, (part, gap)
    return gap


BROKEN_DATA = {
    # part of the contract: (the file, the text replaced, its replacement, what the sentence must say)
    "missing_function": ("data.py", "def reference_batch(", "def reference_sample(",
                         ("data.py has no function reference_batch", "def reference_batch(hp) -> Batch")),
    "wrong_signature": ("data.py", "def batches(source: str, hp: Mapping[str, Any], batch_size: int, seed: int)",
                        "def batches(source: str, hp: Mapping[str, Any])",
                        ("data.py's batches(source, hp) cannot be called",
                         "def batches(source, hp, batch_size, seed)")),
    "check_source_without_full": ("data.py", "hp: Mapping[str, Any], full: bool = False) -> str",
                                  "hp: Mapping[str, Any]) -> str", ("check_source", "full=...")),
    "batch_without_samples": ("data.py", "def samples(self)", "def examples(self)",
                              ("data.py's Batch has no samples", "add a property `samples`")),
    "batch_without_work": ("data.py", "def work(self)", "def load(self)", ("data.py's Batch has no work",)),
    "batch_not_a_dataclass": ("data.py", "@dataclass(frozen=True)\nclass Batch", "class Batch",
                              ("data.py's Batch is not a dataclass", "@dataclass")),
    "no_input_arrays": ("data.py", "return next(synthetic_batches(hp, 1, seed=0))",
                        'return Batch([[0.0] * int(hp["features"])], [0])  # type: ignore',
                        ("gives describe no input shape", "input_shape(batch, hp)")),
    "no_probe": ("data.py", "def synthetic_batches(hp: Mapping[str, Any], batch_size: int, seed: int)",
                 "def _synthetic(hp: Mapping[str, Any], batch_size: int, seed: int)",
                 ("neither probe_batch nor synthetic_batches",)),
    "data_does_not_import": ("data.py", "import numpy as np\n", "import numpy as np\nimport no_such_module\n",
                             ("data.py cannot be imported", "no_such_module")),
    "model_key_missing": ("workload.toml", 'throughput_unit = "samples/s"\n', "",
                          ("workload.toml has no [model] throughput_unit",)),
    "hparam_key_missing": ("workload.toml", 'input_shapes = "fixed"  # every batch the same shape\n', "",
                           ("workload.toml has no [hparams] input_shapes",)),
    "preset_missing": ("workload.toml", "[preset.paper]", "[preset.large]", ("has no [preset.paper]",)),
    "preset_key_missing": ("workload.toml", "default_batch = 8\n", "", ("no default_batch in [preset.smoke]",)),
    "name_not_the_folder": ("workload.toml", 'name = "tiny_name_not_the_folder"', 'name = "other"',
                            ("make [model] name",)),
    "toml_does_not_parse": ("workload.toml", "[hparams]", "[hparams", ("cannot be read", "parses as TOML")),
}  # fmt: skip


@pytest.mark.parametrize("part", sorted(BROKEN_DATA))
def test_a_folder_that_breaks_one_part_gets_one_sentence(tmp_path, part):
    file, old, new, says = BROKEN_DATA[part]
    folder = _broken(tmp_path, f"tiny_{part}", file, old, new)
    _one_sentence(contract.folder_gaps(folder), *says)


def test_a_folder_without_a_framework_file(tmp_path):
    folder = _broken(tmp_path, "tiny_no_framework", "pytorch.py", "import torch", "import torch")
    (folder / "pytorch.py").unlink()
    _one_sentence(contract.folder_gaps(folder), "has no framework file", "pytorch.py")


def test_not_a_folder(tmp_path):
    _one_sentence(contract.folder_gaps(tmp_path / "nowhere"), "is not a folder")


def _framework_module(**functions: object) -> ModuleType:
    module = ModuleType("fake_framework_file")
    for name, fn in functions.items():
        setattr(module, name, fn)
    return module


def _build(hp, device): ...
def _to_device(batch, device): ...
def _train_step(training, inputs, precision): ...
def _forward(training, inputs): ...


def test_a_framework_file_meets_the_contract():
    module = _framework_module(build=_build, to_device=_to_device, train_step=_train_step, forward=_forward)
    assert contract.framework_gaps(catalog.model_in(TINY), "pytorch", module) == []


def test_a_framework_file_without_a_function():
    module = _framework_module(build=_build, to_device=_to_device, forward=_forward)
    gap = _one_sentence(contract.framework_gaps(catalog.model_in(TINY), "pytorch", module),
                        "pytorch.py has no function train_step", "def train_step(training, inputs, precision)")
    assert re.search(r"tiny_mlp.pytorch\.py", gap), gap


def test_a_framework_file_with_a_wrong_signature():
    def train_step(training, inputs): ...

    module = _framework_module(build=_build, to_device=_to_device, train_step=train_step, forward=_forward)
    _one_sentence(contract.framework_gaps(catalog.model_in(TINY), "pytorch", module),
                  "pytorch.py's train_step(training, inputs) cannot be called as the kit calls it",
                  "def train_step(training, inputs, precision) -> loss")


def test_batch_inputs_are_its_array_fields_in_order():
    data = catalog.load_module(catalog.get("deepspeech2"), "data")
    batch = data.reference_batch(catalog.get("deepspeech2").hp("smoke"))
    assert list(contract.batch_inputs(batch)) == ["features", "feature_lengths", "labels", "label_lengths",
                                                  "durations_s"]  # fmt: skip
