"""Config fields: the bounds a field's annotation declares (Range, Subset), the coercion of plain values (CLI, JSON)
to a dataclass's typed fields, the range checks of a built config, and the field docs --help shows.

Split from interp.config, which re-exports the public names; nothing here imports torch.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import types
import typing
from dataclasses import dataclass, fields, is_dataclass
from typing import Annotated, Any, Literal

from .errors import ConfigError, did_you_mean


@dataclass(frozen=True, eq=False)  # identity equality: typing caches Annotated[...] by its metadata's equality, and
class Range:  # Range(0, 1) == Range(0.0, 1) would hand one field the other's bounds (and wording)
    """Bounds of a number field, declared in its annotation: `steps: Annotated[int, Range(1)] = 800`.

    ProbeConfig.validate checks every field's Range (nested configs' fields too; a tuple's elements one by one;
    None is left to the type) before the subclass's own rules, raising ConfigError(field, value, "a value in
    [lo, hi]") with "(" / ")" for an open end and -inf / inf for a missing one.
    """

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __str__(self) -> str:
        lo = "-inf" if self.lo is None else self.lo
        hi = "inf" if self.hi is None else self.hi
        return f"{'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"

    def check(self, name: str, value: Any) -> None:
        lo, hi = self.lo, self.hi
        if (lo is not None and (value < lo or (self.lo_open and value == lo))) or (
            hi is not None and (value > hi or (self.hi_open and value == hi))
        ):
            raise ConfigError(name, value, f"a value in {self}")


@dataclass(frozen=True, eq=False)  # identity equality, as Range
class Subset:
    """Values of a tuple-of-strings field, declared in its annotation: `tasks: Annotated[tuple[str, ...],
    Subset(TASKS)] = TASKS` admits at least one value (any number with `empty`), each one of `choices`, none twice
    (unless `repeats`). Checked with the Ranges, before the subclass's own rules."""

    choices: tuple[str, ...]
    empty: bool = False
    repeats: bool = False

    def __str__(self) -> str:
        kind = "list of values" if self.repeats else "list of distinct values"
        return f"a {'' if self.empty else 'non-empty '}{kind} from {', '.join(self.choices)}"

    def check(self, name: str, value: tuple[str, ...]) -> None:
        for v in value:
            if v not in self.choices:
                raise ConfigError(name, v, did_you_mean(v, self.choices) + "one of " + ", ".join(self.choices))
        if (not value and not self.empty) or (not self.repeats and len(set(value)) != len(value)):
            raise ConfigError(name, list(value), str(self))


PositiveInt = Annotated[int, Range(1)]
NonNegativeInt = Annotated[int, Range(0)]
PositiveFloat = Annotated[float, Range(0, lo_open=True)]


