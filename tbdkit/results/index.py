"""The results index: SQLite over results/<run-id>/ directories, rebuildable from them at any time.

The run directories are the truth; the index only makes listing and querying fast. Every read
reconciles it with the folder (a stat of each run's summary.json), so a run finished by a killed CLI,
a folder copied in or one removed shows as it is on disk; a lost or corrupt index is rebuilt by
scanning the directories. A damaged summary is listed as unreadable, never fatal. Rows hold each run's
folder name only, so a copied results folder reads its own runs; `Index.runs` gives each row's path
as the results folder joined once with that name (`Index.run_dir`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from tbdkit.results import files as runfiles
from tbdkit.results import summary as summaries

INDEX = "index.sqlite"
COLUMNS = {
    "run_id": "TEXT PRIMARY KEY",
    "status": "TEXT",
    "model": "TEXT",
    "framework": "TEXT",
    "batch_size": "INTEGER",
    "precision": "TEXT",
    "graph": "TEXT",
    "preset": "TEXT",
    "device": "TEXT",
    "throughput": "REAL",
    "throughput_unit": "TEXT",
    "ci95_relative": "REAL",
    "sample_throughput": "REAL",
    "gpu_utilization": "REAL",
    "cpu_utilization": "REAL",
    "started_utc": "TEXT",
    "error": "TEXT",
    "path": "TEXT",
    "world_size": "INTEGER",
    "nodes": "INTEGER",
    "link_rate": "TEXT",
}


# Sweep membership (results/sweeps/<sweep-id>/sweep.json, see tbdkit/bench/sweep.py): one row per point.
SWEEP_COLUMNS = {
    "sweep_id": "TEXT",
    "point": "TEXT",
    "run_id": "TEXT",
    "framework": "TEXT",
    "precision": "TEXT",
    "batch": "TEXT",
    "batch_size": "INTEGER",
    "repeat": "INTEGER",
    "status": "TEXT",
    "throughput": "REAL",
    "window_cv": "REAL",
    "group_throughput_cv": "REAL",
    "unstable": "INTEGER",
    "unstable_reason": "TEXT",
}


def sweep_rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    groups = state.get("groups") or {}
    rows = []
    for key, p in (state.get("points") or {}).items():
        group = groups.get(key.rsplit("/", 1)[0]) or {}
        rows.append(
            {
                "sweep_id": state.get("sweep_id"),
                "point": key,
                "run_id": p.get("run_id"),
                "framework": p.get("framework"),
                "precision": p.get("precision"),
                "batch": str(p.get("batch")),
                "batch_size": p.get("batch_size"),
                "repeat": p.get("repeat"),
                "status": p.get("status"),
                "throughput": p.get("throughput"),
                "window_cv": p.get("window_cv"),
                "group_throughput_cv": group.get("throughput_cv"),
                "unstable": int(bool(p.get("unstable"))),
                "unstable_reason": group.get("unstable_reason"),
            }
        )
    return rows


def _value(summary: dict[str, Any], name: str, key: str = "value") -> Any:
    return ((summary.get("metrics") or {}).get(name) or {}).get(key)


def row_of(run_dir: Path) -> dict[str, Any] | None:
    """The index row of one run directory, or None if it has no summary (still running, or lost).
    Raises summary.Unreadable if it has one that is not a summary."""
    try:
        summary = summaries.read(run_dir)
    except FileNotFoundError:
        return None
    return {
        "run_id": run_dir.name,
        "status": summary.get("status"),
        "model": summary.get("model"),
        "framework": summary.get("framework"),
        "batch_size": summary.get("batch_size"),
        "precision": summary.get("precision"),
        "graph": summary.get("graph") or "standard",
        "preset": summary.get("preset"),
        "device": summary.get("device"),
        "throughput": _value(summary, "throughput"),
        "throughput_unit": _value(summary, "throughput", "unit"),
        "ci95_relative": _value(summary, "throughput", "ci95_relative"),
        "sample_throughput": _value(summary, "sample_throughput"),
        "gpu_utilization": _value(summary, "gpu_utilization"),
        "cpu_utilization": _value(summary, "cpu_utilization"),
        "started_utc": summary.get("started_utc"),
        "error": summary.get("error"),
        "path": run_dir.name,
        "world_size": summary.get("world_size") or 1,
        "nodes": summary.get("nodes") or 1,
        "link_rate": summary.get("link_rate"),
    }


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any], replace: bool = True) -> None:
    conn.execute(
        f"INSERT {'OR REPLACE ' if replace else ''}INTO {table} ({', '.join(row)}) "
        f"VALUES ({', '.join('?' * len(row))})",
        list(row.values()),
    )


# ---------------------------------------------------------------- what is on disk

SWEEP_KEY = "sweeps/"  # keys of sweep states in the `seen` table: sweeps/<sweep-id>


def _stamp(path: Path) -> str | None:
    """A file's change stamp (mtime in ns and size), or None when it is not there."""
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"error:{exc.errno}"
    return f"{st.st_mtime_ns}:{st.st_size}"


