"""Where the kit finds its own files and keeps its state, each overridable by environment."""

from __future__ import annotations

import os
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]


def workloads_dir() -> Path:
    """The folder holding workloads/<model>/ (TBDKIT_WORKLOADS overrides)."""
    return Path(os.environ.get("TBDKIT_WORKLOADS", KIT_ROOT / "workloads"))


def venvs_dir() -> Path:
    """The folder holding one virtual environment per framework stack (TBDKIT_VENVS overrides)."""
    return Path(os.environ.get("TBDKIT_VENVS", KIT_ROOT / ".venvs"))


def default_results_dir() -> Path:
    return Path(os.environ.get("TBDKIT_RESULTS", "results"))
