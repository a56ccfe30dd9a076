"""Fig. 4 keeps equal points of different lines visible (own marker, set apart, translucent); Fig. 8's panels
share one y-axis, and the notes under its panels are legible."""

from __future__ import annotations

from report_fixtures import make_run
from tbdkit.report import figures, runs as runs_mod

MiB = 2**20


def test_fig4_lines_with_equal_values_stay_apart(tmp_path):
    for framework in ("pytorch", "tensorflow", "mxnet"):
        for batch in (4, 8, 16):
            make_run(tmp_path, "deepspeech2", framework, batch, 2.0 * batch)  # the same value on each framework
    fig = figures.throughput_vs_batch(runs_mod.load(tmp_path))
    lines = [ln for ln in fig.figure.axes[0].lines if ln.get_marker() != "_"]  # not the error bars' caps
    assert len(lines) == 3
    assert len({tuple(ln.get_xdata()) for ln in lines}) == 3  # not drawn on top of each other
    assert len({ln.get_marker() for ln in lines}) == 3 and all(ln.get_alpha() < 1 for ln in lines)
    for ln in lines:  # near their batch size: within 10% on the log axis
        assert all(abs(x / b - 1) < 0.1 for x, b in zip(ln.get_xdata(), (4, 8, 16)))


def test_fig8_panels_share_a_y_axis_and_notes_are_legible(tmp_path):
    small = {"weights": 10 * MiB, "weight_gradients": 10 * MiB, "feature_maps": 40 * MiB, "workspace": None,
             "dynamic": None}
    big = {**small, "feature_maps": 900 * MiB}
    for batch in (4, 8):
        make_run(tmp_path, "deepspeech2", "pytorch", batch, 10.0, memory=small)
        make_run(tmp_path, "resnet50", "pytorch", batch, 10.0, memory=big)
    fig = figures.memory_breakdown(runs_mod.load(tmp_path))
    a, b = fig.figure.axes[0], fig.figure.axes[1]
    assert a.get_ylim() == b.get_ylim() and a.get_shared_y_axes().joined(a, b)
    notes = [t for ax in (a, b) for t in ax.texts if t.get_text().startswith("not measured here")]
    assert notes and all(t.get_fontsize() >= 8 for t in notes)
    assert "share one y-axis" in fig.caption
