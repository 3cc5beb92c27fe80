"""Declared bounds (Range and Subset in Annotated metadata) of every registered probe config, the shared SAE
sub-config (SAESource) and what `interp run PROBE --help` shows of them."""

import typing
from dataclasses import fields, is_dataclass
from typing import Annotated

import pytest

from interp.cli import main
from interp.config import SIZES, Range, SAESource, Subset, build_config, describe, field_docs
from interp.errors import ConfigError
from interp.registry import probes_available

CONFIGS = {name: spec.config_cls for name, spec in probes_available().items()}


def ranges_of(tp) -> list[tuple[Range, str]]:
    """(range, shape) pairs an annotation declares: shape "scalar", "items" (a tuple of any length) or "pair" (the
    first element of a fixed-length tuple)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        inner = typing.get_origin(args[0]) in (tuple, list)
        shape = ("pair" if typing.get_args(args[0])[-1:] != (Ellipsis,) else "items") if inner else "scalar"
        return [(m, shape) for m in tp.__metadata__ if isinstance(m, Range)] + ranges_of(args[0])
    if origin in (typing.Union, typing.get_origin(int | None)):
        return [r for a in args for r in ranges_of(a)]
    if origin is tuple and args:
        return [(r, "pair" if args[-1] is not Ellipsis else "items") for r, _ in ranges_of(args[0])]
    return []


def declared(cls, default=None, prefix=""):
    """(dotted name, range, shape, default value) of every field with a Range, nested configs included."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in fields(cls):
        value = getattr(default if default is not None else cls(), f.name)
        if is_dataclass(value):
            yield from declared(type(value), value, prefix + f.name + ".")
        for r, shape in ranges_of(hints[f.name]):
            yield prefix + f.name, r, shape, value


def outside(r: Range) -> list[float]:
    """Values just outside `r`, from the range itself."""
    out = []
    if r.lo is not None:
        out.append(r.lo if r.lo_open else r.lo - 1)
    if r.hi is not None:
        out.append(r.hi if r.hi_open else r.hi + 1)
    return out


CASES = [(probe, name, r, shape, default, bad) for probe, cls in CONFIGS.items()
         for name, r, shape, default in declared(cls) for bad in outside(r)]


@pytest.mark.parametrize("probe", sorted(CONFIGS))
def test_default_and_every_size_build(probe):
    for size in SIZES:
        cfg = build_config(CONFIGS[probe], {"size": size})
        assert cfg.size == size


def test_every_probe_declares_ranges():
    assert all(any(True for _ in declared(cls)) for cls in CONFIGS.values())
    assert len(CASES) > 150, len(CASES)


@pytest.mark.parametrize("probe, name, r, shape, default, bad", CASES,
                         ids=[f"{c[0]}.{c[1]}={c[5]}" for c in CASES])
def test_a_value_outside_a_declared_range_is_refused(probe, name, r, shape, default, bad):
    value = [bad] if shape == "items" else [bad, *list(default)[1:]] if shape == "pair" else bad
    with pytest.raises(ConfigError) as e:
        build_config(CONFIGS[probe], {name: value})
    assert e.value.field == name, (name, value, e.value)
    assert e.value.allowed == f"a value in {r}"


