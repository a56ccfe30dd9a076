"""Errors a user can cause: each carries one clear sentence and the fix."""


class UserError(Exception):
    """A problem the user can fix; str() is the whole message shown, never a traceback."""
