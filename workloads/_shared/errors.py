"""The one error a workload's data.py raises for a problem its user can fix. The agent and the CLI
print its message alone (no traceback), so the message is one clear sentence and the fix."""

from __future__ import annotations


class DataError(Exception):
    """A user-fixable problem with the data source; message = one clear sentence + the fix."""
