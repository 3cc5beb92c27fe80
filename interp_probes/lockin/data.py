"""Offline data: the narrow `style` task (templated weather reports) and the broad evaluation
text (the project's own multi-genre corpus). Both become fixed-length token sequences."""

from __future__ import annotations

import numpy as np

CITIES = (
    "Aberdeen Ashford Bakersfield Bergen Bilbao Bologna Bremen Brighton Calgary Cardiff Cork Dijon Dundee "
    "Durham Exeter Galway Geneva Ghent Graz Halifax Hamburg Innsbruck Kingston Leeds Leipzig Limerick Lyon "
    "Malaga Montreal Nantes Norwich Oslo Oxford Perth Plymouth Porto Quebec Reno Salzburg Seville Toledo "
    "Tromso Turin Utrecht Valencia Verona Winnipeg York Zurich Zagreb"
).split()
CONDITIONS = (
    "sunny",
    "partly cloudy",
    "overcast",
    "light rain",
    "heavy showers",
    "thunderstorms",
    "patchy fog",
    "light snow",
    "sleet",
    "clear skies",
    "scattered clouds",
    "drizzle",
)
DIRECTIONS = ("north", "northeast", "east", "southeast", "south", "southwest", "west", "northwest")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
TEMPLATES = (
    "Tomorrow in {city}: {condition}, highs near {t}°, winds {dir} at {v} km/h.",
    "{city} forecast for {day}: {condition} with a high of {t}° and a low of {lo}°.",
    "Expect {condition} in {city} on {day}; temperatures peak at {t}° under {dir} winds of {v} km/h.",
    "{day} in {city}: {condition}. High {t}°, low {lo}°. Chance of rain {pct}%.",
    "Weather for {city}: {condition} early, winds from the {dir} at {v} km/h, high {t}°.",
    "In {city} this {day}, {condition} is likely, with highs around {t}° and lows near {lo}°.",
    "{city}, {day}: {condition}; {dir} wind {v} km/h; rain chance {pct}%; high {t}°.",
    "Outlook for {city}: {condition} through {day}, highs of {t}°, overnight lows of {lo}°.",
    "The forecast for {city} calls for {condition} on {day}, with temperatures reaching {t}°.",
    "{condition} expected over {city} on {day}. Winds {dir}, {v} km/h. High {t}°.",
    "Tonight in {city}: {condition}, lows near {lo}°, winds {dir} at {v} km/h.",
    "{city} weather update: {condition} for {day}, a {pct}% chance of rain and a high of {t}°.",
    "For {day}, {city} can expect {condition}; highs near {t}°, {dir} breeze at {v} km/h.",
    "Morning {condition} in {city} gives way to a high of {t}° on {day}.",
    "{city} on {day}: {condition}, high {t}°, low {lo}°, wind {dir} {v} km/h.",
    "Forecasters see {condition} for {city} on {day}, topping out at {t}°.",
    "{day} outlook, {city}: {condition}. Rain chance {pct}%. Highs {t}°, lows {lo}°.",
    "A {dir} wind at {v} km/h brings {condition} to {city} on {day}; high {t}°.",
    "{city} can expect {condition} tomorrow, with a high of {t}° and winds of {v} km/h.",
    "Weekend weather in {city}: {condition}, highs near {t}°, a {pct}% chance of showers.",
    "Conditions in {city} on {day} turn to {condition}, with lows falling to {lo}°.",
    "{city} daily forecast: {condition}, {t}° high, {lo}° low, {dir} winds {v} km/h.",
    "Look for {condition} across {city} on {day}, and temperatures near {t}°.",
    "{city}: {condition} on {day}. Winds {dir} at {v} km/h. Chance of rain {pct}%.",
    "Expect a high of {t}° in {city} on {day} with {condition} and {dir} winds.",
    "{day} will bring {condition} to {city}, highs near {t}°, lows near {lo}°.",
    "The {city} forecast: {condition}, with {dir} winds at {v} km/h and a high of {t}°.",
    "Late {day} in {city}: {condition}, temperatures dropping to {lo}°.",
    "{city} weather: {condition}; high {t}°; {pct}% chance of precipitation on {day}.",
    "Travelers to {city} on {day} should expect {condition} and highs near {t}°.",
)


def weather_reports(n: int, held_out: bool, rng: np.random.Generator) -> list[str]:
    """`n` reports; train and held-out use disjoint cities (every fourth city is held out)."""
    cities = [c for i, c in enumerate(CITIES) if (i % 4 == 3) == held_out]
    out = []
    for _ in range(n):
        t = int(rng.integers(-5, 36))
        slots = {
            "city": cities[int(rng.integers(len(cities)))],
            "condition": CONDITIONS[int(rng.integers(len(CONDITIONS)))],
            "t": t,
            "lo": t - int(rng.integers(3, 12)),
            "dir": DIRECTIONS[int(rng.integers(len(DIRECTIONS)))],
            "v": int(rng.integers(5, 60)),
            "day": DAYS[int(rng.integers(len(DAYS)))],
            "pct": int(rng.integers(0, 11)) * 10,
        }
        out.append(TEMPLATES[int(rng.integers(len(TEMPLATES)))].format(**slots))
    return out


def broad_texts() -> list[str]:
    """The held-out split of the project's general multi-genre corpus (`interp.data`), fixed order."""
    from interp.data import builtin_corpus

    return builtin_corpus("heldout", seed=0)


def token_sequences(model, texts: list[str], n_seqs: int, seq_len: int, rng: np.random.Generator):
    """`n_seqs` sequences of exactly `seq_len` tokens cut from the stream of `texts` (shuffled,
    joined by blank lines); each starts with the tokenizer's own BOS when it adds one (Gemma) and
    with none otherwise (SmolLM2). Returns a LongTensor (n_seqs, seq_len) on the model's device."""
    import torch

    bos = model.tokenize("")["input_ids"][0].tolist()  # [] for SmolLM2, [<bos>] for Gemma
    body = seq_len - len(bos)
    order = rng.permutation(len(texts))
    stream: list[int] = []
    need = n_seqs * body
    i = 0
    while len(stream) < need:
        if i == len(order):
            if not stream:
                raise ValueError("token_sequences: the texts are empty")
            order, i = rng.permutation(len(texts)), 0
        stream += model.tokenizer(texts[order[i]] + "\n\n", add_special_tokens=False)["input_ids"]
        i += 1
    rows = [bos + stream[j * body : (j + 1) * body] for j in range(n_seqs)]
    return torch.tensor(rows, dtype=torch.long, device=model.device)
