"""Exceptions that front ends turn into one-line messages."""


class InterpError(Exception):
    """Base class for errors the CLI reports as one line with exit status 2."""


class ConfigError(InterpError, ValueError):
    """A config field holds a value that is not allowed (raised before any model loads)."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is invalid: {allowed}")


class ModelNotFound(InterpError, LookupError):
    """A model name resolved to nothing on this machine."""


class DamagedRun(InterpError):
    """A run directory whose manifest or files do not check out."""


class NumericError(InterpError, FloatingPointError):
    """NaN or inf where a probe needs finite numbers."""


class OutOfMemory(InterpError, MemoryError):
    """A model or a stage of a run needs more memory than its device has free; the message says what to lower."""


class Interrupted(BaseException):
    """A run stopped from outside by a signal: SIGTERM (the runner raises a subclass), as SIGINT raises
    KeyboardInterrupt. A BaseException, so no `except Exception` carries on past it. A run stopped by either is
    recorded as interrupted, never failed (`interrupted_by`)."""


def interrupted_by(e: BaseException) -> str | None:
    """What stopped a run that ended with `e` ("SIGINT (Ctrl-C)", "terminated by signal 15 (SIGTERM)"), or None
    when `e` is not an interruption (KeyboardInterrupt or `Interrupted`)."""
    if isinstance(e, KeyboardInterrupt):
        return "SIGINT (Ctrl-C)"
    if isinstance(e, Interrupted):
        return str(e) or type(e).__name__
    return None


class DataWarning(UserWarning):
    """User data was usable but not exactly as given (documents dropped, rows repeated); the CLI prints one line."""
