"""The trainable top slice as a pure function of a flat parameter vector theta.

Two slices (`LockinConfig.trainable`), both in the last block, with everything below them frozen so
that their inputs are computed once per sequence and cached:

- last_mlp (default): the MLP (gate/up/down); input resid_mid,
      logits = W_U . final_norm(resid_mid + MLP_theta(norm(resid_mid)))
- last_attn_o: the attention's output projection W_O (o_proj); inputs resid_pre and the attention's
  mixed values z (the o_proj input, fixed because q/k/v are frozen), then the frozen MLP,
      h_mid = resid_pre + [post_attn_norm](O_theta z),  logits = W_U . final_norm(h_mid + MLP(norm(h_mid)))

Both are evaluated only at sampled positions; the cached input is one (n, width) tensor (last_attn_o:
resid_pre and z side by side). The shared model's weights are never written: theta is a separate
tensor substituted with `torch.func.functional_call`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from torch.func import functional_call

from interp.models import _final_norm
from interp.precision import fast_dtype
from interp.sites import Site

MATRICES = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")
SLICES = ("last_mlp", "last_attn_o")


class _Stop(Exception):
    """Raised from the resid_mid hook: nothing above the slice input is needed while caching."""


@dataclass
class Positions:
    """Cached slice inputs at sampled positions: resid (n, d_model) and next-token targets (n,)."""

    resid: Float[Tensor, "n d_model"]
    targets: Int[Tensor, " n"]

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def take(self, index: Tensor) -> "Positions":
        return Positions(self.resid[index], self.targets[index])


class Slice:
    """theta (P,) -> logits at cached positions, for the MLP (or W_O) of block `layer` (default: the last)."""

    def __init__(self, model, layer: int | None = None, train_unembed: str = "float32", part: str = "last_mlp"):
        if part not in SLICES:
            raise ValueError(f"slice {part!r}: one of {', '.join(SLICES)}")
        self.model, self.part = model, part
        self.layer = model.info.n_layers - 1 if layer is None else layer
        block = model.layer_module(self.layer)
        self.block, self.mlp = block, block.mlp
        self.gemma_style = hasattr(block, "pre_feedforward_layernorm")
        self.d_model = model.info.d_model
        if part == "last_attn_o":
            self.module = block.self_attn.o_proj
            if getattr(self.module, "bias", None) is not None:
                raise ValueError("last_attn_o: an o_proj with a bias is not supported")
            self.names = ["weight"]
        else:
            self.module = self.mlp
            self.names = list(MATRICES)
        params = dict(self.module.named_parameters())
        self.shapes = [tuple(params[n].shape) for n in self.names]
        self.numels = [params[n].numel() for n in self.names]
        self.P = sum(self.numels)
        with torch.no_grad():
            self.theta0 = torch.cat([params[n].detach().reshape(-1).float() for n in self.names]).clone()
        self.W_U = model.unembed_weight.detach()
        self.final = _final_norm(model.hf)
        self.train_dtype = fast_dtype(train_unembed, self.W_U.device)
        self.W_U_train = self.W_U.to(self.train_dtype)

    def to(self, dtype: torch.dtype) -> "Slice":
        """A copy of the slice function in `dtype` (e.g. float64 for checks); the model is untouched."""
        out = copy.copy(self)
        out.block = copy.deepcopy(self.block).to(dtype)
        out.mlp = out.block.mlp
        out.module = out.block.self_attn.o_proj if self.part == "last_attn_o" else out.mlp
        out.final = copy.deepcopy(self.final).to(dtype)
        out.W_U = self.W_U.to(dtype)
        out.train_dtype, out.W_U_train = dtype, out.W_U
        out.theta0 = self.theta0.to(dtype)
        return out

    # -- parameters -------------------------------------------------------------------
    def unflatten(self, theta: Float[Tensor, " P"]) -> dict[str, Tensor]:
        out, i = {}, 0
        for name, shape, n in zip(self.names, self.shapes, self.numels):
            out[name] = theta[i : i + n].view(shape)
            i += n
        return out

    def split(self, vec: Float[Tensor, " P"]) -> list[tuple[str, Tensor]]:
        """Per-matrix views (name, matrix) of a parameter-space vector."""
        if self.part == "last_attn_o":
            return [(f"L{self.layer}.attn.o_proj", v) for v in self.unflatten(vec).values()]
        return [(f"L{self.layer}.mlp.{n.split('.')[0]}", v) for n, v in self.unflatten(vec).items()]

    # -- the function -------------------------------------------------------------------
    def hidden(self, theta: Float[Tensor, " P"], resid: Float[Tensor, "n d_model"]) -> Float[Tensor, "n d_model"]:
        """Final-normed hidden state after the slice (the unembedding's input)."""
        x = resid.to(self.W_U.dtype)
        params = {k: v.to(x.dtype) for k, v in self.unflatten(theta).items()}
        if self.part == "last_attn_o":  # x = [resid_pre | z]: W_O is trained, the MLP above it is frozen
            pre, z = x[:, : self.d_model], x[:, self.d_model :]  # (n, d_model), (n, n_heads * d_head)
            o = functional_call(self.module, params, (z,))  # (n, d_model)
            x = pre + (self.block.post_attention_layernorm(o) if self.gemma_style else o)
            if self.gemma_style:
                h = x + self.block.post_feedforward_layernorm(self.mlp(self.block.pre_feedforward_layernorm(x)))
            else:
                h = x + self.mlp(self.block.post_attention_layernorm(x))
            return self.final(h)
        if self.gemma_style:
            m = functional_call(self.mlp, params, (self.block.pre_feedforward_layernorm(x),))
            h = x + self.block.post_feedforward_layernorm(m)
        else:
            h = x + functional_call(self.mlp, params, (self.block.post_attention_layernorm(x),))
        return self.final(h)

    def logits(self, theta: Tensor, resid: Tensor, W_U: Tensor | None = None) -> Float[Tensor, "n d_vocab"]:
        """Logits through `W_U` (default: the slice's own, in its dtype); half matmuls give float32 logits."""
        W = self.W_U if W_U is None else W_U
        z = self.hidden(theta, resid).to(W.dtype) @ W.T
        return z.float() if z.dtype in (torch.bfloat16, torch.float16) else z  # half forward, float32 loss

    def loss(self, theta: Tensor, batch: Positions) -> Tensor:
        """Mean next-token cross-entropy over the batch's positions."""
        return torch.nn.functional.cross_entropy(self.logits(theta, batch.resid), batch.targets)

    def train_loss(self, theta: Tensor, batch: Positions) -> Tensor:
        """The training steps' loss: `loss` with the unembedding matmul in `train_dtype` (its backward too)."""
        return torch.nn.functional.cross_entropy(self.logits(theta, batch.resid, self.W_U_train), batch.targets)

    def token_losses(self, theta: Tensor, batch: Positions) -> Float[Tensor, " n"]:
        return torch.nn.functional.cross_entropy(self.logits(theta, batch.resid), batch.targets, reduction="none")

    @torch.no_grad()
    def eval_loss(self, theta: Tensor, batch: Positions, chunk: int = 256) -> float:
        total = 0.0
        for i in range(0, len(batch), chunk):
            part = batch.take(torch.arange(i, min(i + chunk, len(batch))))
            total += float(self.token_losses(theta, part).double().sum())
        return total / len(batch)

    def grad(self, theta: Tensor, batch: Positions) -> tuple[float, Tensor]:
        th = theta.detach().requires_grad_(True)
        loss = self.loss(th, batch)
        (g,) = torch.autograd.grad(loss, th)
        return float(loss.detach()), g


# ============================================================================= caching


@torch.no_grad()
def resid_mid(model, layer: int, input_ids: Int[Tensor, "b pos"], batch_size: int = 16) -> Float[Tensor, "b pos d"]:
    """resid_mid of `layer` for every position of fixed-length sequences (no padding), stopping
    the forward right there (nothing above the slice's input is computed)."""
    site = Site("resid_mid", layer)
    outs = []
    for i in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[i : i + batch_size]
        got: list[Tensor] = []

        def keep(act: Tensor, got: list[Tensor] = got) -> None:
            got.append(act.detach().float().clone())
            raise _Stop

        with model.hooks([(site, keep)]):
            try:
                model.forward(ids, torch.ones_like(ids))
            except _Stop:
                pass
        outs.append(got[0])
    return torch.cat(outs)


@torch.no_grad()
def resid_pre_z(model, layer: int, input_ids: Int[Tensor, "b pos"], batch_size: int = 16
                ) -> Float[Tensor, "b pos width"]:
    """[resid_pre | z] of `layer` (width d_model + n_heads * d_head) for every position, the forward stopped at z
    (the o_proj input): the cached input of the last_attn_o slice."""
    outs = []
    for i in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[i : i + batch_size]
        got: dict[str, Tensor] = {}

        def keep_pre(act: Tensor, got: dict[str, Tensor] = got) -> None:
            got["pre"] = act.detach().float().clone()

        def keep_z(act: Tensor, got: dict[str, Tensor] = got) -> None:
            got["z"] = act.detach().float().reshape(*act.shape[:2], -1).clone()  # (b, pos, n_heads * d_head)
            raise _Stop

        with model.hooks([(Site("resid_pre", layer), keep_pre), (Site("attn_z", layer), keep_z)]):
            try:
                model.forward(ids, torch.ones_like(ids))
            except _Stop:
                pass
        outs.append(torch.cat([got["pre"], got["z"]], -1))
    return torch.cat(outs)


def slice_inputs(model, sl: "Slice", input_ids: Int[Tensor, "b pos"]) -> Float[Tensor, "b pos width"]:
    """The cached input of slice `sl` at every position: resid_mid (last_mlp) or [resid_pre | z] (last_attn_o)."""
    if sl.part == "last_attn_o":
        return resid_pre_z(model, sl.layer, input_ids)
    return resid_mid(model, sl.layer, input_ids)


def gather_positions(resid: Tensor, ids: Tensor, pos: Int[Tensor, "b k"]) -> Positions:
    """Positions (resid at pos, target = the next token) for each sequence's sampled positions."""
    rows = torch.arange(ids.shape[0])[:, None].expand_as(pos)
    return Positions(resid[rows, pos].reshape(-1, resid.shape[-1]), ids[rows, pos + 1].reshape(-1))


@torch.no_grad()
def cache_exactness(model, sl: Slice, ids: Tensor, pos: Tensor) -> float:
    """Max |logit| difference between the full hooked forward and the cached slice path at `pos`."""
    full = model.forward(ids, torch.ones_like(ids)).float()
    rows = torch.arange(ids.shape[0])[:, None].expand_as(pos)
    full = full[rows, pos].reshape(-1, full.shape[-1])
    resid = slice_inputs(model, sl, ids)
    cached = sl.logits(sl.theta0, resid[rows, pos].reshape(-1, resid.shape[-1]))
    return float((full - cached).abs().max())
