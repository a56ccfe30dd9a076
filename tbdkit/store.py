"""The results index: SQLite over results/<run-id>/ directories, rebuildable from them at any time.

The run directories are the truth; the index only makes listing and querying fast. A lost or
corrupt index is rebuilt by scanning the directories.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

INDEX = "index.sqlite"
COLUMNS = {
    "run_id": "TEXT PRIMARY KEY", "status": "TEXT", "model": "TEXT", "framework": "TEXT",
    "batch_size": "INTEGER", "precision": "TEXT", "preset": "TEXT", "device": "TEXT",
    "throughput": "REAL", "throughput_unit": "TEXT", "ci95_relative": "REAL",
    "sample_throughput": "REAL", "gpu_utilization": "REAL", "cpu_utilization": "REAL",
    "started_utc": "TEXT", "error": "TEXT", "path": "TEXT",
    "world_size": "INTEGER", "nodes": "INTEGER", "link_rate": "TEXT",
}


# Sweep membership (results/sweeps/<sweep-id>/sweep.json, see tbdkit/sweep.py): one row per point.
SWEEP_COLUMNS = {
    "sweep_id": "TEXT", "point": "TEXT", "run_id": "TEXT", "framework": "TEXT", "precision": "TEXT",
    "batch": "TEXT", "batch_size": "INTEGER", "repeat": "INTEGER", "status": "TEXT", "throughput": "REAL",
    "window_cv": "REAL", "group_throughput_cv": "REAL", "unstable": "INTEGER", "unstable_reason": "TEXT",
}


def sweep_rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    groups = state.get("groups") or {}
    rows = []
    for key, p in (state.get("points") or {}).items():
        group = groups.get(key.rsplit("/", 1)[0]) or {}
        rows.append({"sweep_id": state.get("sweep_id"), "point": key, "run_id": p.get("run_id"),
                     "framework": p.get("framework"), "precision": p.get("precision"), "batch": str(p.get("batch")),
                     "batch_size": p.get("batch_size"), "repeat": p.get("repeat"), "status": p.get("status"),
                     "throughput": p.get("throughput"), "window_cv": p.get("window_cv"),
                     "group_throughput_cv": group.get("throughput_cv"), "unstable": int(bool(p.get("unstable"))),
                     "unstable_reason": group.get("unstable_reason")})
    return rows


def _value(summary: dict[str, Any], name: str, key: str = "value") -> Any:
    return ((summary.get("metrics") or {}).get(name) or {}).get(key)


def row_of(run_dir: Path) -> dict[str, Any] | None:
    """The index row of one run directory, or None if it has no summary (still running, or lost)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return {
        "run_id": run_dir.name, "status": summary.get("status"), "model": summary.get("model"),
        "framework": summary.get("framework"), "batch_size": summary.get("batch_size"),
        "precision": summary.get("precision"), "preset": summary.get("preset"), "device": summary.get("device"),
        "throughput": _value(summary, "throughput"), "throughput_unit": _value(summary, "throughput", "unit"),
        "ci95_relative": _value(summary, "throughput", "ci95_relative"),
        "sample_throughput": _value(summary, "sample_throughput"),
        "gpu_utilization": _value(summary, "gpu_utilization"), "cpu_utilization": _value(summary, "cpu_utilization"),
        "started_utc": summary.get("started_utc"), "error": summary.get("error"), "path": str(run_dir.resolve()),
        "world_size": summary.get("world_size") or 1, "nodes": summary.get("nodes") or 1,
        "link_rate": summary.get("link_rate"),
    }


def _insert(conn: sqlite3.Connection, row: dict[str, Any]) -> None:
    conn.execute(f"INSERT OR REPLACE INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                 list(row.values()))


class Index:
    def __init__(self, results: Path) -> None:
        self.results = Path(results)
        self.path = self.results / INDEX

    def _connect(self) -> sqlite3.Connection:
        self.results.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        cols = ", ".join(f"{k} {v}" for k, v in COLUMNS.items())
        conn.execute(f"CREATE TABLE IF NOT EXISTS runs ({cols})")
        sweep_cols = ", ".join(f"{k} {v}" for k, v in SWEEP_COLUMNS.items())
        conn.execute(f"CREATE TABLE IF NOT EXISTS sweep_points ({sweep_cols}, PRIMARY KEY (sweep_id, point))")
        return conn

    def _healthy(self) -> bool:
        if not self.path.is_file():
            return False
        try:
            with closing(sqlite3.connect(self.path)) as conn:
                conn.execute("SELECT run_id FROM runs LIMIT 1").fetchall()
                present = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
            return set(COLUMNS) <= present  # an index of an older kit is rebuilt with today's columns
        except sqlite3.DatabaseError:
            return False

    def add(self, run_dir: Path) -> None:
        row = row_of(run_dir)
        if row is None:
            return
        if not self._healthy():
            self.rebuild()
            return
        with closing(self._connect()) as conn, conn:
            _insert(conn, row)

    def rebuild(self) -> int:
        """Recreate the index from the run directories; returns the number of runs indexed."""
        self.path.unlink(missing_ok=True)
        rows = [r for d in sorted(self.results.iterdir()) if d.is_dir() and (r := row_of(d))] \
            if self.results.is_dir() else []
        with closing(self._connect()) as conn, conn:
            for row in rows:
                _insert(conn, row)
        for state_file in sorted(self.results.glob("sweeps/*/sweep.json")):
            try:
                self.add_sweep(json.loads(state_file.read_text()))
            except (OSError, json.JSONDecodeError):
                continue
        return len(rows)

    def add_sweep(self, state: dict[str, Any]) -> None:
        """Record (replace) one sweep's points: which run each is, and whether it is unstable."""
        with closing(self._connect()) as conn, conn:
            conn.execute("DELETE FROM sweep_points WHERE sweep_id = ?", [state.get("sweep_id")])
            for row in sweep_rows(state):
                conn.execute(f"INSERT INTO sweep_points ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             list(row.values()))

    def sweep_points(self, sweep_id: str | None = None) -> list[dict[str, Any]]:
        if not self._healthy():
            self.rebuild()
        query, args = "SELECT * FROM sweep_points", []
        if sweep_id:
            query, args = query + " WHERE sweep_id = ?", [sweep_id]
        with closing(self._connect()) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(query + " ORDER BY sweep_id, point", args)]

    def runs(self, model: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        if not self._healthy():
            self.rebuild()
        query, args = "SELECT * FROM runs WHERE 1=1", []
        if model:
            query, args = query + " AND model = ?", [*args, model]
        if status:
            query, args = query + " AND status = ?", [*args, status]
        with closing(self._connect()) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(query + " ORDER BY run_id", args)]

    def find(self, ref: str) -> Path | None:
        """A run directory by its id, a unique prefix or suffix of it, or 'last'."""
        runs = self.runs()
        if ref == "last" and runs:
            return Path(max(runs, key=lambda r: r["run_id"])["path"])
        hits = [r for r in runs if r["run_id"] == ref] or \
               [r for r in runs if r["run_id"].startswith(ref) or r["run_id"].endswith(ref)]
        return Path(hits[0]["path"]) if len(hits) == 1 else None
