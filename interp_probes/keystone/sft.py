"""Step 7: keystone-only fine-tuning by gradient masking, against random-only and full fine-tuning.

Modes:
- strict (default): parameters without trainable entries get requires_grad=False; q/k/v/o/up/down
  gradients are multiplied by the slice mask after backward; after every AdamW step the frozen
  entries are copied back from the originals (decoupled weight decay would shrink them otherwise).
  At the end every frozen entry is compared bitwise with the original (`mask_exact`).
- paper: the released code's masking. Only the q/k/v/o/up/down gradients are masked; gate_proj,
  norms, embeddings and lm_head stay trainable and weight decay is not masked (a known caveat:
  "keystone-only" then also trains everything outside the six projection types).

Trainer settings follow the released trainer (HF `Trainer` defaults under `train.py`): AdamW with
`transformers.get_linear_schedule_with_warmup` (warmup ceil(warmup_frac * steps), then linear decay to 0),
gradients clipped to a global norm of 1.0 (`max_grad_norm`, after masking: the norm of what is applied), and
weight decay only on `Trainer.get_decay_parameter_names` (no biases, no norms). `schedule="cosine"`,
`max_grad_norm=0` and `decay_all=true` give the project's earlier trainer. Biases: the slices are weights only
(`SliceMap(bias=False)`, the code's `.weight` edit), so in paper mode every bias trains, as in the code.

Every variant starts from the original weights, which are restored exactly afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import transformers
from torch import Tensor

from interp import warmup_schedule
from interp.generate import greedy, perplexity

from . import SFTConfig
from .data import SFTItem, final_integer
from .neurons import SliceMap
from .record import ROLE_USER, prompt_text
from .selection import Mask


def completion_text(model, question: str, solution: str) -> tuple[str, str]:
    """(prompt, completion): chat template with an explicit empty system message, else plain roles."""
    prompt = prompt_text(model, question, system="")
    if model.info.chat:
        full = model.chat_text(question, system="", assistant=solution)
        if not full.startswith(prompt):  # pragma: no cover - templates that rewrite the prompt part
            raise ValueError("the chat template's assistant turn does not extend its generation prompt")
        return prompt, full[len(prompt) :]
    return prompt, " " + solution + "\n"


def encode(model, items: Sequence[SFTItem], max_len: int) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) per example; the loss covers only the tokens after the prompt."""
    out = []
    chat = model.info.chat
    for it in items:
        prompt, completion = completion_text(model, it.question, it.solution)
        p_ids = model.tokenize(prompt, templated=chat)["input_ids"][0].tolist()
        c_ids = model.tokenize(completion, templated=True)["input_ids"][0].tolist()
        if not model.info.chat and model.tokenizer.eos_token_id is not None:
            c_ids = c_ids + [model.tokenizer.eos_token_id]
        ids = p_ids + c_ids
        if len(ids) > max_len:
            raise ValueError(f"an SFT example has {len(ids)} tokens, more than sft.max_len={max_len}")
        out.append((ids, len(p_ids)))
    return out


def accuracy(model, items: Sequence[SFTItem], cfg: SFTConfig) -> float:
    """Batched greedy answers (left padding, explicit positions); exact match of the final integer."""
    prompts = [prompt_text(model, it.question, system="") for it in items]
    outs = greedy(model, prompts, cfg.max_new_tokens, hooked=False, templated=model.info.chat,
                  batch_size=cfg.eval_batch)
    hits = []
    for it, ids in zip(items, outs):
        text = model.tokenizer.decode(ids, skip_special_tokens=True)
        text = text.split("\n" + ROLE_USER, 1)[0]
        hits.append(final_integer(text) == it.answer)
    return float(np.mean(hits))


# ----------------------------------------------------------------------------- masks


