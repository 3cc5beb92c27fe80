"""The pluggable generator of the counterexample loop: `chat(messages, temperature, max_tokens) -> str`.

Backends: `local` (the embedded instruct model with its chat template, sampled on the plain HF model with the
KV cache; seeded Gumbel noise, so runs repeat), `openai` (POST {url}/chat/completions of any OpenAI-compatible
API, key from the environment variable `api_key_env`, 60 s timeout, 2 retries) and `template` (deterministic,
no model: the loop's template candidates only). Parsing of candidate lists is lenient: a JSON list, a numbered
list, or blank-line-separated blocks; empty or garbage output yields no candidate.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from typing import Any

Message = dict[str, str]


class Generator:
    """Base: a backend name, `chat`, and `chat_many` (batched where the backend can)."""

    name = "template"
    capable = False
    """Follows meta-instructions (hypotheses, JSON lists, judging): only the endpoint backend."""

    def chat(self, messages: Sequence[Message], temperature: float, max_tokens: int) -> str:
        raise NotImplementedError(f"the {self.name} generator has no chat model")

    def chat_many(self, batch: Sequence[Sequence[Message]], temperature: float, max_tokens: int) -> list[str]:
        return [self.chat(m, temperature, max_tokens) for m in batch]


class TemplateGenerator(Generator):
    name = "template"


class LocalGenerator(Generator):
    """The embedded instruct model: chat template, sampling at `temperature` (greedy at 0), batched."""

    name = "local"

    def __init__(self, model: Any, seed: int = 0, batch_size: int = 16):
        import torch

        self.model = model
        self.batch_size = batch_size
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + 0x10C)

    def _prompt(self, messages: Sequence[Message]) -> str:
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user = "\n\n".join(m["content"] for m in messages if m["role"] == "user")
        return self.model.chat_text(user, system=system)

    def chat(self, messages: Sequence[Message], temperature: float, max_tokens: int) -> str:
        return self.chat_many([messages], temperature, max_tokens)[0]

    def chat_many(self, batch: Sequence[Sequence[Message]], temperature: float, max_tokens: int) -> list[str]:
        import torch

        from interp.generate import greedy

        gen = self.gen

        def sample(_: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
            if temperature <= 0:
                return logits
            u = torch.rand(logits.shape, generator=gen).clamp_(1e-10, 1 - 1e-10).to(logits.device)
            return logits / temperature - torch.log(-torch.log(u))  # Gumbel-max: a categorical sample

        prompts = [self._prompt(m) for m in batch]
        out = greedy(self.model, prompts, max_tokens, logits_fn=sample, templated=self.model.info.chat,
                     batch_size=self.batch_size)
        return [self.model.tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in out]


class OpenAIGenerator(Generator):
    """Any OpenAI-compatible chat endpoint: POST {url}/chat/completions (httpx), with retries."""

    name = "openai"
    capable = True

    def __init__(self, url: str, model: str | None, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
                 retries: int = 2, backoff: float = 1.0):
        self.url = url.rstrip("/")
        self.model = model or "default"
        self.key = os.environ.get(api_key_env, "")
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.log: list[dict[str, Any]] = []
        """Every request and response (audit)."""

    def chat(self, messages: Sequence[Message], temperature: float, max_tokens: int) -> str:
        import httpx

        body = {"model": self.model, "messages": list(messages), "temperature": temperature, "max_tokens": max_tokens}
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        err: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                r = httpx.post(f"{self.url}/chat/completions", json=body, headers=headers, timeout=self.timeout)
                r.raise_for_status()
                text = r.json()["choices"][0]["message"]["content"] or ""
                self.log.append({"messages": list(messages), "response": text, "attempt": attempt})
                return text
            except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError) as e:
                err = e
                if attempt < self.retries:
                    time.sleep(self.backoff * (attempt + 1))
        self.log.append({"messages": list(messages), "response": None, "error": repr(err)})
        raise GeneratorError(f"the endpoint {self.url}/chat/completions failed after {self.retries + 1} tries: {err}")


class GeneratorError(RuntimeError):
    """The endpoint did not answer usably."""


def make_generator(cfg, model: Any) -> Generator:
    if cfg.generator == "openai":
        return OpenAIGenerator(cfg.generator_url, cfg.generator_model, cfg.api_key_env)
    if cfg.generator == "local":
        return LocalGenerator(model, cfg.seed)
    return TemplateGenerator()


# ============================================================================= parsing


def parse_candidates(text: str | None) -> list[str]:
    """Candidate texts from a reply: a JSON list, a numbered list, or blank-line-separated blocks."""
    if not text or not text.strip():
        return []
    t = text.strip()
    t = re.sub(r"^```[a-z]*\s*|\s*```$", "", t)
    lo, hi = t.find("["), t.rfind("]")
    if lo >= 0 and hi > lo:
        try:
            items = json.loads(t[lo : hi + 1])
            if isinstance(items, list):
                return [_clean(str(x)) for x in items if isinstance(x, str) and _clean(x)]
        except ValueError:
            pass
    numbered = re.split(r"(?m)^\s*(?:\d+[.)]|[-*])\s+", t)
    if len(numbered) > 2:
        return [_clean(x) for x in numbered[1:] if _clean(x)]
    blocks = [_clean(b) for b in re.split(r"\n\s*\n", t)]
    return [b for b in blocks if b]


def _clean(s: str) -> str:
    s = s.strip().strip('"').strip("'").strip()
    s = re.sub(r"^(?:text|answer|rewrite|rewritten solution)\s*\d*\s*:\s*", "", s, flags=re.I)
    return " ".join(s.split())


def parse_json_object(text: str | None) -> dict | None:
    if not text:
        return None
    lo, hi = text.find("{"), text.rfind("}")
    if lo < 0 or hi <= lo:
        return None
    try:
        obj = json.loads(text[lo : hi + 1])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def yes_no(text: str | None, yes: str = "yes") -> bool | None:
    """True/False from a yes/no style reply (None when unreadable)."""
    if not text:
        return None
    t = text.strip().lower()
    if t.startswith(yes):
        return True
    if t.startswith(("no", "different")):
        return False
    return None
