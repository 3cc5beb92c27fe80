"""The online instruments of one fine-tuning run: drift, update subspace, harm signal, C_t.

`Tracker.step(t, theta)` is the per-step part (k dot products and a ring-buffer write);
`Tracker.log(t, theta, L_T, L_B)` the log-time part (windowed SVD through the W x W Gram matrix,
principal angles against V_{t-tau}, predicted degradation, per-matrix drift, C_t). With
`probes=False` the tracker only records the losses: that is the overhead baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor


@dataclass
class Stiff:
    """The stiff subspace of the broad curvature at theta_0 and what the harm signal needs."""

    lam: Float[Tensor, " k"]
    V: Float[Tensor, "P k"]
    g: Float[Tensor, " P"]
    """Broad gradient g_B at theta_0."""
    R: Float[Tensor, "P k"]
    """A random orthonormal k-frame (the control of the harm signal), carrying the same lambdas."""
    lam1: float
    """lambda_1 at theta_0 (the scale of mu_bar)."""


def random_frame(P: int, k: int, gen: torch.Generator, like: Tensor) -> Tensor:
    return torch.linalg.qr(torch.randn(P, k, generator=gen, dtype=torch.float64).to(like))[0]


def update_subspace(U: Float[Tensor, "w P"], energy_frac: float) -> tuple[np.ndarray, Tensor | None]:
    """Singular values (descending) of the stacked updates and the basis V (P, r) of the top-r left
    singular vectors covering `energy_frac` of sum s^2, both through the w x w Gram matrix."""
    gram = (U @ U.T).double()
    ev, A = torch.linalg.eigh(gram)
    ev, A = ev.flip(0).clamp_min(0), A.flip(1)
    s = ev.sqrt()
    if float(ev.sum()) <= 0:
        return s.cpu().numpy(), None
    cum = ev.cumsum(0) / ev.sum()
    r = int((cum < energy_frac - 1e-12).sum()) + 1
    r = min(r, int((s > s[0] * 1e-7).sum()))
    V = U.T @ (A[:, :r] / s[:r]).to(U.dtype)  # (P, r) left singular vectors
    V = torch.linalg.qr(V)[0]
    return s.cpu().numpy(), V


def erank_pr(s: np.ndarray) -> tuple[float, float]:
    """Effective rank exp(-sum p log p) with p = s / sum s, and participation ratio (sum s^2)^2 / sum s^4."""
    s = s[s > 0]
    if not len(s):
        return math.nan, math.nan
    p = s / s.sum()
    return float(np.exp(-(p * np.log(p)).sum())), float((s**2).sum() ** 2 / (s**4).sum())


def overlap_angles(A: Tensor, B: Tensor) -> tuple[float, float, np.ndarray]:
    """overlap = ||A^T B||_F^2 / min(r_A, r_B), the largest principal angle (deg), and all cosines."""
    cos = torch.linalg.svdvals((A.T @ B).double()).clamp(0, 1)
    ov = float((cos**2).sum()) / min(A.shape[1], B.shape[1])
    return ov, float(np.degrees(np.arccos(float(cos.min())))), cos.cpu().numpy()


@dataclass
class Tracker:
    theta0: Tensor
    stiff: Stiff
    W: int = 10
    energy_frac: float = 0.9
    tau: int = 10
    probes: bool = True
    split: Callable[[Tensor], list[tuple[str, Tensor]]] | None = None
    """Per-matrix views of a parameter vector (model runs), for rel_frob and stable_rank."""
    base_split: list[tuple[str, float]] | None = None
    fisher: Callable[[Tensor], Tensor] | None = None
    """theta -> (m, P) per-example broad gradients (the accurate C_t), or None."""
    fisher_every: int = 0
    curv_exact: Callable[[Tensor], Tensor] | None = None
    """v -> G v at theta_0, for the exact curvature-weighted drift D^T G D (optional)."""
    heatmap_bytes: int = 0
    refresh: Callable[[Tensor], Stiff] | None = None
    refresh_every: int = 0
    rows: list[dict] = field(default_factory=list)
    steps_rows: list[dict] = field(default_factory=list)
    matrix_rows: list[dict] = field(default_factory=list)
    overlap_rows: list[dict] = field(default_factory=list)
    svals: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        P = self.theta0.numel()
        self.prev = self.theta0.clone()
        self.path_len = 0.0
        self.buf = torch.zeros(self.W, P, dtype=self.theta0.dtype, device=self.theta0.device) if self.probes else None
        self.n_buf = 0
        self.recent: dict[int, Tensor] = {}
        self.hm: list[tuple[int, Tensor]] = []
        self.hm_used = 0
        if self.split is not None and self.base_split is None:
            self.base_split = [(n, float(w.norm())) for n, w in self.split(self.theta0)]

    # -- every step ---------------------------------------------------------------------
    def step(self, t: int, theta: Tensor) -> None:
        delta = theta - self.prev
        self.prev = theta.clone()
        if not self.probes:
            return
        if self.refresh is not None and self.refresh_every and t % self.refresh_every == 0:
            self.stiff = self.refresh(theta)
        nd2 = float(delta @ delta)
        self.path_len += math.sqrt(nd2)
        self.buf[self.n_buf % self.W] = delta
        self.n_buf += 1
        c = self.stiff.V.T @ delta
        rho = float(c @ c) / nd2 if nd2 > 0 else math.nan
        h = float(self.stiff.lam @ c.square()) / nd2 if nd2 > 0 else math.nan
        self.steps_rows.append({"step": t, "rho": rho, "h": h, "update_norm": math.sqrt(nd2)})

    # -- at log steps -------------------------------------------------------------------
    def log(self, t: int, theta: Tensor, L_T: float, L_B: float) -> dict:
        row: dict = {"step": t, "L_T": L_T, "L_B": L_B}
        if not self.probes:
            self.rows.append(row)
            return row
        st = self.stiff
        D = theta - self.theta0
        c = st.V.T @ D
        cr = st.R.T @ D
        gD = float(st.g @ D)
        q = float(st.lam @ c.square())
        pred = gD + 0.5 * q
        last = self.steps_rows[-1] if self.steps_rows and self.steps_rows[-1]["step"] == t else {}
        row.update(
            drift_norm=float(D.norm()),
            path_len=self.path_len,
            rho=last.get("rho", math.nan),
            h=last.get("h", math.nan),
            curv_drift=q,
            pred_deg=pred,
            pred_deg_random=gD + 0.5 * float(st.lam @ cr.square()),
            curv_share=0.5 * q / abs(pred) if pred != 0 else math.nan,
        )
        if self.curv_exact is not None:
            row["curv_drift_exact"] = float(D @ self.curv_exact(D))
        row.update(self._subspace(t, theta))
        if self.split is not None:
            for (name, dw), (_, w0) in zip(self.split(D), self.base_split):
                fro = float(dw.norm())
                top = float(torch.linalg.matrix_norm(dw.double(), ord=2)) if fro > 0 and dw.numel() <= 4096 else (
                    float(torch.svd_lowrank(dw, q=4, niter=4)[1][0]) if fro > 0 else 0.0
                )
                stable = fro**2 / top**2 if top else math.nan
                self.matrix_rows.append({"step": t, "matrix": name, "rel_frob": fro / w0, "stable_rank": stable})
        self.rows.append(row)
        return row

    def _subspace(self, t: int, theta: Tensor) -> dict:
        out = {"erank": math.nan, "pr": math.nan, "r": 0, "overlap": math.nan, "max_angle_deg": math.nan,
               "mu_bar": math.nan, "mu_bar_fisher": math.nan}
        n = min(self.n_buf, self.W)
        if n == 0:
            self.svals.append(np.full(self.W, np.nan))
            return out
        idx = [(self.n_buf - 1 - i) % self.W for i in range(n)]
        s, V = update_subspace(self.buf[idx], self.energy_frac)
        self.svals.append(np.pad(s, (0, self.W - len(s)), constant_values=np.nan))
        out["erank"], out["pr"] = erank_pr(s)
        if V is None:
            return out
        out["r"] = V.shape[1]
        lag = [k for k in self.recent if k <= t - self.tau]
        if lag:
            out["overlap"], out["max_angle_deg"], _ = overlap_angles(V, self.recent[max(lag)])
        self.recent[t] = V
        for k in [k for k in self.recent if lag and k < max(lag)]:  # later logs lag to max(lag) or after
            del self.recent[k]
        M = self.stiff.V.T @ V  # (k, r)
        C = M.T @ (self.stiff.lam[:, None] * M)
        out["mu_bar"] = float(C.diagonal().sum()) / V.shape[1] / self.stiff.lam1
        if self.fisher is not None and self.fisher_every and t % self.fisher_every == 0:
            FV = self.fisher(theta) @ V  # (m, r)
            out["mu_bar_fisher"] = float(FV.square().sum() / FV.shape[0]) / V.shape[1] / self.stiff.lam1
        self._heatmap(t, V)
        return out

    def _heatmap(self, t: int, V: Tensor) -> None:
        size = V.numel() * 2
        if self.hm_used + size > self.heatmap_bytes:
            return
        Vh = V.half()
        for s, B in self.hm:
            ov, _, _ = overlap_angles(V, B.to(V.dtype))
            self.overlap_rows.append({"step_a": s, "step_b": t, "overlap": ov})
        self.overlap_rows.append({"step_a": t, "step_b": t, "overlap": 1.0})
        self.hm.append((t, Vh))
        self.hm_used += size

    def max_rho(self) -> float:
        vals = [r["rho"] for r in self.steps_rows if not math.isnan(r["rho"])]
        return max(vals) if vals else math.nan
