"""Errors that reach the user as one line and exit code 2 (bad input), instead of a traceback."""


class UserError(Exception):
    """Bad input or environment the user can fix: printed as one line, exit code 2."""

    exit_code = 2


class BackendUnavailable(UserError):
    """The backend's library is not installed (or was built without what we need)."""


class RecordNotWritten(UserError):
    """The run finished but its record could not be written (it is printed to stderr instead)."""

    exit_code = 1
