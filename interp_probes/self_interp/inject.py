"""Step 1: the injection template, soft-token injection through `inputs_embeds`, the prefix cache,
teacher-forced label loss and batched decoding of labels.

The soft token f(v) *replaces the input embedding* at both placeholder positions of

    user:      What is the meaning of "<P>"?
    assistant: The meaning of "<P>" is "            (left open; the label follows)

rendered with the model's chat template (a plain "User: / Assistant:" text for base models), by
default without a system turn as the reference's hand-written template has none
(`template_system="none"`; "default" keeps the chat template's default system prompt).
Injection replaces the embedding module's *output* (after Gemma's sqrt(d) scaling), on the plain
HF model (`model.hf`, no hooks). Everything before the first placeholder is independent of v: its
KV is computed once and expanded over each batch (`PrefixCache`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.errors import ConfigError
from interp.generate import kv_cache_kwargs

PLACEHOLDERS = (
    "<|reserved_special_token_0|>",  # Llama 3
    "<unused0>",  # Gemma
    "<filename>",  # SmolLM2 (unused code-data specials)
    "<gh_stars>",
    "<issue_start>",
    "<jupyter_code>",
)
USER = 'What is the meaning of "{p}"?'
ASSISTANT = 'The meaning of "{p}" is "'
TOPIC_PROMPT = "Tell me about {topic}."
EOT_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>")

Adapter = Callable[[Tensor], Tensor]


def render(model, user: str, assistant: str | None = None, system: str = "default") -> tuple[str, str]:
    """(text, kind): the chat-templated conversation cut after `assistant` (kept open), or the
    plain-text role format "User: ...\\nAssistant: ..." for base models. kind is "chat" | "plain".

    system="default" keeps the chat template's default system turn (SmolLM2 inserts one); "none"
    renders no system turn (see `strip_system_turn`)."""
    if model.info.chat:
        if assistant is None:
            full = model.chat_text(user)
        else:
            full = model.chat_text(user, assistant=assistant)
            full = full[: full.rindex(assistant) + len(assistant)]
        return (strip_system_turn(model, full) if system == "none" else full), "chat"
    return f"User: {user}\nAssistant:" + (f" {assistant}" if assistant else ""), "plain"


def strip_system_turn(model, text: str) -> str:
    """`text` (rendered with the template's default system turn) without that turn, keeping a leading BOS.

    The user-turn header is the template's system-turn header with the role renamed ("<|im_start|>system\\n"
    -> "<|im_start|>user\\n"); everything before the first user header of the default rendering is the
    system block. A template that inserts no system turn, or takes no system role, leaves `text` unchanged."""
    tok = model.tokenizer
    user, sys = "\x00user\x00", "\x00sys\x00"
    head = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False)
    head = head[: head.index(user)]  # [BOS] [default system turn] user header
    try:
        explicit = tok.apply_chat_template([{"role": "system", "content": sys}, {"role": "user", "content": user}],
                                           tokenize=False)
    except Exception:  # noqa: BLE001 - templates without a system role (Gemma) raise; they insert none
        return text
    if sys not in explicit:
        return text
    bos = tok.bos_token if tok.bos_token and head.startswith(tok.bos_token) else ""
    sys_header = explicit[len(bos) if explicit.startswith(bos) else 0 : explicit.index(sys)]
    user_header = sys_header.replace("system", "user")
    cut = head.find(user_header, len(bos))
    if "system" not in sys_header or cut <= len(bos) or not text.startswith(head[:cut]):
        return text
    return bos + text[cut:]


def topic_prompt(model, topic: str) -> str:
    """The request whose last-token residual is a topic's vector (generation prompt included)."""
    return render(model, TOPIC_PROMPT.format(topic=topic))[0]


def encode(model, text: str, kind: str) -> list[int]:
    """Token ids of a rendered text: chat text carries its own specials; plain text gets the BOS rule."""
    return model.tokenizer(text, add_special_tokens=kind != "chat")["input_ids"]


@dataclass(frozen=True)
class Template:
    """The tokenised injection template and the ids that frame a label."""

    ids: tuple[int, ...]
    """Template ids, ending with the open quote of the assistant prefix."""
    positions: tuple[int, int]
    """The two placeholder positions."""
    placeholder: str
    placeholder_id: int
    quote_id: int
    """The bare `"` token that closes a label."""
    eot_id: int
    """End-of-turn after the closing quote ("\\n" for the plain format)."""
    stop_ids: tuple[int, ...]
    """Tokens that end a generated label: any token holding a quote, end-of-turn, end-of-sequence."""
    kind: str
    """"chat" or "plain"."""
    text: str
    system: str = "default"
    """The template's system turn: "none" (the reference's form) or "default" (the chat template's)."""

    @property
    def prefix_len(self) -> int:
        """Tokens before the first placeholder (independent of the injected vector)."""
        return self.positions[0]

    def label_ids(self, tokenizer, label: str) -> list[int]:
        """Teacher-forcing targets: label + closing quote + end-of-turn."""
        return tokenizer.encode(label, add_special_tokens=False) + [self.quote_id, self.eot_id]


