"""Exceptions that front ends turn into one-line messages."""


class InterpError(Exception):
    """Base class for errors the CLI reports as one line with exit status 2."""


class ConfigError(InterpError, ValueError):
    """A config field holds a value that is not allowed (raised before any model loads)."""

    def __init__(self, field: str, value: object, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is invalid: {allowed}")


class MissingPath(ConfigError):
    """A path-valued config field (transcoders, data, sae, a JSONL file) names a file or directory that does not
    exist: the message says so first, then what the field accepts ("transcoders: /nonexistent does not exist;
    accepted: ...")."""

    def __init__(self, field: str, value: object, allowed: str, path: object = None):
        self.field, self.value, self.allowed = field, value, allowed
        InterpError.__init__(self, f"{field}: {value if path is None else path} does not exist; accepted: {allowed}")


def did_you_mean(word: object, choices, cutoff: float = 0.6) -> str:
    """ "did you mean NAME? " for the closest of `choices` to `word` (difflib, case-insensitive), else ""."""
    import difflib

    by_lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1, cutoff=cutoff)
    return f"did you mean {by_lower[close[0]]}? " if close else ""


def looks_like_path(value: object) -> bool:
    """Whether a config value names a file or directory rather than a keyword or a hub id: `./x`, `../x`, `/x`,
    `~/x`, or two or more path separators (`a/b/c`), or a name ending in a file suffix (`texts.jsonl`)."""
    import os
    import re

    if not isinstance(value, str) or not value.strip():
        return False
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    explicit = value.startswith(("~", *seps)) or any(value.startswith(d + s) for d in (".", "..") for s in seps)
    return explicit or sum(value.count(s) for s in seps) >= 2 or bool(re.search(r"\.(txt|jsonl?|ya?ml)$", value))


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
