"""Writing a run directory: every file lands whole (temp file + rename) or not at all.

Two exceptions keep what a run measured when something goes wrong: iteration rows are appended to
iterations.csv as they are measured (StreamedRows, flushed per row, replaced whole at the end), so an
agent killed by SIGKILL keeps them; and a file its run folder refuses (a full disk) is written to the
system temp folder instead (write_json_or_fallback), and the caller says where.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from tbdkit.core import atomic


def write_text(path: Path, text: str) -> None:
    atomic.write_text(path, text)


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as it is: a text starting with = + - @ TAB or CR (a formula to Excel
    and LibreOffice) gets a leading ' (OWASP's rule); a number, or a text that reads as one, stays."""
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS):
        return value
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value


def spreadsheet_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: spreadsheet_cell(v) for k, v in row.items()}


def write_csv(path: Path, rows: Iterable[dict[str, Any]], columns_when_empty: Sequence[str] = ()) -> None:
    """`rows` as a CSV file, written whole; a text cell a spreadsheet would take as a formula is neutralized.
    No rows: the header is `columns_when_empty`."""
    rows = [spreadsheet_row(r) for r in rows]
    columns: list[str] = [] if rows else list(columns_when_empty)
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, buf.getvalue())


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def fallback_path(run_dir: Path, name: str) -> Path:
    """Where a run file goes when its run folder refuses it (a full disk): the system temp folder."""
    return Path(tempfile.gettempdir()) / "tbdkit-unsaved" / Path(run_dir).name / name


def write_json_or_fallback(path: Path, data: Any) -> Path:
    """Write `data` at `path`, or, if that fails (no space, read-only, quota), at its fallback path in
    the system temp folder; returns where it landed. Raises only if both fail."""
    try:
        write_json(path, data)
        return path
    except OSError:
        fallback = fallback_path(path.parent, path.name)
        write_json(fallback, data)
        return fallback


class StreamedRows(list):  # type: ignore[type-arg]
    """A list of records that also appends each one to a CSV file as it comes, flushed, so a process
    killed at any moment leaves every row before it on disk. The header is the first row's columns
    (later new columns wait for the whole file written at the end). A file that cannot be written
    stops the streaming, never the run."""

    def __init__(self, path: Path, row: Callable[[Any], dict[str, Any]]) -> None:
        super().__init__()
        self.path, self.row = Path(path), row
        self._file: IO[str] | None = None
        self._writer: csv.DictWriter[str] | None = None
        self.broken: OSError | None = None

    def append(self, item: Any) -> None:
        super().append(item)
        if self.broken is not None:
            return
        try:
            row = self.row(item)
            if self._writer is None:
                self._file = self.path.open("w", newline="")
                self._writer = csv.DictWriter(
                    self._file, fieldnames=list(row), lineterminator="\n", extrasaction="ignore"
                )
                self._writer.writeheader()
            self._writer.writerow(spreadsheet_row(row))
            assert self._file is not None
            self._file.flush()
        except OSError as exc:
            self.broken = exc
            self.close()

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
