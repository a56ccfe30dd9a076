"""Rich markup in what a user types or a run folder holds is shown as it was typed: every command, given a
string with markup (`[/x]` would close a tag never opened, `[draft]` would be read as a style) in each of
its text options and arguments, answers without a traceback and shows the string whole wherever it shows it:
in its error sentence, in a table's cell, in a progress line, in a folder's name. Nothing trains: no
framework stack is installed (TBDKIT_VENVS is empty)."""

from __future__ import annotations

import json
import traceback
import typing
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from report_fixtures import make_run
from tbdkit.analysis import cost
from tbdkit.cli import app
from tbdkit.cli import console as cli_console
from tbdkit.cli.common import cost_table
from tbdkit.cli.sweep import grid_table

PAYLOAD = "tbdx [draft] [/x]"
# Each command's invocation before one of its text parameters is given PAYLOAD: valid, and short of any
# training (no stack is installed). {results} is a results folder whose run holds PAYLOAD in its text fields.
BASE: dict[str, dict[str, str]] = {
    "bench": {"model": "deepspeech2", "framework": "pytorch", "batch": "2", "precision": "fp32", "preset": "smoke",
              "device": "cpu", "launcher": "native", "results": "{work}/r"},
    "sweep": {"model": "deepspeech2", "frameworks": "pytorch", "batch": "2", "precision": "fp32", "preset": "smoke",
              "device": "cpu", "launcher": "native", "results": "{work}/r"},
    "list": {},
    "show": {"run": "{run}", "results": "{results}"},
    "runs": {"results": "{results}"},
    "report": {"results": "{results}", "out": "{work}/report"},
    "bundle": {"results": "{results}", "out": "{work}/b.tar.gz"},
    "reproduce": {"bundle_path": "{bundle}", "results": "{work}/again"},
    "render": {"target": "slurm", "model": "deepspeech2", "framework": "pytorch", "preset": "smoke"},
    "describe": {"model": "deepspeech2", "framework": "pytorch", "preset": "smoke"},
    "overhead": {"model": "deepspeech2", "framework": "pytorch", "preset": "smoke"},
    "setup": {"names": "pytorch", "installer": "auto"},  # never run as it is: one of them is always PAYLOAD
    "calibrate": {"device": "cpu"},
    "reference": {"model": "deepspeech2", "precision": "fp32", "results": "{work}/r"},
    "compare": {"runs": "{run}", "against": "{run}", "results": "{results}"},
    "images build": {"names": "pytorch", "base_image": "nvcr.io/nvidia/pytorch:25.01-py3", "tag": "t",
                     "build_arg": "A=1"},
    "images lock": {"names": "pytorch"},
    "data prepare": {"model": "deepspeech2", "source": "{work}", "preset": "smoke"},
    "kick-the-tires": {"device": "cpu", "framework": "pytorch", "results": "{work}/k"},
    "gather": {"job_id": "1", "results": "{work}/r"},  # no such job there: one sentence naming both
    # a folder that holds no workload.toml: refused on the host, before any stack starts
    "check-workload": {"target": "{work}", "framework": "pytorch", "graph": "standard"},
}
# Text parameters not driven here, and why: each would do real work before it printed the text.
NOT_DRIVEN = {("calibrate", "results"): "the probes run for a minute before the results folder is written",
              ("kick-the-tires", "results"): "it installs the missing stacks before it names the folder"}


def _is_text(annotation: object) -> bool:
    return annotation in (str, Path) or any(_is_text(a) for a in typing.get_args(annotation))


def text_parameters() -> list[tuple[str, str]]:
    """(command, parameter) for every text option and argument of every command and subcommand."""
    out = []

    def walk(command, prefix: str) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, f"{prefix} {name}".strip())
            return
        out.extend((prefix, p.name) for p in command.params if _is_text(p.type_descriptor.annotation))

    walk(typer.main.get_command(app), "")
    return out


