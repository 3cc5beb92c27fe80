"""The trainable top slice as a pure function of a flat parameter vector theta.

Two slices (`LockinConfig.trainable`), both in the last block, with everything below them frozen so
that their inputs are computed once per sequence and cached:

- last_mlp (default): the MLP (gate/up/down); input resid_mid,
      logits = W_U . final_norm(resid_mid + MLP_theta(norm(resid_mid)))
- last_attn_o: the attention's output projection W_O (o_proj); inputs resid_pre and the attention's
  mixed values z (the o_proj input, fixed because q/k/v are frozen), then the frozen MLP,
      h_mid = resid_pre + [post_attn_norm](O_theta z),  logits = W_U . final_norm(h_mid + MLP(norm(h_mid)))

Both are evaluated only at sampled positions; the cached input is one (n, width) tensor (last_attn_o:
resid_pre and z side by side). The block's layout comes from `model.anatomy`: its MLP input and output norms
(Llama: post_attention_layernorm before; Gemma 2/3: pre/post_feedforward_layernorm around; OLMo 2: only after),
and parallel blocks (GPT-J, GPT-NeoX), whose MLP reads the block input: there the cached input of last_mlp is
[resid_pre | attn_out] and h = resid_pre + attn_out + MLP_theta(norm(resid_pre)). The slice trains the MLP's
weight matrices (biases stay frozen); the family's logit scaling and soft-capping follow the unembedding.
The shared model's weights are never written: theta is a separate
tensor substituted with `torch.func.functional_call`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor
from torch.func import functional_call

from interp.precision import fast_dtype
from interp.sites import Site

SLICES = ("last_mlp", "last_attn_o")


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
        a = model.anatomy
        self.anatomy = a
        block = a.layers[self.layer]
        self.block, self.mlp = block, a.mlp(self.layer)
        self.parallel = a.parallel
        self.norms = {w: a.norm(self.layer, w) for w in ("attn_out", "mlp_in", "mlp_out")}
        self.d_model = model.info.d_model
        if part == "last_attn_o":
            if self.parallel:
                raise ValueError(f"last_attn_o: {a.arch} has parallel attention and MLP; use last_mlp")
            self.module = _module(model, a.proj(self.layer, "o").weight)
            if getattr(self.module, "bias", None) is not None:
                raise ValueError("last_attn_o: an o_proj with a bias is not supported")
            self.names = ["weight"]
        else:
            self.module = self.mlp
            self.names = [n for n, p in self.mlp.named_parameters() if p.ndim == 2]  # gate/up/down (Llama order)
        params = dict(self.module.named_parameters())
        self.shapes = [tuple(params[n].shape) for n in self.names]
        self.numels = [params[n].numel() for n in self.names]
        self.P = sum(self.numels)
        with torch.no_grad():
            self.theta0 = torch.cat([params[n].detach().reshape(-1).float() for n in self.names]).clone()
        self.W_U = model.unembed_weight.detach()
        self.final = a.final_norm
        self.train_dtype = fast_dtype(train_unembed, self.W_U.device)
        self.W_U_train = self.W_U.to(self.train_dtype)

    def to(self, dtype: torch.dtype) -> "Slice":
        """A copy of the slice function in `dtype` (e.g. float64 for checks); the model is untouched."""
        out = copy.copy(self)
        out.block = copy.deepcopy(self.block).to(dtype)  # deep-copied together: the parts keep their roles
        mods = {id(m): n for n, m in self.block.named_modules()}
        twin = dict(out.block.named_modules())
        out.mlp = twin[mods[id(self.mlp)]]
        out.module = twin[mods[id(self.module)]]
        out.norms = {w: (None if m is None else twin[mods[id(m)]]) for w, m in self.norms.items()}
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
        return [(f"L{self.layer}.mlp.{n.rsplit('.', 1)[0]}", v) for n, v in self.unflatten(vec).items()]

    # -- the function -------------------------------------------------------------------
    def _norm(self, where: str, x: Tensor) -> Tensor:
        m = self.norms[where]
        return x if m is None else m(x)

    def hidden(self, theta: Float[Tensor, " P"], resid: Float[Tensor, "n width"]) -> Float[Tensor, "n d_model"]:
        """Final-normed hidden state after the slice (the unembedding's input)."""
        x = resid.to(self.W_U.dtype)
        params = {k: v.to(x.dtype) for k, v in self.unflatten(theta).items()}
        if self.part == "last_attn_o":  # x = [resid_pre | z]: W_O is trained, the MLP above it is frozen
            pre, z = x[:, : self.d_model], x[:, self.d_model :]  # (n, d_model), (n, n_heads * d_head)
            o = functional_call(self.module, params, (z,))  # (n, d_model)
            x = pre + self._norm("attn_out", o)
            return self.final(x + self._norm("mlp_out", self.mlp(self._norm("mlp_in", x))))
        if self.parallel:  # x = [resid_pre | attn_out]: the MLP reads the block input
            pre, attn = x[:, : self.d_model], x[:, self.d_model :]
            m = functional_call(self.mlp, params, (self._norm("mlp_in", pre),))
            return self.final(pre + attn + self._norm("mlp_out", m))
        m = functional_call(self.mlp, params, (self._norm("mlp_in", x),))
        return self.final(x + self._norm("mlp_out", m))

    def logits(self, theta: Tensor, resid: Tensor, W_U: Tensor | None = None) -> Float[Tensor, "n d_vocab"]:
        """Logits through `W_U` (default: the slice's own, in its dtype); half matmuls give float32 logits."""
        W = self.W_U if W_U is None else W_U
        z = self.hidden(theta, resid).to(W.dtype) @ W.T
        z = z.float() if z.dtype in (torch.bfloat16, torch.float16) else z  # half forward, float32 loss
        return self.anatomy.scale_logits(z)

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
        outs.append(model.forward_until(ids, site, torch.ones_like(ids)).detach().float().clone())
    return torch.cat(outs)


@torch.no_grad()
def resid_pre_z(model, layer: int, input_ids: Int[Tensor, "b pos"], batch_size: int = 16, second: str = "attn_z"
                ) -> Float[Tensor, "b pos width"]:
    """[resid_pre | z] of `layer` (width d_model + n_heads * d_head) for every position, the forward stopped at z
    (the o_proj input): the cached input of the last_attn_o slice; `second="attn_out"` gives [resid_pre |
    attn_out], the last_mlp input of a parallel block."""
    outs = []
    for i in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[i : i + batch_size]
        got: dict[str, Tensor] = {}

        def keep_pre(act: Tensor, got: dict[str, Tensor] = got) -> None:
            got["pre"] = act.detach().float().clone()

        with model.hooks([(Site("resid_pre", layer), keep_pre)]):
            z = model.forward_until(ids, Site(second, layer), torch.ones_like(ids))
        got["z"] = z.detach().float().reshape(*z.shape[:2], -1).clone()  # (b, pos, n_heads * d_head)
        outs.append(torch.cat([got["pre"], got["z"]], -1))
    return torch.cat(outs)


def slice_inputs(model, sl: "Slice", input_ids: Int[Tensor, "b pos"]) -> Float[Tensor, "b pos width"]:
    """The cached input of slice `sl` at every position: resid_mid (last_mlp), [resid_pre | z] (last_attn_o) or,
    on a parallel block, [resid_pre | attn_out] (last_mlp)."""
    if sl.part == "last_attn_o":
        return resid_pre_z(model, sl.layer, input_ids)
    if sl.parallel:
        return resid_pre_z(model, sl.layer, input_ids, second="attn_out")
    return resid_mid(model, sl.layer, input_ids)


def _module(model, param: str):
    """The module owning dotted parameter name `param`."""
    return model.hf.get_submodule(param.rsplit(".", 1)[0])


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
