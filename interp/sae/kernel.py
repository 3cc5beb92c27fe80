"""The SAE's maths: the training-time module (`_ToolkitSAE`, whose forward and backward are one fused
`_SAEForward`), encode / decode / pre-activations / gates of SAELens SAEs, and the affine `InputTransform`
that training may apply to its buffer (folded into the saved SAE by `interp.sae.io.fold_input_transform`)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from .config import SAETrainConfig


@dataclass(frozen=True)
class InputTransform:
    """z = (x - shift) @ W, row-vector convention; W_inv its inverse. Folded into saved SAEs."""

    W: Float[Tensor, "d_in d_in"]
    W_inv: Float[Tensor, "d_in d_in"]
    shift: Float[Tensor, " d_in"] | None = None

    def apply(self, x: Float[Tensor, "tok d_in"], chunk: int = 65536) -> Float[Tensor, "tok d_in"]:
        W = self.W.to(x.device, x.dtype)
        shift = None if self.shift is None else self.shift.to(x.device, x.dtype)
        out = torch.empty_like(x)
        for i in range(0, x.shape[0], chunk):
            xi = x[i : i + chunk]
            out[i : i + chunk] = (xi if shift is None else xi - shift) @ W
        return out

    def key(self) -> str:
        h = hashlib.sha256()
        for t in (self.W, self.W_inv, self.shift):
            if t is not None:
                h.update(t.detach().double().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()


# ============================================================================= training-time SAE


class _SAEForward(torch.autograd.Function):
    """x_hat, l0 and the sparsity penalty of one SAE forward, with a backward that uses sparsity.

    pre = (x - b_dec) W_enc + b_enc; a = gate(pre) * pre; x_hat = a W_dec + b_dec.
    Gates: jumprelu 1[pre > theta] (theta = exp(log_theta)), standard 1[pre > 0] with
    penalty sum(a), topk the k largest (ReLU). JumpReLU's pseudo-derivatives, with the window
    R = 1[|pre - theta| < eps/2]: da/dpre = 1[pre > theta], da/dtheta = -(theta/eps) R,
    dl0/dtheta = -(1/eps) R. Only the encoder's forward matmul is dense; when few latents are
    active (density <= `sparse_below`), the decoder's forward and the weight gradients run on
    the active entries only (sparse matmuls): two dense matmuls a step instead of five.
    """

    @staticmethod
    def forward(ctx, x, W_enc, b_enc, W_dec, b_dec, log_theta, arch: str, k: int, eps: float, sparse_below: float):
        xc = x - b_dec
        pre = torch.addmm(b_enc, xc, W_enc)  # (B, d)
        theta = log_theta.exp() if arch == "jumprelu" else None
        if arch == "jumprelu":
            active = pre > theta
        elif arch == "standard":
            active = pre > 0
        else:
            idx = pre.topk(k, dim=-1).indices
            active = torch.zeros_like(pre, dtype=torch.bool).scatter_(-1, idx, True) & (pre > 0)
        B, d = pre.shape
        l0 = active.sum(-1, dtype=pre.dtype)
        nnz = int(l0.sum())
        sparse = nnz <= sparse_below * B * d
        a = pre * active
        if sparse:
            rows, cols = active.nonzero(as_tuple=True)
            vals = a[rows, cols]
            a_sp = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (B, d), is_coalesced=True,
                                           check_invariants=False)
            x_hat = torch.sparse.mm(a_sp, W_dec) + b_dec
        else:
            rows = cols = vals = pre.new_empty(0)
            x_hat = torch.addmm(b_dec, a, W_dec)
        penalty = l0.clone() if arch == "jumprelu" else a.sum(-1) if arch == "standard" else torch.zeros_like(l0)
        ctx.save_for_backward(xc, pre, active, a, W_enc, W_dec, theta if theta is not None else pre.new_empty(0),
                              rows, cols, vals)
        ctx.arch, ctx.eps, ctx.sparse = arch, eps, sparse
        fired = active.sum(0)
        ctx.mark_non_differentiable(l0, fired)
        return x_hat, l0, penalty, fired

    @staticmethod
    def backward(ctx, g_xhat, g_l0, g_pen, g_fired):
        xc, pre, active, a, W_enc, W_dec, theta, rows, cols, vals = ctx.saved_tensors
        arch, eps = ctx.arch, ctx.eps
        B, d = pre.shape
        mask = active.to(pre.dtype)
        ga = g_xhat @ W_dec.T  # dL/da (B, d): one dense matmul
        g_pre = ga * mask
        if arch == "standard":
            g_pre = g_pre + g_pen.unsqueeze(-1) * mask
        g_log_theta = None
        if arch == "jumprelu":
            window = ((pre - theta).abs() < eps / 2).to(pre.dtype)
            g_theta = -(window * (ga * theta + g_pen.unsqueeze(-1))).sum(0) / eps
            g_log_theta = g_theta * theta
        if ctx.sparse:  # a and g_pre share the support of `active`
            aT = torch.sparse_coo_tensor(torch.stack([cols, rows]), vals, (d, B), check_invariants=False)
            g_W_dec = torch.sparse.mm(aT, g_xhat)
            gT = torch.sparse_coo_tensor(torch.stack([cols, rows]), g_pre[rows, cols], (d, B), check_invariants=False)
            g_W_enc = torch.sparse.mm(gT, xc).T
        else:
            g_W_dec = a.T @ g_xhat
            g_W_enc = xc.T @ g_pre
        g_b_enc = g_pre.sum(0)
        g_b_dec = g_xhat.sum(0) - W_enc @ g_b_enc
        return None, g_W_enc, g_b_enc, g_W_dec, g_b_dec, g_log_theta, None, None, None, None


class _ToolkitSAE(torch.nn.Module):
    """Training-time parameters: pre = (x - b_dec) W_enc + b_enc; x_hat = a W_dec + b_dec."""

    def __init__(self, d_in: int, cfg: SAETrainConfig, b_dec: Tensor, gen: torch.Generator, device, dtype,
                 x: Tensor | None = None):
        super().__init__()
        W_dec = torch.randn(cfg.d_sae, d_in, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
        if cfg.init_decoder == "data" and x is not None:
            rows = torch.randint(0, x.shape[0], (cfg.d_sae,), generator=gen)
            W_dec = (x[rows.to(x.device)] - b_dec.to(x)).to(dtype) + 1e-3 * W_dec / math.sqrt(d_in)
        W_dec /= W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        self.cfg = cfg
        self.W_dec = torch.nn.Parameter(W_dec)
        self.register_parameter("W_enc", None if cfg.tied else torch.nn.Parameter(W_dec.T.clone().contiguous()))
        self.b_enc = torch.nn.Parameter(torch.zeros(cfg.d_sae, device=device, dtype=dtype))
        self.b_dec = torch.nn.Parameter(b_dec.to(device=device, dtype=dtype).clone())
        init = math.log(cfg.jumprelu_init_threshold)
        # log theta exists for every architecture (unused unless jumprelu) to keep one signature
        self.log_threshold = torch.nn.Parameter(torch.full((cfg.d_sae,), init, device=device, dtype=dtype),
                                                requires_grad=cfg.architecture == "jumprelu")

    @property
    def encoder(self) -> Float[Tensor, "d_in d_sae"]:
        """W_enc, or the decoder's transpose (a view that carries its gradient to W_dec) when tied."""
        return self.W_dec.T if self.W_enc is None else self.W_enc

    def forward(self, x: Tensor, sparse_below: float = 0.02) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(x_hat, l0 per row, sparsity penalty per row, tokens each latent fired on in the batch)."""
        c = self.cfg
        return _SAEForward.apply(x, self.encoder, self.b_enc, self.W_dec, self.b_dec, self.log_threshold,
                                 c.architecture, c.k, c.jumprelu_bandwidth, sparse_below)

    @torch.no_grad()
    def init_sparsity_from(self, x: Float[Tensor, "tok d_in"], idx: Tensor | None = None) -> None:
        """Per-latent start of the gate from data (init_sparsity="data"): the (1 - target_l0 / d_sae) quantile
        of each latent's pre-activation on `x` becomes its threshold (jumprelu) or -b_enc (standard)."""
        c = self.cfg
        if c.init_sparsity != "data" or c.architecture == "topk" or not c.target_l0:
            return
        idx = torch.arange(c.d_sae, device=x.device) if idx is None else idx
        pre = (x - self.b_dec) @ self.encoder[:, idx]  # (tok, len(idx)), b_enc excluded
        rank = max(1, min(pre.shape[0], math.ceil((1.0 - min(1.0, c.target_l0 / c.d_sae)) * pre.shape[0])))
        level = pre.kthvalue(rank, dim=0).values
        if c.architecture == "jumprelu":
            self.log_threshold[idx] = level.clamp_min(c.jumprelu_bandwidth).log()
        else:
            self.b_enc[idx] = -level

    @torch.no_grad()
    def renorm(self) -> None:
        self.W_dec /= self.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    @torch.no_grad()
    def resample(self, dead: Tensor, residual: Tensor, opt: torch.optim.Optimizer, gen: torch.Generator) -> int:
        """Re-initialise dead latents towards badly reconstructed inputs (Bricken et al. 2023).

        Each dead latent gets the direction of a batch residual drawn with probability proportional
        to its squared norm: decoder row = that direction, encoder column = the same (untied), encoder bias 0,
        threshold back to its initial value; their Adam moments are zeroed. With init_sparsity="data" the
        gate starts at the target-L0 quantile of the latent's pre-activations on the *residuals* (passed as
        residual + b_dec, which `init_sparsity_from` centres back), so on the inputs it first fires more
        often than the target (42 % of the inputs against 12.5 % in a 64-latent check). Starting it from
        the inputs instead was measured on atoms' synthetic dictionaries and did worse: held-out R2_AIP
        0.978 vs 0.983, recovery 0.994 vs 0.998.
        """
        idx = dead.nonzero().squeeze(-1)
        if idx.numel() == 0:
            return 0
        w = residual.pow(2).sum(-1).double().cpu()
        if float(w.sum()) <= 0:
            return 0
        pick = torch.multinomial(w, idx.numel(), replacement=True, generator=gen).to(residual.device)
        dirs = residual[pick]
        dirs = dirs / dirs.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        self.W_dec[idx] = dirs
        if self.W_enc is not None:
            self.W_enc[:, idx] = dirs.T
        self.b_enc[idx] = 0
        self.log_threshold[idx] = math.log(self.cfg.jumprelu_init_threshold)
        self.init_sparsity_from(residual + self.b_dec, idx)
        for p, rows in ((self.W_dec, (idx,)), (self.W_enc, (slice(None), idx)), (self.b_enc, (idx,)),
                        (self.log_threshold, (idx,))):
            state = opt.state.get(p, {}) if p is not None else {}
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key][rows] = 0
        return int(idx.numel())


