"""Errors that reach the user as one line, never as a traceback."""


class UserError(Exception):
    """Bad input from the user (flags, files, URLs). The CLI prints `error: <message>` and exits 2."""