# ----------------------------------------------------------------------------- field docs


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (and its bases), by field name, dedented.

    Read from the AST, not with simple_parsing's get_attribute_docstring, which scans source lines and misses the
    docstring of a field whose definition spans two lines (sae_features' `sae`)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not is_dataclass(klass) or klass is object:
            continue
        try:
            tree = ast.parse(inspect.getsource(klass).lstrip())
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in zip(body, body[1:] + [None]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant):
                    docs[node.target.id] = inspect.cleandoc(str(nxt.value.value))
    return docs


def describe(cls: type, prefix: str = "", default: Any = None) -> list[tuple[str, str, str, str]]:
    """(dotted name, default as JSON, allowed values, doc) for every field; a nested config is a row ("sae.*", "",
    "", its doc) followed by its fields' rows, with the defaults the outer field's default gives them."""
    rows = []
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in fields(cls):
        value = _default_of(f) if default is None else getattr(default, f.name)
        if is_dataclass(value):
            rows.append((f"{prefix}{f.name}.*", "", "", docs.get(f.name, "")))
            rows += describe(type(value), prefix + f.name + ".", value)
        else:
            rows.append((prefix + f.name, json.dumps(value, default=str), allowed(hints[f.name]), docs.get(f.name, "")))
    return rows


def allowed(tp: Any) -> str:
    """What annotation `tp` admits beyond its type, for --help: "in [1, inf]", "one of 'a', 'b'", "" if nothing."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        each = "each " if typing.get_origin(args[0]) in (list, tuple) else ""
        parts = [f"{each}in {m}" if isinstance(m, Range) else str(m) for m in tp.__metadata__
                 if isinstance(m, (Range, Subset))] + [allowed(args[0])]
        return " ".join(p for p in parts if p)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(a for a in map(allowed, args) if a)
    if origin in (list, tuple) and args and allowed(args[0]):
        return "each " + allowed(args[0]).removeprefix("each ")
    return ""


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


# ----------------------------------------------------------------------------- coercion


def _coerce(name: str, value: Any, tp: Any) -> Any:
    """Check `value` against the annotation `tp`, converting where lossless; else ConfigError. Annotated metadata
    (Range, Subset) is not read here: ProbeConfig.validate checks it on the built config."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Annotated:
        return _coerce(name, value, args[0])
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arm in args:
            if arm is type(None) and value is None:
                return None
        errors = []
        for arm in args:
            if arm is type(None):
                continue
            try:
                return _coerce(name, value, arm)
            except ConfigError as e:
                errors.append(e.allowed)
        raise ConfigError(name, value, " or ".join(errors + (["null"] if type(None) in args else [])))
    if origin is Literal:
        if value in args:
            return value
        hint = did_you_mean(value, [a for a in args if isinstance(a, str)]) if isinstance(value, str) else ""
        raise ConfigError(name, value, hint + "one of " + ", ".join(repr(a) for a in args))
    if origin in (list, tuple):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(name, value, f"a list of {_tname(args[0]) if args else 'values'}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(name, value, f"a list of {len(args)} values")
            return tuple(_coerce(f"{name}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        out = [_coerce(f"{name}[{i}]", v, item) for i, v in enumerate(value)]
        return tuple(out)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(name, value, "a mapping")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(name, value, "true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(name, value, "an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            f = float(value)
            if f != f or f in (float("inf"), float("-inf")):
                raise ConfigError(name, value, "a finite number")
            return f
        raise ConfigError(name, value, "a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(name, value, "a string")
    if is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            names = [f"{name}.{f.name}" for f in fields(tp)]
            raise ConfigError(name, value, f"a mapping of {tp.__name__} fields, or one of them set alone: "
                              f"{', '.join(names)} (--set {names[0]}=...)")
        return _build(tp, value, prefix=name + ".")
    raise ConfigError(name, value, f"a value of type {_tname(tp)}")


def _tname(tp: Any) -> str:
    return getattr(_bare(tp), "__name__", str(_bare(tp)))


def _bare(tp: Any) -> Any:
    """Annotation `tp` without its Annotated metadata."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def _build(cls: type, values: dict[str, Any], prefix: str = "", base: Any = None) -> Any:
    """Instantiate dataclass `cls` from plain values, type-checking each field; a field not in `values` keeps its
    value in `base` (a nested config's default, as the outer field's default gives it) or its class default."""
    hints = typing.get_type_hints(cls, include_extras=True)
    names = {f.name for f in fields(cls)}
    for key in values:
        if key not in names:
            raise _unknown_field(cls, prefix, key, values[key], base)
    kwargs = {}
    for f in fields(cls):
        default = _default_of(f) if base is None else getattr(base, f.name)
        if f.name in values and is_dataclass(default) and isinstance(values[f.name], dict):
            kwargs[f.name] = _build(type(default), values[f.name], prefix + f.name + ".", default)
        elif f.name in values:
            kwargs[f.name] = _coerce(prefix + f.name, values[f.name], hints[f.name])
        elif base is not None or is_dataclass(default):
            kwargs[f.name] = default
    return cls(**kwargs)


def _unknown_field(cls: type, prefix: str, key: str, value: Any, base: Any = None) -> ConfigError:
    """The ConfigError of an unknown field `key` of dataclass `cls`, with the closest known name (difflib): a
    nested config's fields as dotted names (`hook` -> `sae.hook`), a dotted key by its whole path (`sea.hok=x`
    -> `sae.hook`), then every known name of this level."""
    field, leaf = prefix + key, value
    while isinstance(leaf, dict) and len(leaf) == 1:  # --set sea.hok=x arrives nested: {"sea": {"hok": "x"}}
        (sub, leaf), = leaf.items()
        field += "." + sub
    names = [f.name for f in fields(cls)]
    dotted = list(names)
    for f in fields(cls):
        default = _default_of(f) if base is None else getattr(base, f.name)
        if is_dataclass(default):
            dotted += [f"{f.name}.{g.name}" for g in fields(default)]
    wanted = field[len(prefix):]
    hint = did_you_mean(wanted, dotted)
    if not hint and "." not in wanted:  # a nested field named alone: hook -> sae.hook
        alone = [d for d in dotted if d.rpartition(".")[2] == wanted]
        hint = f"did you mean {alone[0]}? " if len(alone) == 1 else ""
    hint = hint.replace("did you mean ", "did you mean " + prefix, 1) if hint and prefix else hint
    return ConfigError(field, leaf, f"unknown field; {hint}known: {', '.join(sorted(names))}")


def check_ranges(cfg: Any, prefix: str = "") -> None:
    """ConfigError for the first field of dataclass `cfg` outside a Range (tuples element by element) or a Subset
    its annotation declares, nested configs field by field."""
    hints = typing.get_type_hints(type(cfg), include_extras=True)
    for f in fields(cfg):
        _check_value(prefix + f.name, getattr(cfg, f.name), hints[f.name])


def _check_value(name: str, value: Any, tp: Any) -> None:
    if value is None:
        return
    if typing.get_origin(tp) is Annotated:
        for m in tp.__metadata__:
            if isinstance(m, Subset):
                m.check(name, value)
            elif isinstance(m, Range):
                for v in value if isinstance(value, tuple) else (value,):
                    m.check(name, v)
        tp = typing.get_args(tp)[0]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):  # the arm the value has the type of
        arm = next((a for a in args if _fits(value, _bare(a))), None)
        if arm is not None:
            _check_value(name, value, arm)
    elif origin is tuple and isinstance(value, tuple) and args:
        for v, a in zip(value, args[:1] * len(value) if args[-1] is Ellipsis else args):
            _check_value(name, v, a)
    elif is_dataclass(value):
        check_ranges(value, name + ".")


def _fits(value: Any, tp: Any) -> bool:
    kind = typing.get_origin(tp) or tp
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(kind, type) and isinstance(value, kind)