def _single_token(tokenizer, text: str) -> int | None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def build_template(model, placeholder: str | None = None, system: str = "none") -> Template:
    """Pick the placeholder, render and tokenise the template (system turn: "none" | "default"), and check
    its tokenisation."""
    tok = model.tokenizer
    plain_text, kind = render(model, USER.format(p="X"), ASSISTANT.format(p="X"), system)
    candidates = (placeholder,) if placeholder else PLACEHOLDERS
    chosen = None
    for cand in candidates:
        tid = _single_token(tok, cand)
        if tid is not None and cand not in plain_text and tid != tok.unk_token_id:
            chosen = (cand, tid)
            break
    if chosen is None:
        allowed = ("a string that is one token of the vocabulary" if placeholder
                   else "a vocabulary with one of " + ", ".join(PLACEHOLDERS))
        raise ConfigError("placeholder", placeholder, allowed + " (set placeholder= to a single unused token)")
    p, pid = chosen
    text, kind = render(model, USER.format(p=p), ASSISTANT.format(p=p), system)
    ids = encode(model, text, kind)
    positions = [i for i, t in enumerate(ids) if t == pid]
    if len(positions) != 2:
        raise RuntimeError(f"placeholder {p!r} occurs {len(positions)} times in the tokenised template, not twice")
    for i in positions:
        before, after = tok.decode([ids[i - 1]]), tok.decode([ids[i + 1]])
        if not before.endswith('"') or not after.startswith('"'):
            raise RuntimeError(f"a quote merged with the placeholder: {before!r} {p!r} {after!r}")
    quote_id = _single_token(tok, '"')
    if quote_id is None or tok.decode([ids[-1]]).strip() != '"':
        raise RuntimeError('the template must end with an open quote token and `"` must be one token')
    eot_id = _eot_id(tok) if kind == "chat" else _single_token(tok, "\n")
    if eot_id is None:
        eot_id = tok.eos_token_id
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    stops = {i for i, s in enumerate(vocab) if s is not None and '"' in s}
    stops |= {eot_id} | ({tok.eos_token_id} if tok.eos_token_id is not None else set())
    return Template(tuple(ids), (positions[0], positions[1]), p, pid, quote_id, eot_id, tuple(sorted(stops)), kind,
                    text, system)


def _eot_id(tok) -> int | None:
    for t in EOT_TOKENS:
        i = _single_token(tok, t)
        if i is not None and i != tok.unk_token_id:
            return i
    return tok.eos_token_id


# ============================================================================= batches


@dataclass
class Batch:
    ids: Int[Tensor, "b t"]
    """Template + targets, right-padded."""
    mask: Int[Tensor, "b t"]
    n_target: int
    """Longest target; targets start at len(template)."""