def scan(results: Path) -> dict[str, str]:
    """Every run folder with a summary.json and every sweep state, by key, with its change stamp:
    what the index is reconciled against on each read (a stat per run, no file read)."""
    found: dict[str, str] = {}
    try:
        entries = sorted(results.iterdir())
    except OSError:
        return found
    for d in entries:
        if d.name.startswith(".") or d.name == runfiles.SWEEPS or d.is_symlink() or not d.is_dir():
            continue
        stamp = _stamp(d / summaries.SUMMARY)
        if stamp is not None:
            found[d.name] = stamp
    try:
        sweeps = sorted((results / runfiles.SWEEPS).iterdir()) if (results / runfiles.SWEEPS).is_dir() else []
    except OSError:
        sweeps = []
    for d in sweeps:
        stamp = _stamp(d / runfiles.SWEEP_STATE) if d.is_dir() and not d.is_symlink() else None
        if stamp is not None:
            found[SWEEP_KEY + d.name] = stamp
    return found


def _bindable(value: Any) -> Any:
    """A value SQLite can store: numbers and text as they are, anything else as its JSON text."""
    if value is None or isinstance(value, (str, float)) or (isinstance(value, int) and abs(value) < 2**63):
        return value
    return json.dumps(value, default=str)


def _sweep_rows_of(path: Path, key: str) -> list[dict[str, Any]]:
    """The rows of one sweep state file; summaries.Unreadable naming it if it is not one."""
    where = f"{key}/{runfiles.SWEEP_STATE}"
    try:
        state = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise summaries.Unreadable(where, f"not readable JSON ({str(exc).splitlines()[0][:120]})") from None
    if (
        not isinstance(state, dict)
        or not isinstance(state.get("points") or {}, dict)
        or not isinstance(state.get("groups") or {}, dict)
        or not all(isinstance(p, dict) for p in (state.get("points") or {}).values())
        or not all(isinstance(g, dict) for g in (state.get("groups") or {}).values())
    ):
        raise summaries.Unreadable(where, "not a sweep state (an object whose points and groups are objects)")
    state = {
        **state,
        "sweep_id": state.get("sweep_id") if isinstance(state.get("sweep_id"), str) else key[len(SWEEP_KEY) :],
    }
    return [{k: _bindable(v) for k, v in row.items()} for row in sweep_rows(state)]


def _drop(conn: sqlite3.Connection, key: str) -> None:
    conn.execute("DELETE FROM seen WHERE key = ?", [key])
    if key.startswith(SWEEP_KEY):
        conn.execute("DELETE FROM sweep_points WHERE source = ?", [key])
    else:
        conn.execute("DELETE FROM runs WHERE run_id = ?", [key])


def _take(conn: sqlite3.Connection, results: Path, key: str, stamp: str) -> None:
    """(Re)index one run folder or sweep state; a damaged one is remembered as unreadable."""
    _drop(conn, key)
    why = None
    try:
        if key.startswith(SWEEP_KEY):
            for point in _sweep_rows_of(results / key / runfiles.SWEEP_STATE, key):
                _insert(conn, "sweep_points", {**point, "source": key})
        else:
            row = row_of(results / key)
            if row is not None:
                _insert(conn, "runs", {k: _bindable(v) for k, v in row.items()})
    except summaries.Unreadable as exc:
        why = exc.why
    _insert(conn, "seen", {"key": key, "stamp": stamp, "unreadable": why})


# ---------------------------------------------------------------- the index

SCHEMA_VERSION = 4  # PRAGMA user_version: an index of another layout (or of older summary checks) is rebuilt
BUSY_TIMEOUT_S = 30.0
RETRIES = 20


