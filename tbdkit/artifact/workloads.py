"""The models a bundle carries, and `reproduce`'s use of them.

A run of a model from outside the kit (`--workloads`, TBDKIT_WORKLOAD_PATH) records its folder and a
sha256 of each of its files (spec.json's `workload`, tbdkit.spec.provenance). `tbdkit bundle` carries
that folder's files as `workloads/<model>/...`, each checked against what the runs recorded;
`tbdkit reproduce` unpacks them and runs them, not whatever model of that name is installed where it
runs, and says when the two differ. A model of the kit's own travels as its hashes: the reviewer's
kit holds its files, and `reproduce` says when those differ from the recorded ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tbdkit.core.errors import UserError
from tbdkit.results import files as runfiles
from tbdkit.results import readers
from tbdkit.spec import catalog, provenance

FOLDER = "workloads"  # the bundle's folder of carried models


@dataclass
class Carried:
    """The model files a bundle carries (member -> bytes), what the manifest says of each model, and
    what could not be carried ({"path", "reason"})."""

    files: dict[str, bytes] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: list[dict[str, str]] = field(default_factory=list)


def records(files: Mapping[str, bytes]) -> dict[str, tuple[str, dict[str, Any]]]:
    """{run id: (model, spec.json's workload record)} of each bundled run that has one."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for name in sorted(files):
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "results" and parts[2] == runfiles.SPEC:
            spec = readers.json_of(files[name]) or {}
            record = spec.get("workload")
            if isinstance(record, dict) and isinstance(record.get("files"), dict):
                out[parts[1]] = (str(spec.get("model")), record)
    return out


def _folder_of(model: str, record: dict[str, Any]) -> Path | None:
    """Where the model's files are on this machine: the folder its run recorded, else the catalog's."""
    recorded = Path(str(record.get("folder", "")))
    if recorded.is_absolute() and (recorded / "workload.toml").is_file():
        return recorded
    found = catalog.models().get(model)
    return found.folder if found is not None and found.origin != catalog.KIT else None


def carry(files: Mapping[str, bytes]) -> Carried:
    """The folders of the bundled runs' models from outside the kit, read here and checked against
    each run's record."""
    out = Carried()
    by_model: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for run_id, (model, record) in records(files).items():
        if record.get("origin") != catalog.KIT:
            by_model.setdefault(model, []).append((run_id, record))
    for model, runs in sorted(by_model.items()):
        folder = _folder_of(model, runs[0][1])
        if folder is None:
            out.missing.append(
                {
                    "path": f"{FOLDER}/{model}/",
                    "reason": f"the folder of model {model} is not at {runs[0][1].get('folder')} any more: pass "
                    "--workloads with its folder to carry it",
                }
            )
            continue
        here = _hashes(folder)
        for rel in sorted(here):
            out.files[f"{FOLDER}/{model}/{rel}"] = (folder / rel).read_bytes()
        differing = [(r, provenance.differences(rec.get("files") or {}, here)) for r, rec in runs]
        for run_id, diff in differing:
            if diff:
                out.missing.append(
                    {
                        "path": f"results/{run_id}",
                        "reason": f"model {model}'s files changed since this run ({', '.join(diff[:3])}): the bundle "
                        "carries them as they are now, which is not what it trained",
                    }
                )
        out.models[model] = {
            "folder": f"{FOLDER}/{model}",
            "files": len(here),
            "runs": [r for r, _ in runs],
            "same_as_runs": [r for r, diff in differing if not diff],
        }
    return out


def unpack(files: Mapping[str, bytes], dest: Path) -> list[Path]:
    """The bundle's carried models, written below `dest` as <model>/<file>; their folders."""
    folders: set[Path] = set()
    for name in sorted(files):
        parts = PurePosixPath(name).parts
        if len(parts) < 3 or parts[0] != FOLDER:
            continue
        path = dest.joinpath(*parts[1:])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[name])
        folders.add(dest / parts[1])
    for folder in folders:
        if not (folder / "workload.toml").is_file():
            raise UserError(
                f"The bundle's {FOLDER}/{folder.name}/ has no workload.toml: it is damaged; make it again with "
                "`tbdkit bundle`."
            )
    return sorted(folders)


def _hashes(folder: Path) -> dict[str, str]:
    return {str(rel): provenance.sha256_file(folder / rel) for rel in provenance.folder_files(folder)}


def _differ(model: str, diff: list[str], what: str) -> str:
    more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
    return f"model {model}: {what} ({', '.join(diff[:3])}{more})"


def differences_here(files: Mapping[str, bytes], bundled: list[Path]) -> list[str]:
    """One line for each bundled model whose files differ from a same-named model installed here, and for
    each kit model whose recorded files differ from this kit's; read before the bundle's copies are used."""
    lines = []
    installed = catalog.models()
    for folder in bundled:
        other = installed.get(folder.name)
        diff = provenance.differences(_hashes(folder), _hashes(other.folder)) if other is not None else []
        if other is not None and diff:
            lines.append(
                _differ(
                    other.name,
                    diff,
                    f"the bundle's files differ from those at {other.folder}; the runs use the bundle's",
                )
            )
    for model in sorted({m for m, r in records(files).values() if r.get("origin") == catalog.KIT}):
        kit_model = installed.get(model)
        recorded = next(r for m, r in records(files).values() if m == model and r.get("origin") == catalog.KIT)
        diff = provenance.differences(recorded.get("files") or {}, _hashes(kit_model.folder)) if kit_model else []
        if diff:
            lines.append(
                _differ(model, diff, "this kit's files differ from those its runs recorded; the runs use this kit's")
            )
    return lines