def subsets(cls, prefix=""):
    """(dotted name, subset) of every field with a Subset, nested configs included."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in fields(cls):
        value = getattr(cls(), f.name)
        if is_dataclass(value):
            yield from subsets(type(value), prefix + f.name + ".")
        for m in getattr(hints[f.name], "__metadata__", ()):
            if isinstance(m, Subset):
                yield prefix + f.name, m


SUBSETS = [(probe, name, bad) for probe, cls in CONFIGS.items() for name, sub in subsets(cls)
           for bad in [["no_such_value"]] + [[]] * (not sub.empty) + [[sub.choices[0]] * 2] * (not sub.repeats)]


@pytest.mark.parametrize("probe, name, bad", SUBSETS, ids=[f"{c[0]}.{c[1]}={c[2]}" for c in SUBSETS])
def test_a_value_outside_a_declared_subset_is_refused(probe, name, bad):
    with pytest.raises(ConfigError) as e:
        build_config(CONFIGS[probe], {name: bad})
    assert e.value.field == name, (name, bad, e.value)
    assert len(SUBSETS) >= 20


def test_range_wording_matches_the_old_check_range():
    assert str(Range(0, 0.5, lo_open=True)) == "(0, 0.5]" and str(Range(1)) == "[1, inf]"
    assert str(Range(None, 1.0, hi_open=True)) == "[-inf, 1.0)"
    with pytest.raises(ConfigError, match=r"heldout_frac=0\.0 is invalid: a value in \(0, 0\.5\]"):
        build_config(CONFIGS["atoms"], {"heldout_frac": 0.0})
    with pytest.raises(ConfigError, match=r"a value in \[1, 150\]"):  # a bound that depends on another field
        build_config(CONFIGS["lockin"], {"log_every": 151})


def test_every_field_has_a_doc():
    for probe, cls in CONFIGS.items():
        assert all(doc for *_, doc in describe(cls)), probe
    assert field_docs(SAESource).keys() == {f.name for f in fields(SAESource)}


def test_help_shows_ranges_and_choices(capsys):
    assert main(["run", "atoms", "--help"]) == 0
    out = capsys.readouterr().out
    assert "  steps = 800  (in [1, inf])" in out and "  heldout_frac = 0.1  (in (0, 0.5])" in out
    assert "  metric = \"uncentered\"  (one of 'uncentered', 'centered')" in out
    assert "  grid_n_fracs = [0.015625, 0.25, 1.0]  (each in (0, 1])" in out
    assert main(["run", "patching", "--help"]) == 0
    assert "(a non-empty list of distinct values from resid_pre, attn_out, mlp_out, z)" in capsys.readouterr().out
    assert "  sae.*\n" in out and "  sae.cache = true\n" in out and "      sizes: micro=false, quick=false" in out


# ----------------------------------------------------------------------------- the SAE sub-config

SAE_PROBES = ("atoms", "sae_falsification", "sae_features", "self_interp")


def test_sae_probes_share_one_sub_config():
    for probe in SAE_PROBES:
        assert isinstance(build_config(CONFIGS[probe]).sae, SAESource), probe
    feats = build_config(CONFIGS["sae_features"], {"size": "micro"}).sae
    assert (feats.hook, feats.cache, feats.d_sae, feats.train_tokens, feats.steps) == (
        "resid_post@0.2", False, 576, 2048, 20)
    fals = build_config(CONFIGS["sae_falsification"]).sae
    assert (fals.hook, fals.d_sae, fals.train_tokens, fals.steps) == ("resid_post@0.3", 4608, 300_000, None)
    assert build_config(CONFIGS["atoms"]).sae.hook is None and build_config(CONFIGS["self_interp"]).sae.cache is None


@pytest.mark.parametrize("over", [{"sae": {"cache": False}}, {"sae.cache": False}])
def test_nested_overrides_keep_the_probes_own_sae_defaults(over):
    sae = build_config(CONFIGS["sae_features"], over).sae
    assert sae == SAESource(hook="resid_post@0.2", cache=False, d_sae=2304, train_tokens=60_000, steps=600)
    quick = build_config(CONFIGS["sae_falsification"], {"size": "quick", "sae": {"hook": "resid_post.4"}}).sae
    assert (quick.hook, quick.d_sae, quick.train_tokens) == ("resid_post.4", 2304, 20_000)


@pytest.mark.parametrize("probe, over, name", [
    ("atoms", {"sae.hook": "resid_post.3"}, "sae.hook"),  # atoms' site is `hook`
    ("atoms", {"sae.d_sae": 64}, "sae.d_sae"),  # atoms sizes its SAE by d_sae_mult
    ("self_interp", {"sae.cache": False}, "sae.cache"),
    ("sae_features", {"sae.hook": None}, "sae.hook"),
    ("sae_features", {"sae.hook": "blocks.3.attn.hook_pattern"}, "sae.hook"),
    ("sae_falsification", {"sae.hook": "embed"}, "sae.hook"),
    ("sae_falsification", {"sae_k": 4000, "sae.d_sae": 3000}, "sae_k"),
    ("sae_features", {"sae.bogus": 1}, "sae.bogus"),
])
def test_sae_fields_a_probe_does_not_use_or_cannot_take_are_refused(probe, over, name):
    with pytest.raises(ConfigError) as e:
        build_config(CONFIGS[probe], over)
    assert e.value.field == name


def test_dotted_site_fields_resolve_at_depth():
    assert build_config(CONFIGS["sae_features"]).at_depth(30).sae.hook == "blocks.6.hook_resid_post"
    deep = build_config(CONFIGS["sae_falsification"]).at_depth(18)
    assert deep.sae.hook == "blocks.5.hook_resid_post" and deep.sae.d_sae == 4608
    assert build_config(CONFIGS["atoms"]).at_depth(30).sae.hook is None
    from interp.runner import prepare  # the pre-load checks read dotted SITE_FIELDS too (no torch)

    for probe in ("sae_falsification", "sae_features"):
        _, cfg = prepare(probe, {"size": "micro"})
        assert cfg.sae.hook == {"sae_falsification": "blocks.9.hook_resid_post",
                                "sae_features": "blocks.6.hook_resid_post"}[probe]
    with pytest.raises(ConfigError) as e:
        build_config(CONFIGS["sae_features"], {"sae.hook": "blocks.40.hook_resid_post"}).validate_for_model(30)
    assert e.value.field == "sae.hook"


def test_equal_ranges_of_other_number_types_keep_their_own_wording():
    """typing caches Annotated[...] by its metadata's equality: were Range(0.0, 0.5) == Range(0, 0.5), a field
    declared second would get the first one's object (and say 0.0 where its source says 0)."""
    from typing import Annotated

    first = Annotated[float, Range(0.0, 0.5, lo_open=True)]
    second = Annotated[float, Range(0, 0.5, lo_open=True)]
    assert str(first.__metadata__[0]) == "(0.0, 0.5]" and str(second.__metadata__[0]) == "(0, 0.5]"
