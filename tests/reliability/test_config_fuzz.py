"""Config fuzzing: any value for any field of any probe is accepted or rejected by a ConfigError
that names the field, before a model loads; through the CLI that is exit 2 and one stderr line."""

from __future__ import annotations

import subprocess
import sys
import typing
from dataclasses import fields, is_dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interp.config import build_config
from interp.errors import ConfigError, InterpError
from interp.registry import probes_available

PROBES = sorted(probes_available())

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.integers(-5, 5), max_size=4), st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def leaf_fields(cls, prefix=""):
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        if is_dataclass(hints[f.name]):
            out += leaf_fields(hints[f.name], prefix + f.name + ".")
        else:
            out.append(prefix + f.name)
    return out


@pytest.mark.parametrize("probe", PROBES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_value_is_accepted_or_named(probe, data):
    cls = probes_available()[probe].config_cls
    name = data.draw(st.sampled_from(leaf_fields(cls)))
    value = data.draw(junk)
    try:
        build_config(cls, {name: value})
    except ConfigError as e:
        assert e.field.split("[")[0] == name or e.field == name.split(".")[0] or name in str(e), (name, str(e))
        assert "\n" not in str(e)


@pytest.mark.parametrize("probe", PROBES)
def test_unknown_key_and_model(probe):
    cls = probes_available()[probe].config_cls
    with pytest.raises(ConfigError, match="no_such_field"):
        build_config(cls, {"no_such_field": 1})
    from interp.runner import prepare

    with pytest.raises(InterpError, match="no-such-model"):
        prepare(probe, {"model": "no-such-model"})


@pytest.mark.parametrize("probe", PROBES)
def test_layer_fields_out_of_range(probe):
    """Every int field named like a layer index is checked against the model's depth before loading."""
    from interp.runner import prepare

    cls = probes_available()[probe].config_cls
    hints = typing.get_type_hints(cls)
    layer_fields = [f.name for f in fields(cls) if "layer" in f.name and hints[f.name] in (int, int | None)]
    for name in layer_fields:
        with pytest.raises(ConfigError) as e:
            prepare(probe, {name: 999})
        assert name in str(e.value)


@pytest.mark.parametrize("probe", PROBES)
def test_cli_rejects_bad_values_in_one_line(probe):
    cls = probes_available()[probe].config_cls
    name = leaf_fields(cls)[-1]
    r = subprocess.run([sys.executable, "-m", "interp.cli", "run", probe, "--set", f"{name}={{\"bad\": 1}}",
                        "--set", "zz_unknown=1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
