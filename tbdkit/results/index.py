"""The results index: SQLite over results/<run-id>/ directories, rebuildable from them at any time.

The run directories are the truth; the index only makes listing and querying fast. Every read
reconciles it with the folder (a stat of each run's summary.json), so a run finished by a killed CLI,
a folder copied in or one removed shows as it is on disk; a lost or corrupt index is rebuilt by
scanning the directories. A row without a folder is dropped, and a row that differs from what its file
gave (a digest per folder, kept beside its stamp) is taken again from the file, so the index never
shows a value its summary contradicts. `add` takes one run (a sweep holds one connection for all its
points); another process holding the index is waited for at most WAIT_S, then the folders are read.
A damaged summary is listed as unreadable, never fatal. Rows hold each run's
folder name only, so a copied results folder reads its own runs; `Index.runs` gives each row's path
as the results folder joined once with that name (`Index.run_dir`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from tbdkit.core import atomic
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
    _insert(conn, "seen", {"key": key, "stamp": stamp, "unreadable": why, "digest": _digest_of(conn, key)})


# ---------------------------------------------------------------- the index

SCHEMA_VERSION = 5  # PRAGMA user_version: an index of another layout (or of older summary checks) is rebuilt
BUSY_TIMEOUT_S = 1.0  # SQLite's own wait for a lock, per attempt
WAIT_S = 10.0  # the longest any call waits for another process holding the index; then the folders are read


def _schema(conn: sqlite3.Connection) -> None:
    cols = ", ".join(f"{k} {v}" for k, v in COLUMNS.items())
    conn.execute(f"CREATE TABLE IF NOT EXISTS runs ({cols})")
    sweep_cols = ", ".join(f"{k} {v}" for k, v in SWEEP_COLUMNS.items())
    conn.execute(f"CREATE TABLE IF NOT EXISTS sweep_points ({sweep_cols}, source TEXT, PRIMARY KEY (sweep_id, point))")
    conn.execute("CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, stamp TEXT, unreadable TEXT, digest TEXT)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _transient(exc: sqlite3.OperationalError) -> bool:
    """Another process holds the database (busy, locked), or a rebuild renamed a new index over the
    file this connection had open (SQLite then calls it a readonly database): try again afresh."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text or "readonly database" in text


def _digests(conn: sqlite3.Connection) -> dict[str, str]:
    """Each key's rows as the index holds them, as one digest: what `seen` recorded when the key was
    taken from its file, so a row changed or added in the index itself (not by its folder) is caught."""
    held: dict[str, list[str]] = {}
    for row in conn.execute(f"SELECT {', '.join(COLUMNS)} FROM runs ORDER BY run_id"):
        held.setdefault(str(row[0]), []).append(repr(row))
    for row in conn.execute(f"SELECT source, {', '.join(SWEEP_COLUMNS)} FROM sweep_points ORDER BY source, point"):
        held.setdefault(str(row[0]), []).append(repr(row[1:]))
    return {key: hashlib.sha256("\n".join(rows).encode()).hexdigest() for key, rows in held.items()}


def _digest_of(conn: sqlite3.Connection, key: str) -> str | None:
    """The digest `_digests` gives one key, from that key's rows only."""
    rows = [repr(r) for r in conn.execute(f"SELECT {', '.join(COLUMNS)} FROM runs WHERE run_id = ?", [key])]
    sweep = f"SELECT {', '.join(SWEEP_COLUMNS)} FROM sweep_points WHERE source = ? ORDER BY point"
    rows += [repr(r) for r in conn.execute(sweep, [key])]
    return hashlib.sha256("\n".join(rows).encode()).hexdigest() if rows else None


