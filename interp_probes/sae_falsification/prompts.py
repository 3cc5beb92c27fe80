"""The counterexample loop's prompt texts (versioned: change PROMPTS_VERSION with any edit).

Two sets: `capable` for an OpenAI-compatible endpoint (meta-instructions, several candidates per call, JSON), and
`local` for the embedded 135M instruct model, which seldom follows meta-instructions: concrete, one candidate
per call ("Write three sentences about {topic} using the words X and Y").
"""

from __future__ import annotations

PROMPTS_VERSION = "1"

SYSTEM = "You are a careful assistant helping to test what a feature of a language model responds to."

HYPOTHESIS = """A feature of a language model fires on some texts. Here is the evidence.

Tokens with the highest mean activation: {tokens}
Most frequent n-grams around those tokens: {ngrams}
Top-activating examples (the most active token in [brackets]):
{examples}

In one sentence, name the lexical, syntactic, discourse or stylistic pattern this feature detects."""

FALSE_POSITIVES = """Hypothesis about a feature: {hypothesis}
It fires strongly on these tokens: {tokens}.

Write {n} short texts of 50 to 100 words each that are clearly NOT reasoning: a story, a description, a product
review or a news item. They must contain no calculation, no equation, no step-by-step derivation and no
"the answer is". But each text should contain the pattern above (use the tokens naturally).
{history}
Return a JSON list of {n} strings and nothing else."""

FALSE_NEGATIVE = """Here is a worked solution:

{source}

Rewrite it so that it keeps exactly the same problem, the same steps, the same numbers and the same final answer,
but does not use any of these words or symbols: {tokens}. Also avoid this pattern: {hypothesis}
Write the numbers as digits. Return only the rewritten solution."""

JUDGE_REASONING = """Does this text contain step-by-step reasoning or a derivation? Answer "yes" or "no" only.

Text: {text}"""

JUDGE_SAME = """Do these two texts describe the same problem with the same solution and the same final answer?
Answer "same meaning" or "different" only.

Text A: {source}

Text B: {text}"""

VERDICT = """A language-model feature was thought to detect reasoning. Evidence:

Top tokens: {tokens}
Hypothesis: {hypothesis}
Injecting the top tokens into non-reasoning text: best effect size d = {d:.2f} ({cls}).
Non-reasoning texts that activate it (false positives): {fps}
Reasoning rewrites that do not activate it (false negatives): {fns}

Return a JSON object with the keys interpretation, activates_on, does_not_activate_on, confidence (0-1) and
is_genuine_reasoning_feature (true/false), and nothing else."""

HISTORY = """Earlier attempts (activation as a share of the reference maximum):
{lines}"""

# the local set: one concrete candidate per call
LOCAL_FP = "Write three sentences about {topic} using the words {w1} and {w2}."
LOCAL_FN = "Rewrite this without the words {tokens}, keeping every number:\n\n{source}"
TOPICS = ("a walk by the sea", "a birthday party", "an old bookshop", "a rainy afternoon", "a garden in spring",
          "a train journey", "a village market", "a cat on a windowsill", "a football match", "a new bakery",
          "a winter morning", "a visit to grandparents", "a lost umbrella", "a concert in the park")