def make_batch(tmpl: Template, targets: Sequence[Sequence[int]], device) -> Batch:
    """Template followed by each target (label + quote + end-of-turn), right-padded with end-of-turn."""
    n = max(len(t) for t in targets)
    t0 = len(tmpl.ids)
    ids = torch.full((len(targets), t0 + n), tmpl.eot_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    ids[:, :t0] = torch.tensor(tmpl.ids)
    mask[:, :t0] = 1
    for i, t in enumerate(targets):
        ids[i, t0 : t0 + len(t)] = torch.tensor(list(t))
        mask[i, t0 : t0 + len(t)] = 1
    return Batch(ids.to(device), mask.to(device), n)


class PrefixCache:
    """The KV of the template tokens before the first placeholder, computed once (no grad)."""

    def __init__(self, model, tmpl: Template):
        self.len = tmpl.prefix_len
        ids = torch.tensor([tmpl.ids[: self.len]], device=model.device)
        with torch.no_grad():
            out = model.hf(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
        # transformers >= 5.24 names the returned KV cache `cache`; older 5.x releases `past_key_values`
        cache = getattr(out, "cache", None)
        self.cache = out.past_key_values if cache is None else cache

    def expand(self, batch: int):
        """A fresh copy of the cache repeated over `batch` rows (the stored one stays unchanged)."""
        c = copy.deepcopy(self.cache)
        c.batch_repeat_interleave(batch)
        return c


def inject(model, ids: Int[Tensor, "b t"], soft: Float[Tensor, "b d"], positions: Sequence[int]) -> Tensor:
    """Embedding-module output of `ids` with rows at `positions` replaced by `soft` (cast to the model dtype)."""
    emb = model.hf.get_input_embeddings()(ids)
    emb = emb.clone()
    emb[:, list(positions)] = soft.to(emb.dtype)[:, None, :].expand(-1, len(positions), -1)
    return emb


def _forward(model, tmpl: Template, ids: Tensor, mask: Tensor, soft: Tensor, pc: PrefixCache | None,
             logits_to_keep: int) -> Tensor:
    """Logits of the last `logits_to_keep` positions with `soft` injected at the placeholders."""
    if pc is None:
        emb = inject(model, ids, soft, tmpl.positions)
        return model.hf(inputs_embeds=emb, attention_mask=mask, use_cache=False, logits_to_keep=logits_to_keep).logits
    p = pc.len
    emb = inject(model, ids[:, p:], soft, [q - p for q in tmpl.positions])
    b, s = ids.shape[0], ids.shape[1] - p
    pos = torch.arange(p, p + s, device=ids.device)[None].expand(b, -1)
    out = model.hf(inputs_embeds=emb, attention_mask=mask, position_ids=pos, logits_to_keep=logits_to_keep,
                   **kv_cache_kwargs(model.hf, pc.expand(b)))
    return out.logits


def label_loss(model, tmpl: Template, batch: Batch, soft: Float[Tensor, "b d"], pc: PrefixCache | None = None,
               clamp: float = 100.0, per_sequence: bool = False) -> Tensor:
    """Teacher-forced cross-entropy on label + quote + end-of-turn: each token clamped at `clamp`,
    averaged per sequence, then over the batch (or per sequence when `per_sequence`)."""
    n = batch.n_target
    logits = _forward(model, tmpl, batch.ids, batch.mask, soft, pc, n + 1)[:, :-1].float()  # (b, n, vocab)
    t0 = len(tmpl.ids)
    target, valid = batch.ids[:, t0:], batch.mask[:, t0:].float()
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none").clamp(max=clamp)
    per_seq = (ce * valid).sum(1) / valid.sum(1)
    return per_seq if per_sequence else per_seq.mean()


# ============================================================================= decoding


@torch.no_grad()
def generate(model, tmpl: Template, soft: Float[Tensor, "n d"], max_new_tokens: int, batch_size: int = 64,
             temperature: float = 0.0, seed: int = 0, pc: PrefixCache | None = None) -> list[str]:
    """Labels for each injected soft token: HF `generate(inputs_embeds=...)` on the plain model,
    greedy (temperature 0) or sampled, stopped at the first quote or end-of-turn; the label is the
    text before the quote. Every prompt has the same length, so no padding is needed; with `pc`
    only the tokens after the prefix are embedded and fed."""
    from transformers import GenerationConfig

    sample = temperature > 0
    gc = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sample, temperature=temperature if sample else None,
                          top_k=0 if sample else None, top_p=1.0 if sample else None,
                          eos_token_id=list(tmpl.stop_ids), pad_token_id=tmpl.eot_id)
    ids_all = torch.tensor([tmpl.ids], device=model.device)
    out: list[str] = []
    for i in range(0, soft.shape[0], batch_size):
        s = soft[i : i + batch_size]
        b = s.shape[0]
        ids = ids_all.expand(b, -1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + i)
            if pc is None:
                emb = inject(model, ids, s, tmpl.positions)
                gen = model.hf.generate(inputs_embeds=emb, attention_mask=torch.ones_like(ids), generation_config=gc)
            else:
                gen = _generate_cached(model, tmpl, ids, s, pc, gc)
        out += [_cut_label(model.tokenizer, row.tolist(), tmpl) for row in gen]
    return out


def _generate_cached(model, tmpl: Template, ids: Tensor, soft: Tensor, pc: PrefixCache, gc) -> Tensor:
    """generate() continuing a prefilled prefix cache; the full ids mark the cached positions."""
    b, p = ids.shape[0], pc.len
    emb_full = torch.zeros(b, ids.shape[1], soft.shape[1], dtype=model.dtype, device=ids.device)
    emb_full[:, p:] = inject(model, ids[:, p:], soft, [q - p for q in tmpl.positions])
    gen = model.hf.generate(input_ids=ids, inputs_embeds=emb_full, attention_mask=torch.ones_like(ids),
                            generation_config=gc, **kv_cache_kwargs(model.hf, pc.expand(b)))
    return gen[:, ids.shape[1]:] if gen.shape[1] > gc.max_new_tokens else gen


def _cut_label(tokenizer, row: list[int], tmpl: Template) -> str:
    text = tokenizer.decode(row, skip_special_tokens=False)
    for stop in ('"', tokenizer.decode([tmpl.eot_id])):
        if stop and stop in text:
            text = text[: text.index(stop)]
    if tokenizer.eos_token and tokenizer.eos_token in text:
        text = text[: text.index(tokenizer.eos_token)]
    return text.strip()
