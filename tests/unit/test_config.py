"""Configs: types, sizes, dotted overrides, validation messages, hashing."""

from dataclasses import dataclass, field
from typing import Annotated, Literal

import pytest

from interp.config import ProbeConfig, Range, build_config, config_hash, describe, field_docs, nest, parse_value
from interp.errors import ConfigError


@dataclass(frozen=True)
class Inner:
    enable: bool = False
    """Switch."""
    lr: float = 1e-3
    """Learning rate."""


@dataclass(frozen=True)
class Cfg(ProbeConfig):
    """A test config."""

    top_p: float = 0.005
    """Fraction kept."""
    mode: Literal["a", "b"] = "a"
    """Mode."""
    layers: tuple[int, ...] = (1, 2)
    """Layers."""
    sub: Inner = field(default_factory=Inner)
    """Nested."""

    SIZE_PRESETS = {"micro": {"top_p": 0.5, "sub.lr": 0.1}}


def test_defaults_sizes_and_overrides():
    assert build_config(Cfg).top_p == 0.005
    micro = build_config(Cfg, {"size": "micro"})
    assert micro.top_p == 0.5 and micro.sub.lr == 0.1
    user = build_config(Cfg, {"size": "micro", "top_p": 0.25, "sub.enable": True})
    assert user.top_p == 0.25 and user.sub.enable is True and user.sub.lr == 0.1
    assert build_config(Cfg, {"layers": [3, 4]}).layers == (3, 4)
    assert build_config(Cfg, {"top_p": 1}).top_p == 1.0  # int accepted for float


@pytest.mark.parametrize("over, field_name", [
    ({"top_p": "x"}, "top_p"), ({"mode": "c"}, "mode"), ({"layers": "12"}, "layers"),
    ({"bogus": 1}, "bogus"), ({"sub.bogus": 1}, "sub.bogus"), ({"seed": -1}, "seed"),
    ({"size": "huge"}, "size"), ({"sub.enable": "yes"}, "sub.enable"), ({"top_p": float("nan")}, "top_p"),
    ({"layers": [1, "a"]}, "layers[1]"), ({"device": "tpu"}, "device"),
])
def test_bad_values_name_the_field(over, field_name):
    with pytest.raises(ConfigError) as e:
        build_config(Cfg, over)
    assert e.value.field == field_name
    assert field_name in str(e.value)


def test_parse_value_and_nest():
    assert parse_value("1") == 1 and parse_value("true") is True and parse_value("[1,2]") == [1, 2]
    assert parse_value("null") is None and parse_value("The capital of France is") == "The capital of France is"
    assert nest({"a.b": 1, "c": 2}) == {"a": {"b": 1}, "c": 2}
    with pytest.raises(ConfigError):
        nest({"a..b": 1})


def test_hash_is_stable_and_sensitive():
    a, b = build_config(Cfg), build_config(Cfg, {"top_p": 0.01})
    assert config_hash("x", a) == config_hash("x", build_config(Cfg))
    assert config_hash("x", a) != config_hash("x", b) != config_hash("y", b)


def test_docs_for_help():
    docs = field_docs(Cfg)
    assert docs["top_p"] == "Fraction kept." and docs["model"].startswith("Embedded model")
    names = [row[0] for row in describe(Cfg)]
    assert "sub.enable" in names and "top_p" in names


@dataclass(frozen=True)
class Own(ProbeConfig):
    """A config whose nested default differs from the nested class's."""

    sub: Inner = field(default_factory=lambda: Inner(lr=0.5))
    """Nested, with its own default."""
    steps: Annotated[int, Range(1)] = 3
    """Steps."""

    SIZE_PRESETS = {"micro": {"sub": {"enable": True}}}


def test_nested_defaults_of_the_outer_field_survive_overrides_and_presets():
    assert build_config(Own, {"sub.enable": True}).sub == Inner(enable=True, lr=0.5)
    assert build_config(Own, {"size": "micro"}).sub == Inner(enable=True, lr=0.5)
    assert build_config(Own, {"size": "micro", "sub": {"lr": 0.1}}).sub == Inner(enable=True, lr=0.1)
    rows = {name: (default, allowed) for name, default, allowed, _ in describe(Own)}
    assert rows["sub.lr"] == ("0.5", "") and rows["steps"] == ("3", "in [1, inf]") and rows["sub.*"] == ("", "")
    with pytest.raises(ConfigError, match=r"steps=0 is invalid: a value in \[1, inf\]"):
        build_config(Own, {"steps": 0})