def slice_masks(model, smap: SliceMap, mask: Mask, complement: bool = False, all_layers: bool = False
                ) -> dict[str, Tensor]:
    """param name -> bool mask of its trainable entries (the slices of `mask`; `complement` inverts them).

    Only parameters of the six projection types appear; `all_layers` includes those with no slice."""
    params = dict(model.hf.named_parameters())
    out: dict[str, Tensor] = {}
    for t, m in mask.items():
        for layer in range(m.shape[0]):
            idx = np.flatnonzero(m[layer])
            if not len(idx) and not (all_layers or complement):
                continue
            idx = smap.rows(t, layer, idx)
            names = [(smap.weight_name(t, layer), smap.dim(t, layer))]
            if smap.bias_name(t, layer):
                names.append((smap.bias_name(t, layer), 0))
            for name, d in names:
                p = params[name]
                sel = torch.zeros(p.shape, dtype=torch.bool, device=p.device)
                ids = torch.as_tensor(idx, dtype=torch.long, device=p.device)
                if d == 0:
                    sel[ids] = True
                else:
                    sel[:, ids] = True
                out[name] = out[name] | sel if name in out else sel
    if complement:
        out = {k: ~v for k, v in out.items()}
    return out


def _all_type_params(model, smap: SliceMap, types: Sequence[str]) -> set[str]:
    names = set()
    for t in types:
        for layer in range(model.info.n_layers):
            names.add(smap.weight_name(t, layer))
            if smap.bias_name(t, layer):
                names.add(smap.bias_name(t, layer))
    return names


@dataclass
class Plan:
    """Which entries a variant trains: fully trainable parameters, and masked ones."""

    full: set[str]
    masked: dict[str, Tensor]

    def entries(self, params: dict[str, Tensor]) -> int:
        return sum(params[n].numel() for n in self.full) + sum(int(m.sum()) for m in self.masked.values())


def plan(model, smap: SliceMap, variant: str, mode: str, key: Mask, rand: Mask) -> Plan:
    params = dict(model.hf.named_parameters())
    every = set(params)
    six = _all_type_params(model, smap, list(key))
    if variant == "full":
        return Plan(every, {})
    target = rand if variant == "random" else key
    complement = variant == "mask_keystone"
    if mode == "strict":
        masked = slice_masks(model, smap, target, complement=complement)
        full = (every - six) if complement else set()
        return Plan(full, {n: m for n, m in masked.items() if n not in full})
    # paper: gradients of all q/k/v/o/up/down parameters masked; everything else trainable
    masked = slice_masks(model, smap, target, complement=complement, all_layers=True)
    return Plan(every - set(masked), masked)


# ----------------------------------------------------------------------------- training


def decay_names(model) -> set[str]:
    """Parameters that get weight decay under the HF Trainer's rule (no biases, no LayerNorm/RMSNorm weights)."""
    return set(transformers.Trainer.get_decay_parameter_names(None, model.hf))  # the method does not use self