# ============================================================================= SAELens SAEs: encode / decode


def sae_architecture(sae) -> str:
    return sae.cfg.architecture()


@torch.no_grad()
def pre_acts(sae, x: Float[Tensor, "tok d_in"], chunk: int = 8192) -> Float[Tensor, "tok d_sae"]:
    """Pre-activations (x - b_dec*apply) W_enc + b_enc, chunked."""
    W, b = sae.W_enc, sae.b_enc
    off = sae.b_dec * float(sae.cfg.apply_b_dec_to_input)
    out = []
    for i in range(0, x.shape[0], chunk):
        xi = x[i : i + chunk].to(W.device, W.dtype)
        out.append(torch.addmm(b, xi - off, W))
    return torch.cat(out)


def _chunked(fn, x: Tensor, W: Tensor, width: int, chunk: int) -> Tensor:
    """fn over the rows of `x` (any leading dims) in chunks, on W's device and dtype; (..., width) out."""
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    out = [fn(flat[i : i + chunk].to(W.device, W.dtype)) for i in range(0, flat.shape[0], chunk)]
    return torch.cat(out).reshape(*lead, -1) if out else flat.new_zeros(*lead, width)


@torch.no_grad()
def encode(sae, x: Float[Tensor, "... d_in"], chunk: int = 8192) -> Float[Tensor, "... d_sae"]:
    """Codes of `x` (any leading dims) through SAELens's own encode, chunked, without grad."""
    return _chunked(sae.encode, x, sae.W_enc, sae.cfg.d_sae, chunk)


@torch.no_grad()
def decode(sae, a: Float[Tensor, "... d_sae"], chunk: int = 8192) -> Float[Tensor, "... d_in"]:
    """Reconstruction from codes through SAELens's own decode, chunked, without grad."""
    return _chunked(sae.decode, a, sae.W_dec, sae.cfg.d_in, chunk)


def active_from_pre(sae, pre: Tensor) -> Tensor:
    """Boolean active mask of latents given pre-activations (the architecture's gate)."""
    arch = sae_architecture(sae)
    if arch == "jumprelu":
        return (pre > sae.threshold) & (pre > 0)
    if arch == "standard":
        return pre > 0
    idx = pre.topk(sae.cfg.k, dim=-1).indices
    return torch.zeros_like(pre, dtype=torch.bool).scatter_(-1, idx, True) & (pre > 0)


__all__ = ["InputTransform", "active_from_pre", "decode", "encode", "pre_acts", "sae_architecture"]