def argv(command: str, values: dict[str, str]) -> list[str]:
    params = {p.name: p for p in _command(command).params}
    args, options = [], []
    for name, value in values.items():
        p = params[name]
        if type(p).__name__.endswith("Argument"):
            args.append(value)
        else:
            options += [p.opts[0], value]
    return [*command.split(), *args, *options]


def _command(name: str):
    command = typer.main.get_command(app)
    for part in name.split():
        command = command.commands[part]
    return command


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A results folder whose run holds PAYLOAD in every text field the commands show, and its bundle."""
    work = tmp_path_factory.mktemp("markup")
    results = work / "results"
    run = make_run(results, "deepspeech2", "pytorch", 2, 10.0)
    env = json.loads((run / "env.json").read_text())
    env["cpu"]["model"] = env["framework"]["device_name"] = PAYLOAD
    (run / "env.json").write_text(json.dumps(env))
    summary = json.loads((run / "summary.json").read_text())
    summary["metrics"]["throughput"]["unit"] = PAYLOAD
    summary["metrics"]["gpu_utilization"]["reason"] = PAYLOAD
    summary |= {"status": "disturbed", "disturbed_reasons": [PAYLOAD], "precision": PAYLOAD, "data": PAYLOAD,
                "variant": PAYLOAD}
    (run / "summary.json").write_text(json.dumps(summary))
    named = run.rename(run.with_name(f"{run.name}-{PAYLOAD.replace('/', '')}"))  # a folder's name holds no "/"
    (results / "index.sqlite").unlink()
    bundle = work / "bundle.tar.gz"
    result = CliRunner().invoke(app, ["bundle", str(results), "-o", str(bundle)])
    assert result.exit_code == 0, result.output
    return {"results": str(results), "run": named.name, "bundle": str(bundle)}


@pytest.fixture
def no_stacks(tmp_path, monkeypatch):
    monkeypatch.setenv("TBDKIT_VENVS", str(tmp_path / "no-stacks"))  # nothing can train
    monkeypatch.delenv("TBDKIT_RESULTS", raising=False)
    monkeypatch.chdir(tmp_path)
    for c in (cli_console.console, cli_console.err_console):  # one line per sentence: nothing wraps the text
        monkeypatch.setattr(c, "_width", 4000)


FORMS = (PAYLOAD, PAYLOAD.replace("/", ""))  # as typed, and as a folder's name (which holds no "/")


def shown_whole(output: str) -> None:
    """Wherever the output shows PAYLOAD's first word, it shows all of it (markup never eats a part), and
    never with an escaping backslash."""
    flat = " ".join(output.split())
    assert flat.count("tbdx") == sum(flat.count(f) for f in FORMS), output
    assert "\\[" not in output, f"an escaped bracket is shown: {output}"


def check(result, args) -> str:
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        text = "".join(traceback.format_exception(result.exception))
        raise AssertionError(f"tbdkit {' '.join(args)} raised:\n{text}\n{result.output}")
    assert "Traceback" not in result.output, (args, result.output)
    shown_whole(result.output)
    return result.output


TEXT_PARAMETERS = text_parameters()


def test_every_text_parameter_is_driven():
    assert {c for c, _ in TEXT_PARAMETERS} <= set(BASE), "a command with text parameters has no BASE invocation"
    assert set(NOT_DRIVEN) <= set(TEXT_PARAMETERS)


@pytest.mark.parametrize(("command", "parameter"), [p for p in TEXT_PARAMETERS if p not in NOT_DRIVEN])
def test_markup_in_a_text_parameter_is_shown_as_typed(hostile, no_stacks, tmp_path, command, parameter):
    values = {k: v.format(work=tmp_path, **hostile) for k, v in BASE[command].items()}
    values[parameter] = PAYLOAD
    args = argv(command, values)
    check(CliRunner().invoke(app, args), args)


@pytest.mark.parametrize("args", [["runs", "-r", "{results}"], ["show", "{run}", "-r", "{results}"],
                                  ["show", "last", "-r", "{results}"], ["report", "{results}", "-o", "{work}/rep"]])
def test_a_run_holding_markup_is_shown_as_it_holds_it(hostile, no_stacks, tmp_path, args):
    """The run's own fields (its folder's name, device, unit, precision, reasons) in tables and lines."""
    args = [a.format(work=tmp_path, **hostile) for a in args]
    out = " ".join(check(CliRunner().invoke(app, args), args).split())
    assert args[0] == "report" or sum(out.count(f) for f in FORMS) >= (2 if args[0] == "runs" else 6), out


def test_a_results_folder_named_with_markup_prints_its_table(no_stacks, tmp_path):
    """`runs -r 'res [/old]'` and a bench's table of runs in a folder named so (its run ids hold no markup)."""
    results = tmp_path / PAYLOAD
    make_run(results, "deepspeech2", "pytorch", 2, 10.0)
    out = check(CliRunner().invoke(app, ["runs", "-r", str(results)]), ["runs"])
    assert "deepspeech2" in out
    with cli_console.console.capture() as captured:
        cli_console.console.print(cli_console.results_table([
            {"run_id": f"x-{PAYLOAD}", "framework": PAYLOAD, "batch_size": 2, "precision": PAYLOAD, "device": PAYLOAD,
             "status": PAYLOAD, "metrics": {"throughput": {"value": 1.0, "unit": PAYLOAD, "ci95_relative": 0.01}},
             "window": {"iterations": 3, "seconds": 1.0, "stop_reason": PAYLOAD}}], title=PAYLOAD))
        cli_console.console.print(cli_console.convergence_table([
            {"run_id": PAYLOAD, "framework": PAYLOAD, "batch_size": 2, "device": PAYLOAD, "status": PAYLOAD,
             "convergence": {"quality_metric": PAYLOAD}, "error": PAYLOAD}], title=PAYLOAD))
        state = {"sweep_id": PAYLOAD, "spec": {"model": PAYLOAD, "preset": PAYLOAD, "repeat": 1, "cv_limit": 0.05,
                                              "batches": [2], "frameworks": [PAYLOAD], "precisions": [PAYLOAD]},
                 "groups": {}, "points": {"p": {"framework": PAYLOAD, "precision": PAYLOAD, "batch": 2,
                                                "status": PAYLOAD}}}
        cli_console.console.print(grid_table(state, PAYLOAD))  # a sweep.json's texts
        summary = {"run_id": "r", "framework": PAYLOAD, "batch_size": 2, "device": "cpu",
                   "metrics": {"throughput": {"value": 1.0, "unit": "samples/s"}}, "wall_s": 10.0}
        cli_console.console.print(cost_table([summary], tmp_path, cost.Prices({"*": 2.0}, PAYLOAD, PAYLOAD, PAYLOAD)))
    shown_whole(captured.get())
    assert captured.get().count(PAYLOAD) >= 16


def test_a_run_s_progress_lines_show_markup_as_typed(no_stacks):
    """The live progress of a run labelled with markup: its description, phase, rate and warnings."""
    with cli_console.console.capture() as captured:
        with cli_console.make_progress() as progress:
            shown = cli_console.RunProgress(progress, PAYLOAD, PAYLOAD)
            for event in ({"event": "phase", "phase": PAYLOAD}, {"event": "warning", "message": PAYLOAD},
                          {"event": "progress", "throughput": 1.0, "elapsed_s": 1},
                          {"event": "warmup_done", "iterations": 1, "seconds": 1.0, "end_reason": PAYLOAD},
                          {"event": "done", "status": PAYLOAD}):
                shown(event)
        with cli_console.console.status(PAYLOAD):
            cli_console.console.print(PAYLOAD)
    shown_whole(captured.get())
    assert captured.get().count(PAYLOAD) >= 6