def _schema(conn: sqlite3.Connection) -> None:
    cols = ", ".join(f"{k} {v}" for k, v in COLUMNS.items())
    conn.execute(f"CREATE TABLE IF NOT EXISTS runs ({cols})")
    sweep_cols = ", ".join(f"{k} {v}" for k, v in SWEEP_COLUMNS.items())
    conn.execute(f"CREATE TABLE IF NOT EXISTS sweep_points ({sweep_cols}, source TEXT, PRIMARY KEY (sweep_id, point))")
    conn.execute("CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, stamp TEXT, unreadable TEXT)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _transient(exc: sqlite3.OperationalError) -> bool:
    """Another process holds the database (busy, locked), or a rebuild renamed a new index over the
    file this connection had open (SQLite then calls it a readonly database): try again afresh."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text or "readonly database" in text


class Index:
    """The index of one results folder. Every read reconciles it with the folder first (new, changed
    and removed run folders and sweep states, by their files' change stamps), so it is never stale;
    paths are stored relative to the results folder. Where the folder cannot be written (read-only
    storage, an extracted bundle) the index is built in memory and nothing is written. A read never
    creates the results folder."""

    def __init__(self, results: Path) -> None:
        self.results = Path(results)
        self.path = self.results / INDEX
        self.unreadable: list[str] = []  # `unreadable: <folder>: <why>` of the last read, one per damaged run
        self.damaged: list[str] = []  # their folder names (keys)

    # -- connections

    def _writable(self) -> bool:
        if not self.results.is_dir() or not os.access(self.results, os.W_OK | os.X_OK):
            return False
        return not self.path.exists() or (self.path.is_file() and os.access(self.path, os.R_OK | os.W_OK))

    def _on_disk(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if version != SCHEMA_VERSION and tables:
                raise sqlite3.DatabaseError("an index of another layout")
            if not {"runs", "sweep_points", "seen"} <= tables:
                with conn:
                    _schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _in_memory(self) -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:")
        _schema(conn)
        return conn

    def _synced(self) -> sqlite3.Connection:
        """A connection to the index, reconciled with the folder; the caller closes it."""
        if not self._writable():
            memory = self._in_memory()
            self._sync(memory)
            return memory
        for attempt in range(RETRIES):
            conn: sqlite3.Connection | None = None
            try:
                conn = self._on_disk()
                self._sync(conn)
                return conn
            except sqlite3.OperationalError as exc:
                if conn is not None:
                    conn.close()
                if _transient(exc) and attempt < RETRIES - 1:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                break  # cannot write it after all (read-only, a full disk, I/O): read without writing
            except sqlite3.DatabaseError:  # corrupt, or another layout: rebuilt from the folders
                if conn is not None:
                    conn.close()
                try:
                    self.rebuild()
                except (OSError, sqlite3.Error):
                    break
        conn = self._in_memory()
        self._sync(conn)
        return conn

    def _sync(self, conn: sqlite3.Connection) -> None:
        on_disk = scan(self.results)
        known = dict(conn.execute("SELECT key, stamp FROM seen").fetchall())
        changed = [k for k, stamp in on_disk.items() if known.get(k) != stamp]
        gone = [k for k in known if k not in on_disk]
        if changed or gone:
            with conn:
                for key in gone:
                    _drop(conn, key)
                for key in changed:
                    _take(conn, self.results, key, on_disk[key])
        damaged = conn.execute("SELECT key, unreadable FROM seen WHERE unreadable IS NOT NULL ORDER BY key").fetchall()
        self.damaged = [key for key, _ in damaged]
        self.unreadable = [f"unreadable: {key}: {why}" for key, why in damaged]

    def _query(self, sql: str, args: list[Any]) -> list[dict[str, Any]]:
        with closing(self._synced()) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, args)]

    # -- writing

    def add(self, run_dir: Path) -> None:
        """Bring a finished run into the index (with anything else new in the folder)."""
        self._query("SELECT 1 FROM seen LIMIT 0", [])

    def add_sweep(self, state: dict[str, Any]) -> None:
        """Bring a sweep's points into the index from its saved sweep.json (with anything else new)."""
        self._query("SELECT 1 FROM seen LIMIT 0", [])

    def rebuild(self) -> int:
        """Recreate the index from the run directories into a new file renamed over the old one (a
        writer racing it retries on the new file); returns the number of runs indexed."""
        if not self._writable():
            with closing(self._in_memory()) as conn:
                self._sync(conn)
                return int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
        fd, tmp = tempfile.mkstemp(dir=self.results, prefix=f".{INDEX}.", suffix=".tmp")
        os.close(fd)
        try:
            with closing(sqlite3.connect(tmp)) as conn:
                _schema(conn)
                self._sync(conn)
                count = int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
            os.replace(tmp, self.path)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return count

    # -- reading

    def sweep_points(self, sweep_id: str | None = None) -> list[dict[str, Any]]:
        cols = ", ".join(SWEEP_COLUMNS)
        query, args = f"SELECT {cols} FROM sweep_points", []
        if sweep_id:
            query, args = query + " WHERE sweep_id = ?", [sweep_id]
        return self._query(query + " ORDER BY sweep_id, point", args)

    def run_dir(self, run_id: str) -> Path:
        """A run's folder: the results folder as given (relative ones stay relative to the working
        folder) joined once with the run's folder name. The one place the index makes a run's path;
        a reader uses it as it is, never joined with the results folder again."""
        return self.results / run_id

    def runs(self, model: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Rows of the index, each with `path` the run folder's path (`run_dir`), usable as it is."""
        query, args = "SELECT * FROM runs WHERE 1=1", list[str]()
        if model:
            query, args = query + " AND model = ?", [*args, model]
        if status:
            query, args = query + " AND status = ?", [*args, status]
        rows = self._query(query + " ORDER BY run_id", args)
        for r in rows:
            r["path"] = str(self.run_dir(r["run_id"]))
        return rows

    def find(self, ref: str) -> Path | None:
        """A run directory by its id, a unique prefix or suffix of it, or 'last': the run that started
        last (its summary's started_utc; the id breaks ties and orders runs that recorded no start)."""
        runs = self.runs()
        if ref == "last" and runs:
            return Path(max(runs, key=lambda r: (str(r.get("started_utc") or ""), r["run_id"]))["path"])
        # damaged runs are found too: reading one then says what is wrong with it
        ids = [r["run_id"] for r in runs] + [k for k in self.damaged if not k.startswith(SWEEP_KEY)]
        hits = [i for i in ids if i == ref] or [i for i in ids if i.startswith(ref) or i.endswith(ref)]
        return self.run_dir(hits[0]) if len(hits) == 1 else None