def param_groups(model, trainable: Sequence[str], cfg: SFTConfig) -> list[dict]:
    """AdamW groups: weight_decay on the decay parameters, 0 on the rest (all decay with `decay_all`)."""
    params = dict(model.hf.named_parameters())
    decay = set(trainable) if cfg.decay_all else decay_names(model)
    groups = [{"params": [params[n] for n in trainable if n in decay], "weight_decay": cfg.weight_decay},
              {"params": [params[n] for n in trainable if n not in decay], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def _batch(examples: Sequence[tuple[list[int], int]], pad_id: int, device) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded ids, attention mask and the completion-token mask of the targets (tokens 1..)."""
    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    att = torch.zeros(len(examples), width, dtype=torch.long)
    tgt = torch.zeros(len(examples), width - 1, dtype=torch.bool)
    for r, (x, n_prompt) in enumerate(examples):
        ids[r, : len(x)] = torch.tensor(x)
        att[r, : len(x)] = 1
        tgt[r, n_prompt - 1 : len(x) - 1] = True  # predictions of tokens n_prompt..len-1
    return ids.to(device), att.to(device), tgt.to(device)


def completion_logits(model, ids: Tensor, att: Tensor, tgt: Tensor) -> Tensor:
    """Logits only at the positions whose next token is a completion token: the unembedding of the other
    positions (most of the sequence, and most of the memory) is never computed."""
    hf = model.hf
    hidden = hf.get_decoder()(input_ids=ids, attention_mask=att).last_hidden_state[:, :-1]  # (b, pos-1, d)
    logits = hf.get_output_embeddings()(hidden[tgt])
    cap = getattr(hf.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def train(model, pl: Plan, mode: str, examples: Sequence[tuple[list[int], int]], cfg: SFTConfig,
          originals: dict[str, Tensor], gen: torch.Generator, progress=None, lr: float | None = None,
          on_step: Callable[[int], None] | None = None) -> tuple[list[dict], int]:
    """AdamW at `lr` (default cfg.lr) with warmup and the configured decay, gradient accumulation to cfg.batch;
    `on_step(n)` runs after every optimizer step n (1-based, frozen entries already restored). Returns the curve
    and the steps."""
    params = dict(model.hf.named_parameters())
    trainable = [n for n in params if n in pl.full or n in pl.masked]
    for n in trainable:
        params[n].requires_grad_(True)
    opt = torch.optim.AdamW(param_groups(model, trainable, cfg), lr=cfg.lr if lr is None else lr)
    steps_per_epoch = math.ceil(len(examples) / cfg.batch)
    total = steps_per_epoch * cfg.epochs
    warmup = math.ceil(cfg.warmup_frac * total)
    sched = warmup_schedule(opt, cfg.schedule, warmup, total)
    clip = [params[n] for n in trainable]
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    use_amp = str(model.device).startswith("cuda")
    curve, step = [], 0
    bar = progress(range(total), desc="sft") if progress else None
    try:
        for _ in range(cfg.epochs):
            order = torch.randperm(len(examples), generator=gen).tolist()
            for s in range(steps_per_epoch):
                batch = [examples[i] for i in order[s * cfg.batch : (s + 1) * cfg.batch]]
                n_tok = sum(len(x) - n for x, n in batch)
                total_loss = 0.0
                for m in range(0, len(batch), cfg.micro_batch):
                    ids, att, tgt = _batch(batch[m : m + cfg.micro_batch], pad, model.device)
                    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
                        logits = completion_logits(model, ids, att, tgt)  # (n_completion_tokens, vocab)
                    nll = torch.nn.functional.cross_entropy(logits.float(), ids[:, 1:][tgt], reduction="sum")
                    loss = nll / n_tok
                    loss.backward()
                    total_loss += float(loss.detach())
                with torch.no_grad():
                    for n, mask in pl.masked.items():
                        if params[n].grad is not None:
                            params[n].grad.mul_(mask)
                grad_norm = (float(torch.nn.utils.clip_grad_norm_(clip, cfg.max_grad_norm))
                             if cfg.max_grad_norm > 0 else float("nan"))
                lr = opt.param_groups[0]["lr"]
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                if mode == "strict":
                    with torch.no_grad():
                        for n, mask in pl.masked.items():
                            params[n].copy_(torch.where(mask, params[n], originals[n]))
                curve.append({"step": step, "loss": total_loss, "lr": lr, "grad_norm": grad_norm})
                step += 1
                if bar is not None:
                    bar.update(1)
                if on_step is not None:
                    on_step(step)
    finally:
        for n in trainable:
            params[n].requires_grad_(False)
            params[n].grad = None
        if bar is not None:
            bar.close()
    return curve, step


def frozen_unchanged(model, pl: Plan, originals: dict[str, Tensor]) -> bool:
    """Every entry the plan does not train equals its original bit for bit."""
    for n, p in model.hf.named_parameters():
        if n in pl.full:
            continue
        if n in pl.masked:
            keep = ~pl.masked[n]
            if not torch.equal(p.detach()[keep], originals[n][keep]):
                return False
        elif not torch.equal(p.detach(), originals[n]):
            return False
    return True


@torch.no_grad()
def restore(model, originals: dict[str, Tensor]) -> None:
    for n, p in model.hf.named_parameters():
        p.copy_(originals[n])


def lr_jobs(cfg: SFTConfig) -> list[tuple[str, float]]:
    """(variant, learning rate) pairs: full at sft.lr; the sparse variants at sft.lr and every sft.lr_sweep value."""
    out = []
    for v in cfg.variants:
        lrs = [cfg.lr] if v == "full" else sorted({cfg.lr, *cfg.lr_sweep})
        out += [(v, lr) for lr in lrs]
    return out


def run_sft(model, smap: SliceMap, key: Mask, rand: Mask, cfg: SFTConfig, train_items, eval_items,
            ppl_chunks: Tensor, ppl_batch: int, seed: int, progress=None
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Train every (variant, lr) of `lr_jobs` from the original weights, on the same data order; accuracy and
    broad perplexity before, every `eval_every` steps and after. Returns (table, loss curves, evaluations)."""
    params = dict(model.hf.named_parameters())
    total_params = sum(p.numel() for p in params.values())
    originals = {n: p.detach().clone() for n, p in params.items()}
    examples = encode(model, train_items, cfg.max_len)
    acc_before = accuracy(model, eval_items, cfg)
    ppl_before = perplexity(model, ppl_chunks, batch_size=ppl_batch, hooked=False)
    rows, curves, evals = [], [], []
    try:
        for v, lr in lr_jobs(cfg):
            pl = plan(model, smap, v, cfg.mode, key, rand)
            evals.append({"variant": v, "lr": lr, "step": 0, "task_acc": acc_before, "gain": 0.0, "ppl": ppl_before,
                          "ppl_ratio": 1.0})

            def on_step(n: int, v=v, lr=lr) -> None:
                if cfg.eval_every and n % cfg.eval_every == 0:
                    a = accuracy(model, eval_items, cfg)
                    p = perplexity(model, ppl_chunks, batch_size=ppl_batch, hooked=False)
                    evals.append({"variant": v, "lr": lr, "step": n, "task_acc": a, "gain": a - acc_before,
                                  "ppl": p, "ppl_ratio": p / ppl_before})

            gen = torch.Generator().manual_seed(seed * 1_000_003 + 17)  # same data order for every variant
            curve, steps = train(model, pl, cfg.mode, examples, cfg, originals, gen, progress, lr=lr, on_step=on_step)
            exact = frozen_unchanged(model, pl, originals)
            if evals[-1]["variant"] == v and evals[-1]["lr"] == lr and evals[-1]["step"] == steps:
                acc_after, ppl_after = evals[-1]["task_acc"], evals[-1]["ppl"]
            else:
                acc_after = accuracy(model, eval_items, cfg)
                ppl_after = perplexity(model, ppl_chunks, batch_size=ppl_batch, hooked=False)
                evals.append({"variant": v, "lr": lr, "step": steps, "task_acc": acc_after,
                              "gain": acc_after - acc_before, "ppl": ppl_after, "ppl_ratio": ppl_after / ppl_before})
            entries = pl.entries(params)
            rows.append({"variant": v, "mode": cfg.mode, "trainable_entries": entries,
                         "trainable_fraction": entries / total_params, "task_acc_before": acc_before,
                         "task_acc_after": acc_after, "gain": acc_after - acc_before, "ppl_before": ppl_before,
                         "ppl_after": ppl_after, "ppl_ratio": ppl_after / ppl_before, "steps": steps, "lr": lr,
                         "main_lr": lr == cfg.lr, "mask_exact": exact})
            curves += [{"variant": v, "run_lr": lr, **c} for c in curve]
            restore(model, originals)
    finally:
        restore(model, originals)
    return (pd.DataFrame(rows),
            pd.DataFrame(curves, columns=["variant", "run_lr", "step", "loss", "lr", "grad_norm"]),
            pd.DataFrame(evals, columns=["variant", "lr", "step", "task_acc", "gain", "ppl", "ppl_ratio"]))
