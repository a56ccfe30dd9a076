"""Rich rendering for the CLI: the live progress of runs and the results tables.

Every string these consoles print is shown as it is: a model, a folder's name, a run's field or an error
sentence quoting what the user typed is never read as Rich markup (`[/x]` would crash, `[draft]` vanish) or
as an emoji code. The kit's own colours are the one exception, and come only from styled(), which fills a
template of the kit's markup with values escaped.

Nor does a string reach the terminal as a control sequence: a run id, an error sentence or a path read from a
file may hold ESC, a cursor move or a C1 control (`\x1b[2J` clears the screen, `\x1b[8m` hides what follows).
PlainConsole.render drops every control character from the text it renders (tab and newline stay), for every
command at once; only Rich's own control segments (the live bars' cursor moves) and its styles pass.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.segment import Segment
from rich.status import Status
from rich.table import Table
from rich.text import Text

from tbdkit.bench.progress import Bar, Level, Notifier
from tbdkit.core.statistics import STRETCH_ITERATIONS_MARGIN
from tbdkit.launch.base import EventHandler
from tbdkit.results.readers import MAX_ITERATIONS, count, finite
from tbdkit.spec.run_spec import MAX_PHASE_S

# C0 controls but tab and newline, DEL and C1 controls (0x9b is a one-byte CSI to some terminals).
CONTROLS = dict.fromkeys([*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)])


def without_controls(text: str) -> str:
    """`text` with no character a terminal would act on rather than show (tab and newline kept)."""
    return text.translate(CONTROLS)


class PlainConsole(Console):
    """A console on which a string is text: no markup, no emoji codes, no control sequences, in lines,
    tables (their titles and cells) and the spinner of status() alike."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(markup=False, emoji=False, **kwargs)

    def render(self, renderable: Any, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        """Rich's segments with every control character dropped from their text (a terminal shows the rest,
        as Rich measured it: a control character takes no cell); Rich's own control segments pass."""
        for segment in super().render(renderable, options):
            if segment.control:
                yield segment
            else:
                text = segment.text
                yield segment if text.isprintable() else Segment(without_controls(text), segment.style)

    def status(self, status: RenderableType, **kwargs: Any) -> Status:
        return super().status(Text(status) if isinstance(status, str) else status, **kwargs)  # a spinner reads markup


def styled(template: str, *values: object) -> Text:
    """The kit's own markup in `template` (e.g. "[red]{}: {}[/]") with each `{}` filled by a value shown as
    it is, whatever it holds."""
    return Text.from_markup(template.format(*(escape(str(v)) for v in values)))


console = PlainConsole(width=None if sys.stdout.isatty() else 160)
err_console = PlainConsole(stderr=True, width=None if sys.stderr.isatty() else 160)

PHASE_LABEL = {"setup": "setup", "compile": "compiling", "warmup": "warm-up", "measuring": "measuring"}


class RunProgress:
    """One progress bar per run: phase, time against the phase's cap, live throughput."""

    def __init__(self, progress: Progress, label: str, unit: str) -> None:
        self.progress = progress
        self.label = label
        self.unit = unit
        self.task = progress.add_task(label, total=None, phase="setup", rate="")

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "phase":
            phase = PHASE_LABEL.get(event["phase"], event["phase"])
            self.progress.update(self.task, phase=phase, total=event.get("cap_s"), completed=0)
            if not self.progress.console.is_terminal:
                self.progress.console.print(f"  {self.label}: {phase}")
        elif kind == "progress":
            rate = event.get("throughput")
            ci = event.get("ci_relative")
            text = f"{rate:,.2f} {self.unit}" if rate is not None else ""
            if ci is not None:
                text += f" ±{ci:.1%}"
            if event.get("quality") is not None:  # the converge preset's evaluations
                text += f"  quality {event['quality']:.4f}"
            cap = {"total": event["cap_s"]} if event.get("cap_s") is not None else {}  # a warm-up's cap that stretched
            self.progress.update(self.task, completed=event.get("elapsed_s", 0), rate=text, **cap)
        elif kind == "compile_done":
            self.progress.console.print(
                f"  {self.label}: compile phase ended after {event['iterations']} iterations "
                f"({event['seconds']:.1f} s, {event['end_reason']})"
            )
        elif kind == "warmup_done":
            self.progress.console.print(
                f"  {self.label}: warm-up ended after {event['iterations']} iterations "
                f"({event['seconds']:.1f} s, {event['end_reason']})"
            )
        elif kind == "warning":  # the launcher's one sentence (e.g. where a refused summary was kept)
            self.progress.console.print(styled("  {}: [yellow]{}[/]", self.label, event.get("message")))
        elif kind == "interrupt":
            self.progress.console.print(f"  {self.label}: stopping (Ctrl-C again to stop at once)")
        elif kind == "done":
            self.progress.update(self.task, phase=event["status"], total=1, completed=1)
            if not self.progress.console.is_terminal:
                self.progress.console.print(f"  {self.label}: {event['status']}")


def make_progress(quiet_stdout: bool = False, eta: bool = False) -> Progress:
    """The runs' live progress (with the time left where `eta`); on stderr when stdout carries
    machine-readable output (--json). A task's description and fields are text, never markup."""
    left: list[ProgressColumn] = [TextColumn("ETA"), TimeRemainingColumn()] if eta else []
    return Progress(
        TextColumn("{task.description}", style="bold", markup=False),
        TextColumn("{task.fields[phase]}", style="cyan", markup=False),
        BarColumn(),
        TimeElapsedColumn(),
        *left,
        TextColumn("{task.fields[rate]}", markup=False),
        console=err_console if quiet_stdout else console,
        transient=False,
    )


STYLE = {"warning": "yellow", "error": "red"}


class _RichBar:
    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress = progress
        self.task = task

    def update(self, *, advance: int = 0, phase: str | None = None, note: str | None = None) -> None:
        fields: dict[str, Any] = {k: v for k, v in {"phase": phase, "rate": note}.items() if v is not None}
        self.progress.update(self.task, advance=advance, **fields)


class RichNotifier:
    """tbdkit.bench.progress.Notifier on the terminal: the live bars start with the first run or bar;
    a message before them goes to the console (warnings and errors to stderr), after them above the bars."""

    def __init__(self, quiet_stdout: bool = False, eta: bool = False) -> None:
        self.quiet_stdout = quiet_stdout
        self.progress = make_progress(quiet_stdout, eta)
        self.started = False

    def _live(self) -> Progress:
        if not self.started:
            self.progress.start()
            self.started = True
        return self.progress

    def say(self, text: str, level: Level = "info") -> None:
        where = self.progress.console if self.started or level == "info" else err_console
        where.print(Text(text, style=STYLE.get(level, "")), highlight=False)

    def busy(self, text: str) -> AbstractContextManager[object]:
        if not self.started:
            return (err_console if self.quiet_stdout else console).status(text)
        return self._task(text)

    @contextlib.contextmanager
    def _task(self, text: str) -> Iterator[None]:
        task = self.progress.add_task(text, total=None, phase="", rate="")
        try:
            yield
        finally:
            self.progress.remove_task(task)

    def run(self, label: str, unit: str) -> EventHandler:
        return RunProgress(self._live(), label, unit)

    def bar(self, description: str, total: int, completed: int) -> Bar:
        progress = self._live()
        return _RichBar(progress, progress.add_task(description, total=total, completed=completed, phase="", rate=""))

    def stop(self) -> None:
        if self.started:
            self.progress.stop()


@contextlib.contextmanager
def live(quiet_stdout: bool = False, eta: bool = False) -> Iterator[Notifier]:
    """The command line's display for tbdkit.bench.progress (installed by tbdkit.cli.main)."""
    notifier = RichNotifier(quiet_stdout, eta)
    try:
        yield notifier
    finally:
        notifier.stop()


def _fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{suffix}"


WARMUP_CAPS = {"time_cap": "time cap", "iteration_cap": "iteration cap"}


def warmup_cell(warmup: dict[str, Any]) -> Text:
    """The results table's warm-up cell: whether the rule ended it ('stable') or a cap did ('capped',
    in yellow; `tbdkit show` says which cap, after how many iterations)."""
    reason = (warmup or {}).get("end_reason")
    if reason is None:
        return Text("—")
    return Text("stable") if reason == "stable" else Text("capped", style="yellow")


def warmup_capped(warmup: dict[str, Any]) -> bool:
    """Whether a cap, not the rule, ended the warm-up."""
    return warmup.get("end_reason") not in (None, "stable")


def warmup_note(warmup: dict[str, Any]) -> str | None:
    """A sentence for a warm-up that a cap ended (None when the rule judged it stable)."""
    if not warmup_capped(warmup or {}):
        return None
    reason = warmup["end_reason"]
    iterations, seconds = _iterations(warmup.get("iterations")), finite(warmup.get("seconds"))
    return (
        f"warm-up capped: its {WARMUP_CAPS.get(str(reason), str(reason))} ended it after "
        f"{'?' if iterations is None else iterations} iterations{'' if seconds is None else f' ({seconds:.1f} s)'} "
        "before the rule judged the iteration cost stable, so the window may include the end of a warm-up drift"
        + _warmup_need(warmup)
    )


def _iterations(value: Any) -> int | None:
    """A summary's count of iterations (readers.count), or None where it is none."""
    return count(value, MAX_ITERATIONS)


def _warmup_need(warmup: dict[str, Any]) -> str:
    """Why the rule could not judge within the cap, in parentheses ('' if unrecorded)."""
    why = warmup_why(warmup)
    return f" ({why})" if why else ""


def warmup_why(warmup: dict[str, Any]) -> str:
    """Why the rule could not judge within the cap: the cost's noise, whose it was, and the iterations that noise
    needs ('' if unrecorded)."""
    noise = finite(warmup.get("cost_noise"))
    if noise is None:
        return ""
    needed = warmup.get("iterations_needed")
    if needed is None:
        need = "; at that noise the rule needs more than its look-back holds"
    elif _iterations(needed) is not None:
        need = f"; at that noise the rule needs about {needed} iterations" + _warmup_room(warmup)
    else:
        need = ""
    return f"its cost varied {noise:.1%} per iteration{_warmup_neighbours(warmup)}{need}"


def _warmup_room(warmup: dict[str, Any]) -> str:
    """The fixed cap that gives the rule room for its need (STRETCH_ITERATIONS_MARGIN x it, as a stretched cap
    would) at the warm-up's own pace, to give again ('' where the need or the pace is unrecorded, or where the
    iteration cap, not the time cap, ended it)."""
    needed, iterations = _iterations(warmup.get("iterations_needed")), _iterations(warmup.get("iterations"))
    seconds = finite(warmup.get("seconds"))
    if warmup.get("end_reason") != "time_cap" or needed is None or iterations is None or not (seconds and seconds > 0):
        return ""
    pace = seconds / iterations
    room = f"a cap with room for {STRETCH_ITERATIONS_MARGIN:g} times that, at {pace:.2g} s an iteration"
    total = STRETCH_ITERATIONS_MARGIN * needed * pace
    if not total <= MAX_PHASE_S:  # past an hour (a damaged file's pace: past any length)
        said = f" {math.ceil(total / 10) * 10:,} s," if total < MAX_PHASE_S * 1000 else ""
        return f"; {room}, would be{said} more than a warm-up cap may be ({MAX_PHASE_S:,.0f} s)"
    cap = math.ceil(total / 10) * 10
    return f"; {room}: make's MAX_WARMUP_S={cap} (--max-warmup-s {cap})"


def _warmup_neighbours(warmup: dict[str, Any]) -> str:
    """Whose noise it was: other processes' load on the run's cores over the warm-up ('' if unmeasured)."""
    foreign = warmup.get("foreign_cpu")
    if not isinstance(foreign, dict):
        return ""
    cores, limit = finite(foreign.get("value")), finite(foreign.get("limit"))
    if cores is None or limit is None:
        return ""
    if cores >= limit:
        return f" while other processes used {cores:.2f} of the run's cores"
    return f", with other processes using {cores:.2f} of its cores: the noise was this machine's own or the step's"


def _compiled_in(metrics: dict[str, Any]) -> str:
    """'; compile 63.1 s' after a compiled run's window, else ''."""
    value = (metrics.get("compile_s") or {}).get("value")
    return f"; compile {value:,.1f} s" if value is not None else ""


def results_table(summaries: list[dict[str, Any]], title: str = "Results") -> Table:
    table = Table(title=title)
    for col in (
        "framework",
        "batch",
        "precision",
        "device",
        "status",
        "throughput",
        "±95%",
        "samples/s",
        "CPU util",
        "GPU util",
        "warm-up",
        "window",
        "run",
    ):
        left = col in ("framework", "status", "device", "run", "warm-up", "window")
        table.add_column(
            col,
            justify="left" if left else "right",
            no_wrap=col in ("framework", "precision", "device", "status", "samples/s", "run", "throughput", "warm-up"),
        )
    capped: list[str] = []  # per capped warm-up, the caption's line for it: the run and why ('' where unrecorded)
    for s in summaries:
        m = s.get("metrics") or {}
        thr = m.get("throughput") or {}
        window = s.get("window") or {}
        status = s.get("status", "?")
        style = {"ok": "green", "disturbed": "yellow", "oom": "yellow", "interrupted": "yellow"}.get(status, "red")
        rel = thr.get("ci95_relative")
        short = str(s.get("run_id") or "?").rsplit("-", 1)[-1]
        if warmup_capped(s.get("warmup") or {}):
            why = warmup_why(s["warmup"])
            capped.append(f"\n{short}: {why}" if why else "")
        table.add_row(
            str(s.get("framework", "?")),
            str(s.get("batch_size", "?")),
            str(s.get("precision") or "?") + (" compiled" if s.get("graph") == "compiled" else ""),
            str(s.get("device") or "—"),
            Text(str(status), style=style),
            f"{_fmt(thr.get('value'), 2)} {thr.get('unit') or ''}".strip(),
            _fmt(rel * 100 if rel is not None else None, 2, "%"),
            _fmt((m.get("sample_throughput") or {}).get("value"), 2),
            _fmt((m.get("cpu_utilization") or {}).get("value"), 1, "%"),
            _fmt((m.get("gpu_utilization") or {}).get("value"), 1, "%"),
            warmup_cell(s.get("warmup") or {}),
            (f"{window['iterations']} it, {window['seconds']:.1f} s, {window['stop_reason']}" if window else "—")
            + _compiled_in(m),
            short,
        )
    caption = Text("run: the id's last part; `tbdkit show <run>` shows one run, `tbdkit runs` lists full ids")
    if capped:
        caption.append(
            "\nwarm-up capped: a cap ended it before the rule judged the iteration cost stable; "
            "the window may include the end of a warm-up drift" + "".join(capped),
            style="yellow",
        )
    table.caption = caption
    return table


def convergence_table(summaries: list[dict[str, Any]], title: str = "Convergence") -> Table:
    """The converge preset's runs: the target, whether and when it was reached, the curve's file."""
    table = Table(title=title)
    for col in (
        "framework",
        "batch",
        "device",
        "status",
        "quality metric",
        "target",
        "first → best",
        "time to target",
        "evaluations",
        "run",
    ):
        table.add_column(col, justify="right" if col in ("batch", "target", "evaluations") else "left")
    for s in summaries:
        c = s.get("convergence") or {}
        ttt = (s.get("metrics") or {}).get("time_to_target") or {}
        status = s.get("status", "?")
        style = {"ok": "green", "interrupted": "yellow"}.get(status, "red")
        when = (
            f"{ttt['value']:,.0f} s ({ttt.get('steps')} steps)"
            if ttt.get("value") is not None
            else ttt.get("reason") or s.get("error") or "—"
        )
        table.add_row(
            str(s.get("framework", "?")),
            str(s.get("batch_size", "?")),
            str(s.get("device") or "—"),
            Text(str(status), style=style),
            str(c.get("quality_metric") or "—"),
            _fmt(c.get("target"), 3),
            f"{_fmt(c.get('first_quality'), 3)} → {_fmt(c.get('best_quality'), 3)}" if c else "—",
            str(when),
            str(c.get("evaluations", "—")),
            str(s.get("run_id") or "?").rsplit("-", 1)[-1],
        )
    table.caption = "training seconds exclude evaluations; the curve is each run's convergence.csv"
    return table
