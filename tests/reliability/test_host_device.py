"""The host/device lint (host_device.py) fails on the bugs the H200 found, passes their fixes, and passes the tree.

A CPU run cannot show these: every tensor is on the host there. The snippets are the lines that crashed on
CUDA (lockin's update_subspace, sae_falsification's SAE trained on the host buffer) and the fixed versions.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
_spec = importlib.util.spec_from_file_location("host_device", HERE / "host_device.py")
hd = importlib.util.module_from_spec(_spec)
sys.modules["host_device"] = hd
_spec.loader.exec_module(hd)

LOCKIN_BAD = '''
def update_subspace(U, energy_frac):
    ev, A = torch.linalg.eigh((U @ U.T).double())
    s = ev.sqrt()
    return s.numpy(), None
'''
LOCKIN_GOOD = LOCKIN_BAD.replace("s.numpy()", "s.cpu().numpy()")

SAE_BAD = '''
from interp.sae import train_sae

def obtain_sae(model, cfg, acts):
    return train_sae(acts(), tcfg, metadata=meta, progress=progress)
'''
SAE_GOOD = SAE_BAD.replace("progress=progress)", "progress=progress, device=model.device)")

NP_BAD = '''
def scores(x):
    return np.asarray(x.float().abs().sum(0))
'''
NP_GOOD = NP_BAD.replace("sum(0)", "sum(0).cpu()")

FACTORY_BAD = '''
def mask(lengths, n):
    pos = torch.arange(n)
    return pos[None] < lengths[:, None]
'''
FACTORY_GOOD = FACTORY_BAD.replace("torch.arange(n)", "torch.arange(n, device=lengths.device)")


def codes(src: str, probe: bool = True) -> list[str]:
    return [f.code for f in hd.lint_source(src, probe=probe)]


@pytest.mark.parametrize("bad, good, code", [
    (LOCKIN_BAD, LOCKIN_GOOD, "HD1"),
    (NP_BAD, NP_GOOD, "HD2"),
    (FACTORY_BAD, FACTORY_GOOD, "HD3"),
    (SAE_BAD, SAE_GOOD, "HD4"),
], ids=["numpy", "asarray", "factory", "sae"])
def test_flags_the_bug_not_the_fix(bad, good, code):
    assert codes(bad) == [code], hd.lint_source(bad)
    assert codes(good) == [], hd.lint_source(good)


def test_host_values_and_pragmas_pass():
    src = '''
from interp.sae import train_sae as train

def f(x, gen, model):
    a = x.detach().cpu().numpy()
    b = x.to("cpu").numpy()
    c = np.asarray([1, 2, 3])
    d = torch.randn(4, generator=gen).to(x) + x
    e = torch.arange(3) + 1
    g = torch.zeros(3).numpy()  # host: a host buffer, said so
    sae = train(x, cfg, device="cpu")
    return a, b, c, d, e, g, sae
'''
    assert codes(src) == [], hd.lint_source(src)
    assert codes("def f(x):\n    return train_sae(x, cfg)\n", probe=False) == []  # HD4 is for probes
    assert codes("from interp.sae import train_sae as t\ndef f(x):\n    return t(x, cfg)\n") == ["HD4"]


def test_tree_is_clean():
    found = hd.lint_tree(ROOT)
    assert not found, "host/device slips (fix them, or end the line in `# host: <why>`):\n" + \
        "\n".join(map(str, found))


def test_pragmas_stay_few():
    """Each `# host:` is a reasoned exception; a growing count means the rule or the code needs a look."""
    n = sum(p.read_text().count(hd.PRAGMA) + p.read_text().count(hd.PRAGMA_MODULE)
            for d in ("interp", "interp_probes", "bench", "interp_app") for p in (ROOT / d).rglob("*.py"))
    assert n <= 12, f"{n} host pragmas"
