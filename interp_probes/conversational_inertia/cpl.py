"""Context Preference Learning pairs: for one state, the short-context reply is preferred to the long one.

prompt = the Long-context messages (DPO needs one shared prompt, and the goal is calibration under
long context; reconstructed), chosen = the reply under Short, rejected = the reply under Long, in the
conversational preference format of common DPO trainers (lists of role/content messages).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from . import envs
from .envs import Episode


def keep_pair(long_out: str, short_out: str, ep: Episode, cpl_filter: str) -> bool:
    """The parsed actions differ (or, when neither parses, the texts do); short_correct: also a correct short."""
    a_long, _ = envs.parse_action(long_out)
    a_short, _ = envs.parse_action(short_out)
    differs = a_long != a_short if (a_long is not None or a_short is not None) else long_out != short_out
    if cpl_filter == "short_correct":
        return differs and a_short is not None and a_short in ep.correct
    return differs


def pairs(states: Sequence[Episode], long_text: dict[str, str], short_text: dict[str, str],
          long_messages: dict[str, list], outputs: dict[str, str], cpl_filter: str) -> list[dict]:
    """Preference records for the states whose long and short replies qualify.

    long_text / short_text: state id -> the rendered prompt under Long / Short; outputs: prompt -> reply.
    """
    out = []
    for ep in states:
        y_long, y_short = outputs[long_text[ep.id]], outputs[short_text[ep.id]]
        if not keep_pair(y_long, y_short, ep, cpl_filter):
            continue
        out.append({
            "state_id": ep.id, "env": ep.env, "kind": ep.kind, "N": ep.n,
            "prompt": long_messages[ep.id],
            "chosen": [{"role": "assistant", "content": y_short}],
            "rejected": [{"role": "assistant", "content": y_long}],
            "action_chosen": envs.parse_action(y_short)[0],
            "action_rejected": envs.parse_action(y_long)[0],
            "c_prev": ep.c_prev, "correct": list(ep.correct),
        })
    return out


def table(records: Sequence[dict]) -> pd.DataFrame:
    """The pairs as a flat table (the prompt as JSON text)."""
    import json

    cols = ["state_id", "env", "kind", "N", "prompt", "chosen", "rejected", "action_chosen", "action_rejected",
            "c_prev"]
    rows = [{**{k: r[k] for k in cols}, "prompt": json.dumps(r["prompt"]), "chosen": r["chosen"][0]["content"],
             "rejected": r["rejected"][0]["content"]} for r in records]
    return pd.DataFrame(rows, columns=cols)