class Index:
    """The index of one results folder. Every read reconciles it with the folder first (new, changed
    and removed run folders and sweep states, by their files' change stamps; rows without a folder and
    rows that differ from what their file gave), so it is never stale and never says what a summary
    contradicts; paths are stored relative to the results folder. Where the folder cannot be written
    (read-only storage, an extracted bundle), or another process holds the index longer than WAIT_S,
    the index is built in memory from the folders and nothing is written. A read never creates the
    results folder. Used as a context manager (`with Index(results) as index:`) it keeps one
    connection for all its calls (a sweep's points); otherwise each call opens and closes its own.
    `notify` hears, once, that another process holds the index and how long this one waits."""

    def __init__(self, results: Path, notify: Callable[[str], None] | None = None) -> None:
        self.results = Path(results)
        self.path = self.results / INDEX
        self.notify = notify
        self.unreadable: list[str] = []  # `unreadable: <folder>: <why>` of the last read, one per damaged run
        self.damaged: list[str] = []  # their folder names (keys)
        self._held: sqlite3.Connection | None = None
        self._keep = False

    def __enter__(self) -> Index:
        self._keep = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._keep = False
        self.close()

    def close(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None

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

    def _connection(self) -> sqlite3.Connection:
        if self._held is None:
            self._held = self._on_disk()
        return self._held

    def _release(self, conn: sqlite3.Connection, failed: bool) -> None:
        """Done with a connection: the held one is kept for the next call inside `with` unless it failed."""
        if conn is self._held and self._keep and not failed:
            return
        conn.close()
        if conn is self._held:
            self._held = None

    def _on_index(self, work: Callable[[sqlite3.Connection], Any], keep: bool = False) -> tuple[bool, Any]:
        """`work` on the index on disk, waiting at most WAIT_S for another process that holds it (said
        once to `notify`); a corrupt index or one of another layout is rebuilt first. (False, None) when
        it cannot be used after all (read-only, a full disk, I/O, held too long): read the folders.
        With `keep` the connection stays open for the caller, who hands it to `_release`."""
        deadline, told, attempt = time.monotonic() + WAIT_S, False, 0
        while True:
            conn: sqlite3.Connection | None = None
            try:
                conn = self._connection()
                result = work(conn)
                if not keep:
                    self._release(conn, failed=False)
                return True, result
            except sqlite3.OperationalError as exc:
                if conn is not None:
                    self._release(conn, failed=True)
                if not _transient(exc):
                    return False, None
                if time.monotonic() >= deadline:
                    self._say(
                        f"{self.path} is still held by another process after {WAIT_S:g} s: read from the run folders instead"
                    )
                    return False, None
                if not told:
                    self._say(f"{self.path} is held by another process: waiting up to {WAIT_S:g} s for it")
                    told = True
                attempt += 1
                time.sleep(min(0.05 * attempt, max(0.0, deadline - time.monotonic())))
            except sqlite3.DatabaseError:  # corrupt, or another layout: rebuilt from the folders
                if conn is not None:
                    self._release(conn, failed=True)
                try:
                    self.rebuild()
                except (OSError, sqlite3.Error):
                    return False, None

    def _say(self, message: str) -> None:
        if self.notify is not None:
            self.notify(message)

    def _synced(self) -> sqlite3.Connection:
        """A connection to the index, reconciled with the folder; the caller hands it to `_release`."""
        if self._writable():
            used, conn = self._on_index(self._synced_on, keep=True)
            if used:
                return conn  # type: ignore[no-any-return]
        conn = self._in_memory()
        self._sync(conn)
        return conn

    def _synced_on(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        self._sync(conn)
        return conn

    def _sync(self, conn: sqlite3.Connection) -> None:
        on_disk = scan(self.results)
        seen = {key: (stamp, digest) for key, stamp, digest in conn.execute("SELECT key, stamp, digest FROM seen")}
        held = _digests(conn)
        gone = [k for k in {*seen, *held} if k not in on_disk]  # rows without a folder too
        changed = [
            k
            for k, stamp in on_disk.items()
            if k not in seen or seen[k][0] != stamp or seen[k][1] != held.get(k)  # a row the file did not give
        ]
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
        conn = self._synced()
        try:
            conn.row_factory = sqlite3.Row
            return [dict(r) for r in conn.execute(sql, args)]
        finally:
            conn.row_factory = None
            self._release(conn, failed=False)

    # -- writing

    def _take_one(self, key: str, path: Path) -> None:
        """(Re)index one key from its file, nothing else; the next read reconciles the rest."""
        if not self._writable():
            return
        stamp = _stamp(path)

        def take(conn: sqlite3.Connection) -> None:
            with conn:
                if stamp is None:
                    _drop(conn, key)
                else:
                    _take(conn, self.results, key, stamp)

        self._on_index(take)

    def add(self, run_dir: Path) -> None:
        """Bring one finished run into the index (its summary only; no scan of the folder). A path that is
        not a run folder of this results folder only makes sure the index exists."""
        run_dir = Path(run_dir)
        if run_dir.parent.resolve() != self.results.resolve() or run_dir.name.startswith("."):
            if self._writable():
                self._on_index(lambda conn: None)
            return
        self._take_one(run_dir.name, run_dir / summaries.SUMMARY)

    def add_sweep(self, state: dict[str, Any]) -> None:
        """Bring one sweep's points into the index from its saved sweep.json (nothing else)."""
        sweep_id = state.get("sweep_id")
        if not isinstance(sweep_id, str) or not sweep_id or "/" in sweep_id or sweep_id.startswith("."):
            return
        self._take_one(SWEEP_KEY + sweep_id, self.results / runfiles.SWEEPS / sweep_id / runfiles.SWEEP_STATE)

    def rebuild(self) -> int:
        """Recreate the index from the run directories into a new file renamed over the old one (a
        writer racing it retries on the new file); returns the number of runs indexed."""
        self.close()
        if not self._writable():
            with closing(self._in_memory()) as conn:
                self._sync(conn)
                return int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
        with atomic.replacing(self.path) as tmp, closing(sqlite3.connect(tmp)) as conn:
            _schema(conn)
            self._sync(conn)
            count = int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])
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
