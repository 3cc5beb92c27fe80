"""The tuned lens (Belrose et al. 2023, "Eliciting Latent Predictions from Transformers with the Tuned Lens"): a
learned affine translator per layer, h -> h + A_l h + b_l, trained so that the readout of layer l matches the
model's own output distribution (KL(final || lens)). The Jacobian lens paper's baseline.

As in the paper: A_l and b_l start at zero (the logit lens), the last layer is the identity, and the loss is the
sum over layers of the forward KL from the model's final next-token distribution to the lens's, averaged over
tokens. Where this differs, and why: Adam instead of SGD with Nesterov momentum (fewer steps at the small sizes
a CPU run affords), each step on `tokens_per_step` tokens drawn from residuals collected once (the unembedding of
every layer is the cost: 29 x 49k logits a token on smollm2-135m), and each layer's loss back-propagated on its
own (the translators are independent, so the gradients are the same and only one layer's logits are held).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import ConfigError
from .base import Lens


class TunedLens(Lens):
    """Per-layer affine translators: `transport(l, h) = h + h @ A[l].T + b[l]` (float32), identity at the last."""

    name = "tuned"

    def __init__(self, A: Float[Tensor, "n_layers d_model d_model"], b: Float[Tensor, "n_layers d_model"],
                 metadata: Mapping[str, Any] | None = None):
        if A.dim() != 3 or A.shape[1] != A.shape[2] or tuple(b.shape) != tuple(A.shape[:2]):
            raise ConfigError("tuned lens", f"A {list(A.shape)}, b {list(b.shape)}",
                              "A of [n_layers, d_model, d_model] and b of [n_layers, d_model]")
        self.A = A.detach().to("cpu", torch.float32)
        self.b = b.detach().to("cpu", torch.float32)
        self.n_layers, self.d_model = int(A.shape[0]), int(A.shape[1])
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._placed: dict[torch.device, tuple[Tensor, Tensor]] = {}

    def transport(self, layer: int, resid: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        self.check_layer(layer)
        if layer == self.n_layers - 1:
            return resid
        if resid.device not in self._placed:
            self._placed[resid.device] = (self.A.to(resid.device), self.b.to(resid.device))
        A, b = self._placed[resid.device]
        h = resid.float()
        return (h + h @ A[layer].T + b[layer]).to(resid.dtype)

    def save(self, path: str | Path) -> Path:
        """A safetensors file: `A`, `b` and the metadata as JSON in the header."""
        from safetensors.torch import save_file

        from .._files import atomic_write

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"interp_tuned_lens": json.dumps(self.metadata, default=str)}
        atomic_write(path, lambda tmp: save_file({"A": self.A.contiguous(), "b": self.b.contiguous()}, str(tmp),
                                                 metadata=header))
        return path

    @classmethod
    def load(cls, path: str | Path, model: Any = None) -> TunedLens:
        """The lens `save` wrote; with `model`, one made for another model (d_model, layer count) is refused."""
        from safetensors import safe_open

        path = Path(path)
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = json.loads((f.metadata() or {}).get("interp_tuned_lens", "{}"))
                A, b = f.get_tensor("A"), f.get_tensor("b")
        except Exception as e:  # noqa: BLE001 - missing or unreadable: one line naming it
            raise ConfigError("tuned_lens", str(path), f"a tuned lens file written by TunedLens.save ({e})") from None
        lens = cls(A, b, meta)
        info = getattr(model, "info", model)
        if info is not None and (lens.d_model, lens.n_layers) != (info.d_model, info.n_layers):
            raise ConfigError("tuned_lens", str(path), f"a tuned lens for {getattr(info, 'name', 'this model')}: it "
                              f"was trained on {lens.n_layers} layers of d_model={lens.d_model}, the model has "
                              f"{info.n_layers} of d_model={info.d_model}")
        return lens


def _residuals(model: Any, batches: Iterable[Any], skip_first: int) -> Float[Tensor, "tok n_layers d_model"]:
    """resid_post at every layer at the real tokens (mask 1) from position `skip_first` on."""
    from .._capture import run_with_cache
    from ..sites import Site

    sites = [Site("resid_post", ly) for ly in range(model.info.n_layers)]
    held = []
    for batch in batches:
        if isinstance(batch, Mapping):
            ids, mask = batch["input_ids"], batch.get("attention_mask")
        else:
            ids, mask = torch.as_tensor(batch), None
        ids = ids if ids.dim() == 2 else ids[None]
        mask = torch.ones_like(ids) if mask is None else mask
        _, cache = run_with_cache(model, ids, mask, sites)
        keep = mask.bool().clone()
        keep[:, :skip_first] = False
        stacked = torch.stack([cache[s] for s in sites], dim=2)  # (batch, pos, layer, d_model)
        held.append(stacked[keep.to(stacked.device)].float())
    if not held:
        raise ConfigError("batches", "[]", "at least one batch of token ids")
    out = torch.cat(held)
    if not len(out):
        raise ConfigError("batches", f"<{len(held)} batches>", f"tokens after position skip_first={skip_first}")
    return out


def fit_tuned_lens(
    model: Any,
    batches: Iterable[Any],
    *,
    steps: int = 100,
    lr: float = 1e-3,
    tokens_per_step: int = 256,
    skip_first: int = 1,
    seed: int = 0,
    progress: bool = True,
) -> TunedLens:
    """Train a tuned lens on `batches` (model.tokenize dicts, or token id tensors): `steps` Adam steps of `lr` on
    `tokens_per_step` tokens drawn (seeded) from the residuals of every batch, collected once; positions before
    `skip_first` (position 0's massive activation) are left out. metadata records the settings and, per layer,
    the mean KL of the last step."""
    if steps < 0 or lr <= 0 or tokens_per_step < 1:
        raise ConfigError("tuned lens", f"steps={steps}, lr={lr}, tokens_per_step={tokens_per_step}",
                          "steps >= 0, lr > 0, tokens_per_step >= 1")
    with torch.no_grad():
        h = _residuals(model, batches, skip_first)  # (tok, layer, d_model), float32, on the model's device
    n_tok, n_layers, d = h.shape
    dev = h.device
    A = torch.zeros(n_layers, d, d, device=dev, requires_grad=True)
    b = torch.zeros(n_layers, d, device=dev, requires_grad=True)
    opt = torch.optim.Adam([A, b], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    dtype = next(model.hf.parameters()).dtype
    last_kl = [0.0] * n_layers

    from tqdm.auto import tqdm

    for _ in tqdm(range(steps), desc="tuned lens", disable=not progress):
        idx = torch.randint(0, n_tok, (min(tokens_per_step, n_tok),), generator=gen).to(dev)
        x = h[idx]  # (tok, layer, d_model)
        with torch.no_grad():
            target = model.unembed(x[:, -1].to(dtype)).float().log_softmax(-1)
        opt.zero_grad(set_to_none=True)
        for ly in range(n_layers - 1):
            hl = x[:, ly]
            moved = hl + hl @ A[ly].T + b[ly]
            logq = model.unembed(moved.to(dtype)).float().log_softmax(-1)
            kl = (target.exp() * (target - logq)).sum(-1).mean()
            kl.backward()
            last_kl[ly] = float(kl.detach().cpu())
        opt.step()
    meta = {"steps": steps, "lr": lr, "tokens_per_step": tokens_per_step, "skip_first": skip_first, "seed": seed,
            "n_tokens": n_tok, "last_step_kl": last_kl}
    info = getattr(model, "info", None)
    if info is not None:
        meta.update(model=info.name, weights_sha256=info.weights_sha256)
    with torch.no_grad():
        A[-1].zero_()
        b[-1].zero_()
    return TunedLens(A.detach(), b.detach(), meta)


__all__ = ["TunedLens", "fit_tuned_lens"]
