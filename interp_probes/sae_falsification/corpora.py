"""The offline corpora: generated step-by-step reasoning traces, and non-reasoning text in which digits and the
reasoning corpus's own discourse markers are common too; the steering problems.

Everything is seeded (`random.Random`) and torch-free. Reasoning families: arithmetic word problems, ordering
and syllogism puzzles, linear equations, rate and unit conversions, and "thinking-style" monologues with
self-checks. Connectives come from pools, so no single token marks every sample. Non-reasoning families:
narratives, descriptions, reviews and event reports, recipes and procedures (10 %), and paragraphs of the
project's general corpus. At least 30 % of non-reasoning samples carry digits that compute nothing (prices,
dates, counts, times, addresses, model numbers), and at least 20 % use the reasoning markers in non-reasoning
senses ("So we went home.", "Then the bus came.", "Room 4 = the library"): without them a digit or marker
detector would separate the corpora by construction (`digit_oracle_auc`, `marker_oracle_auc` measure how far
such detectors still get).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

REASONING_FAMILIES = ("arithmetic", "ordering", "equation", "rate", "monologue")
NONREASONING_FAMILIES = ("narrative", "description", "review", "recipe", "general")
#: Shares of the non-reasoning families (recipes and procedures are 10 %, as the Pile's mix).
NON_SHARES = {"narrative": 0.25, "description": 0.2, "review": 0.2, "recipe": 0.1, "general": 0.25}

NAMES = ("Mia", "Liam", "Ava", "Noah", "Zoe", "Omar", "Lena", "Ravi", "Nora", "Eli", "Sara", "Tom", "Ines", "Kofi",
         "Yuki", "Hana", "Leo", "Maya", "Ben", "Ada", "Iris", "Jonas", "Priya", "Sam", "Elena", "Marco", "Tess", "Dev")
PRONOUN = {n: ("she" if n in ("Mia", "Ava", "Zoe", "Lena", "Nora", "Sara", "Ines", "Yuki", "Hana", "Maya", "Ada",
                              "Iris", "Priya", "Elena", "Tess") else "he") for n in NAMES}
ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "books", "coins", "stamps", "shells", "cards", "eggs",
         "oranges", "tickets", "beads", "plants", "candles", "buttons", "balloons", "crayons", "postcards")
GAIN = ("buys", "finds", "gets", "is given", "picks up", "wins", "receives")
LOSS = ("gives away", "eats", "loses", "sells", "uses", "gives", "drops")
CONTAINERS = ("boxes", "bags", "packs", "jars", "baskets", "crates", "trays")

# connective pools of the reasoning corpus
OPEN = ("First,", "To begin,", "We know that", "Start with this:", "Step 1:", "Let us see.", "Begin with the facts.")
NEXT = ("Next,", "Then", "After that,", "Step 2:", "Now", "In the next step,", "Moving on,")
CONCL = ("The answer is", "So the answer is", "Therefore, the answer is", "Hence the answer is",
         "This means the answer is",
         "The final answer is", "So we get")
SO = ("so", "which means", "and therefore", "hence", "this gives", "that makes")

# non-reasoning uses of the reasoning markers (>= 20 % of non-reasoning samples carry one)
MARKER_SENTENCES = (
    "So we went home.", "Then the bus came.", "Then it started to rain.", "So that was the end of the trip.",
    "First, we had breakfast by the window.", "Next, the band played an old song.", "This means a lot to our family.",
    "Therefore the shop stays closed on Mondays.", "Hence the name of the street.", "So the evening ended quietly.",
    "Then everyone clapped.", "So I bought a second one for my sister.", "Room 4 = the library.",
    "Key: A = the north gate, B = the old mill.", "Then we walked along the river.", "Next to the door stood a lamp.",
)
MARKER_WORDS = re.compile(r"(^|\W)(so|then|therefore|hence|this means|first|next|thus)(\W|$)|=", re.IGNORECASE)


@dataclass
class Sample:
    """One corpus text with its label and what the counterexample checks need."""

    text: str
    label: str
    """"reasoning" or "non"."""
    family: str
    answer: str | None = None
    """The final answer of a reasoning trace (as written), else None."""
    split: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def has_digit(self) -> bool:
        return any(c.isdigit() for c in self.text)

    @property
    def has_marker(self) -> bool:
        return bool(MARKER_WORDS.search(self.text))


def _name(rng: random.Random, exclude: Sequence[str] = ()) -> str:
    return rng.choice([n for n in NAMES if n not in exclude])


# ============================================================================= reasoning families


def arithmetic(rng: random.Random) -> Sample:
    """A two- or three-step word problem with its worked solution."""
    n = _name(rng)
    p = PRONOUN[n]
    item = rng.choice(ITEMS)
    kind = rng.randrange(3)
    if kind == 0:  # a + b - c
        a, b = rng.randint(8, 60), rng.randint(3, 40)
        c = rng.randint(2, a + b - 1)
        s, r = a + b, a + b - c
        q = rng.choice([
            f"{n} has {a} {item}. {p.capitalize()} {rng.choice(GAIN)} {b} more and then {rng.choice(LOSS)} {c}. "
            f"How many {item} does {n} have now?",
            f"Question: {n} starts with {a} {item}, gets {b} more, and later loses {c}. How many are left?",
            f"Problem: There are {a} {item} in a box. {n} adds {b} and takes out {c}. How many {item} are in the box?",
        ])
        steps = [f"{rng.choice(OPEN)} {a} + {b} = {s}, {rng.choice(SO)} there are {s} {item}.",
                 f"{rng.choice(NEXT)} {s} - {c} = {r}.",
                 f"{rng.choice(CONCL)} {r}."]
        if rng.random() < 0.5:
            steps[0] = f"{rng.choice(OPEN)} {n} has {a} + {b} = {s} {item}."
            steps[1] = f"{rng.choice(NEXT)} {p} {rng.choice(LOSS)} {c}, which leaves {s} - {c} = {r}."
    elif kind == 1:  # a x b - c
        a, b = rng.randint(2, 9), rng.randint(3, 12)
        s = a * b
        c = rng.randint(1, s - 1)
        r = s - c
        box = rng.choice(CONTAINERS)
        q = rng.choice([
            f"{n} buys {a} {box} of {item} with {b} in each. {p.capitalize()} {rng.choice(LOSS)} {c} of them. "
            f"How many {item} remain?",
            f"Problem: {a} {box} hold {b} {item} each, and {c} {item} are used. How many are left?",
        ])
        steps = [f"{rng.choice(OPEN)} {a} × {b} = {s} {item} in total.",
                 f"{rng.choice(NEXT)} {s} - {c} = {r}, {rng.choice(SO)} {r} {item} remain.",
                 f"{rng.choice(CONCL)} {r}."]
    else:  # (a + b) / c shared equally
        c = rng.randint(2, 6)
        r = rng.randint(3, 15)
        s = c * r
        a = rng.randint(1, s - 1)
        b = s - a
        q = rng.choice([
            f"{n} has {a} {item} and {rng.choice(GAIN)} {b} more. {p.capitalize()} shares them equally among {c} "
            f"friends. How many does each friend get?",
            f"Question: {a} red and {b} blue {item} are split evenly into {c} groups. "
            f"How many {item} are in each group?",
        ])
        steps = [f"{rng.choice(OPEN)} {a} + {b} = {s} {item} altogether.",
                 f"{rng.choice(NEXT)} {s} / {c} = {r}, {rng.choice(SO)} each gets {r}.",
                 f"{rng.choice(CONCL)} {r}."]
    return Sample(f"{q} {' '.join(steps)}", "reasoning", "arithmetic", str(r))


ORDER_RELS = (("taller", "tallest", "shortest"), ("older", "oldest", "youngest"), ("faster", "fastest", "slowest"),
              ("heavier", "heaviest", "lightest"), ("richer", "richest", "poorest"))
SYLLO = (("robins", "birds", "animals", "robin"), ("roses", "flowers", "plants", "rose"),
         ("squares", "rectangles", "shapes with four sides", "square"), ("trout", "fish", "animals that swim", "trout"),
         ("violins", "string instruments", "musical instruments", "violin"), ("oaks", "trees", "plants", "oak"),
         ("sparrows", "birds", "creatures with feathers", "sparrow"), ("cars", "vehicles", "machines", "car"))


def ordering(rng: random.Random) -> Sample:
    """An ordering puzzle or a syllogism with explicit inferences (few or no digits)."""
    if rng.random() < 0.55:
        rel, top, bottom = rng.choice(ORDER_RELS)
        a, b, c = rng.sample(NAMES, 3)
        ask_top = rng.random() < 0.5
        ans = a if ask_top else c
        q = f"{a} is {rel} than {b}. {b} is {rel} than {c}. Who is the {top if ask_top else bottom}?"
        steps = [
            f"{rng.choice(OPEN)} {a} is {rel} than {b}, and {b} is {rel} than {c}.",
            f"Since {a} is {rel} than {b} and {b} is {rel} than {c}, it follows that {a} is {rel} than {c}.",
            f"{rng.choice(NEXT)} {'nobody is ' + rel + ' than ' + a if ask_top else c + ' is below both others'}.",
            f"{rng.choice(CONCL)} {ans}.",
        ]
        return Sample(f"{q} {' '.join(steps)}", "reasoning", "ordering", ans)
    x, y, z, one = rng.choice(SYLLO)
    n = _name(rng)
    art = "an" if one[0] in "aeiou" else "a"
    q = f"All {x} are {y}. All {y} are {z}. {n} owns {art} {one}. Is it one of the {z}?"
    steps = [
        f"{rng.choice(OPEN)} the {one} is one of the {x}.",
        f"Every one of the {x} is one of the {y}, {rng.choice(SO)} the {one} is one of the {y}.",
        f"{rng.choice(NEXT)} all {y} are {z}, so it follows that the {one} is one of the {z}.",
        f"{rng.choice(CONCL)} yes.",
    ]
    return Sample(f"{q} {' '.join(steps)}", "reasoning", "ordering", "yes")


def equation(rng: random.Random) -> Sample:
    """A linear equation solved step by step, with a check."""
    a, x = rng.randint(2, 9), rng.randint(2, 15)
    b = rng.randint(1, 30)
    c = a * x + b
    v = rng.choice("xynk")
    q = rng.choice([f"Solve for {v}: {a}{v} + {b} = {c}.", f"Find {v} if {a}{v} + {b} = {c}.",
                    f"Problem: {a}{v} + {b} = {c}. What is {v}?"])
    steps = [f"{rng.choice(OPEN)} subtract {b} from both sides: {a}{v} = {c - b}.",
             f"{rng.choice(NEXT)} divide both sides by {a}: {v} = {x}.",
             f"Check: {a} × {x} + {b} = {c}, which is correct.",
             f"{rng.choice(CONCL)} {v} = {x}." if rng.random() < 0.5 else f"{rng.choice(CONCL)} {x}."]
    return Sample(f"{q} {' '.join(steps)}", "reasoning", "equation", str(x))


UNITS = (("hours", "minutes", 60), ("minutes", "seconds", 60), ("meters", "centimeters", 100),
         ("kilograms", "grams", 1000), ("days", "hours", 24), ("weeks", "days", 7), ("liters", "milliliters", 1000))


def rate(rng: random.Random) -> Sample:
    """A rate, price or unit-conversion problem."""
    kind = rng.randrange(3)
    if kind == 0:
        v, t = rng.randint(3, 90), rng.randint(2, 8)
        d = v * t
        who = rng.choice(["A train", "A car", "A cyclist", "A boat", "A runner"])
        q = f"{who} travels at {v} km per hour for {t} hours. How far does it go?"
        steps = [f"{rng.choice(OPEN)} distance = speed × time.",
                 f"{rng.choice(NEXT)} {v} × {t} = {d}, {rng.choice(SO)} it travels {d} km.",
                 f"{rng.choice(CONCL)} {d} km."]
        ans = d
    elif kind == 1:
        big, small, f = rng.choice(UNITS)
        k = rng.randint(2, 9)
        ans = k * f
        q = f"How many {small} are there in {k} {big}?"
        steps = [f"{rng.choice(OPEN)} one of the {big} has {f} {small}.",
                 f"{rng.choice(NEXT)} {k} × {f} = {ans}, {rng.choice(SO)} there are {ans} {small}.",
                 f"{rng.choice(CONCL)} {ans}."]
    else:
        price, k = rng.randint(2, 25), rng.randint(3, 12)
        paid = price * k + rng.choice([0, 5, 10, 20])
        ans = paid - price * k
        n = _name(rng)
        item = rng.choice(ITEMS)
        q = f"{n} buys {k} {item} at {price} dollars each and pays with {paid} dollars. How much change is left?"
        steps = [f"{rng.choice(OPEN)} {k} × {price} = {price * k} dollars in total.",
                 f"{rng.choice(NEXT)} {paid} - {price * k} = {ans}, {rng.choice(SO)} the change is {ans} dollars.",
                 f"{rng.choice(CONCL)} {ans}."]
    return Sample(f"{q} {' '.join(steps)}", "reasoning", "rate", str(ans))


HMM = ("Hmm, let me think.", "Okay, let me work this out.", "Let me think about this carefully.", "Alright, so.",
       "Hmm, okay.", "Let me see.")
CHECK = ("Wait, let me double-check:", "Hold on, let me check that again:", "Hmm, wait:", "Actually, let me verify:",
         "Let me recompute:")


def monologue(rng: random.Random) -> Sample:
    """A thinking-style monologue with a slip and a self-check."""
    n = _name(rng)
    item = rng.choice(ITEMS)
    a, b = rng.randint(3, 9), rng.randint(4, 9)
    right = a * b
    wrong = right + rng.choice([-2, -1, 1, 2])
    c = rng.randint(1, 9)
    r = right + c
    box = rng.choice(CONTAINERS)
    text = (f"{rng.choice(HMM)} {n} has {a} {box} with {b} {item} in each, plus {c} loose ones. "
            f"So {a} × {b} is {wrong}, I think. {rng.choice(CHECK)} {a} × {b} is {right}, not {wrong}. "
            f"{rng.choice(NEXT)} add the {c} loose ones: {right} + {c} = {r}. "
            f"{rng.choice(['Okay,', 'Good,', 'Right,'])} {rng.choice(CONCL).lower()} {r}.")
    return Sample(text, "reasoning", "monologue", str(r))


REASONING_GEN: dict[str, Callable[[random.Random], Sample]] = {
    "arithmetic": arithmetic, "ordering": ordering, "equation": equation, "rate": rate, "monologue": monologue}


# ============================================================================= non-reasoning families

PLACES = ("the market", "the harbour", "the old library", "the park", "the station", "the bakery", "the museum",
          "the beach", "the hill above town", "the river path", "the garden centre", "the town square")
WEATHER = ("a light rain", "bright sunshine", "a cold wind", "thick fog", "a warm breeze", "a low grey sky")
EVENTS = ("a street band was playing", "a dog chased a ball across the grass", "two children were flying a kite",
          "an old man was feeding the pigeons", "the cafe was setting out its chairs", "a cyclist rang her bell",
          "the church bells started ringing", "a delivery van blocked the lane")
TOPICS = ("the summer", "an old friend", "the new cafe", "a film", "the garden", "a long letter", "the harvest")
FEELINGS = ("quiet and content", "a little tired", "happy to be outside", "glad of the company", "hungry")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
STREETS = ("Elm Street", "Mill Lane", "Harbour Road", "Station Road", "Church Walk", "Orchard Close", "High Street")


def _digits_clause(rng: random.Random) -> str:
    """A clause with digits that compute nothing: a date, time, address, price, count or model number."""
    return rng.choice([
        f"It was {rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(1990, 2024)}.",
        f"The clock on the wall said {rng.randint(1, 12)}:{rng.choice(['00', '15', '30', '45'])}.",
        f"We stayed at number {rng.randint(2, 98)} {rng.choice(STREETS)}.",
        f"The tickets cost ${rng.randint(3, 40)} each.",
        f"About {rng.randint(20, 400)} people were there.",
        f"The bus was the number {rng.randint(3, 99)}.",
        f"It was built in {rng.randint(1700, 1990)}.",
        f"Her phone was an old model {rng.choice('ABCXZ')}-{rng.randint(100, 990)}.",
    ])


def narrative(rng: random.Random) -> Sample:
    n, m = rng.sample(NAMES, 2)
    p = PRONOUN[n]
    parts = [f"{n} walked to {rng.choice(PLACES)} on a {rng.choice(['Monday', 'Saturday', 'Sunday', 'Friday'])} "
             f"morning.", f"There was {rng.choice(WEATHER)}, and {rng.choice(EVENTS)}.",
             f"{p.capitalize()} met {m} by the gate, and they talked about {rng.choice(TOPICS)}.",
             f"Later they sat near {rng.choice(PLACES)} while {rng.choice(EVENTS)}.",
             f"By the evening {n} felt {rng.choice(FEELINGS)}."]
    return Sample(" ".join(_sprinkle(rng, parts)), "non", "narrative")


ANIMALS = (("The red fox", "a bushy tail and sharp ears", "woods and the edges of farms", "mice, berries and insects"),
           ("The grey heron", "long legs and a dagger-like bill", "rivers and marshes", "fish and frogs"),
           ("The hedgehog", "a coat of spines", "gardens and hedgerows", "beetles and worms"),
           ("The otter", "thick brown fur", "clean rivers", "fish and crayfish"),
           ("The barn owl", "a pale heart-shaped face", "open farmland", "voles and mice"))
OBJECTS = (("The lighthouse", "stands on a rocky point north of the harbour", "its walls are painted white"),
           ("The old mill", "sits beside the weir at the edge of the village", "its wheel still turns in winter"),
           ("The clock tower", "rises above the square", "its four faces are lit at night"),
           ("The footbridge", "crosses the river below the church", "its railings are painted green"),
           ("The writing desk", "has three narrow drawers and a leather top", "its brass handles are worn smooth"))


def description(rng: random.Random) -> Sample:
    if rng.random() < 0.5:
        a, look, home, food = rng.choice(ANIMALS)
        parts = [f"{a} has {look}.", f"It lives in {home} and feeds mostly on {food}.",
                 "In spring the young stay close to the den, and in autumn they spread out to find their own ground.",
                 "It is most active at dusk, when the light is low and the paths are quiet."]
    else:
        o, where, look = rng.choice(OBJECTS)
        parts = [f"{o} {where}.", f"{look.capitalize()}, and visitors often stop to take pictures.",
                 "The stone is grey and rough, with moss along the lower edge.",
                 f"On clear days you can see it from {rng.choice(PLACES)}."]
    return Sample(" ".join(_sprinkle(rng, parts)), "non", "description")


FLAWS = ("the lid is stiff", "the cord is short", "the colour fades", "the button sticks", "the box was dented")


def review(rng: random.Random) -> Sample:
    if rng.random() < 0.55:
        thing = rng.choice(["blender", "kettle", "rucksack", "desk lamp", "pair of boots", "toaster", "umbrella",
                            "coffee grinder"])
        parts = [f"I bought this {thing} for my kitchen last {rng.choice(MONTHS)}.",
                 f"It {rng.choice(['looks smart', 'feels solid', 'is lighter than I expected', 'arrived well packed'])}"
                 f" and {rng.choice(['works well', 'is easy to clean', 'is quiet', 'has lasted so far'])}.",
                 f"The only problem is that {rng.choice(FLAWS)}.",
                 f"{rng.choice(['Overall I am happy with it.', 'I would buy it again.', 'It is fine for the price.'])}"]
    else:
        ev = rng.choice(["spring fair", "book sale", "summer concert", "charity run", "flower show", "craft market"])
        parts = [f"The {ev} took place on the village green.",
                 f"Stalls sold {rng.choice(['cakes and jam', 'old books', 'plants and seeds', 'paintings'])}, and "
                 f"{rng.choice(EVENTS)}.",
                 "The organisers thanked the volunteers and the weather held until the end.",
                 "Next year's event is already being planned."]
    return Sample(" ".join(_sprinkle(rng, parts, digit_p=0.75)), "non", "review")


def recipe(rng: random.Random) -> Sample:
    dish = rng.choice(["a simple tomato soup", "oat biscuits", "a lemon cake", "vegetable curry", "bread rolls"])
    t, mins = rng.choice([160, 180, 200, 220]), rng.choice([15, 20, 25, 30, 40])
    parts = [f"To make {dish}, gather the ingredients first.",
             f"Heat the oven to {t} degrees and grease a tin.",
             f"Mix {rng.randint(1, 3)} cups of flour with a pinch of salt, then stir in the butter.",
             f"Then bake for {mins} minutes until golden, and finally leave it to cool on a rack."]
    return Sample(" ".join(parts), "non", "recipe")


def _sprinkle(rng: random.Random, parts: list[str], digit_p: float = 0.45, marker_p: float = 0.3) -> list[str]:
    """Add a digit clause and a non-reasoning marker sentence at random places, each with its probability."""
    parts = list(parts)
    if rng.random() < digit_p:
        parts.insert(rng.randrange(1, len(parts) + 1), _digits_clause(rng))
    if rng.random() < marker_p:
        parts.insert(rng.randrange(1, len(parts) + 1), rng.choice(MARKER_SENTENCES))
    return parts


NON_GEN: dict[str, Callable[[random.Random], Sample]] = {
    "narrative": narrative, "description": description, "review": review, "recipe": recipe}


# ============================================================================= the corpora


def build_corpora(seed: int, counts: dict[str, tuple[int, int]], general: Sequence[str],
                  injection_families: Sequence[str] = ("narrative", "description", "review")) -> list[Sample]:
    """Samples per split: counts[split] = (n_reasoning, n_nonreasoning), all texts distinct across splits.

    Reasoning families are drawn in turn; non-reasoning families by `NON_SHARES`. The split "injection" holds
    plainly non-reasoning texts only (families `injection_families`, no marker sentence).
    """
    rng = random.Random(seed * 7919 + 17)
    seen: set[str] = set()
    out: list[Sample] = []
    general_pool = list(general)
    rng.shuffle(general_pool)
    g_at = 0

    def draw(gen: Callable[[random.Random], Sample], ok: Callable[[Sample], bool] = lambda s: True) -> Sample:
        for _ in range(200):
            s = gen(rng)
            if s.text not in seen and ok(s):
                seen.add(s.text)
                return s
        raise ValueError(f"corpus generator {gen.__name__} ran out of distinct texts")

    def general_one(_: random.Random) -> Sample:
        nonlocal g_at
        while g_at < len(general_pool):
            p = general_pool[g_at]
            g_at += 1
            if len(p.split()) >= 30:
                return Sample(" ".join(p.split()[:90]), "non", "general")
        raise ValueError("the general corpus ran out of paragraphs for the non-reasoning corpus")

    for split, (n_r, n_n) in counts.items():
        fams = list(REASONING_FAMILIES)
        for i in range(n_r):
            s = draw(REASONING_GEN[fams[i % len(fams)]])
            s.split = split
            out.append(s)
        if split == "injection":
            for i in range(n_n):
                fam = injection_families[i % len(injection_families)]
                s = draw(NON_GEN[fam], lambda s: not s.has_marker)
                s.split = split
                out.append(s)
            continue
        fams_n = _apportion(n_n, NON_SHARES)
        rng.shuffle(fams_n)
        for fam in fams_n:
            s = draw(general_one if fam == "general" else NON_GEN[fam])
            s.split = split
            out.append(s)
    return out


def _apportion(n: int, shares: dict[str, float]) -> list[str]:
    """`n` family labels in the given shares (largest remainder)."""
    raw = {k: n * v for k, v in shares.items()}
    base = {k: int(v) for k, v in raw.items()}
    rest = n - sum(base.values())
    for k in sorted(raw, key=lambda k: raw[k] - base[k], reverse=True)[:rest]:
        base[k] += 1
    return [k for k, c in base.items() for _ in range(c)]


def steering_problems(seed: int, n: int, exclude: set[str] = frozenset()) -> list[tuple[str, int]]:
    """`n` one- and two-step arithmetic word problems with integer answers, disjoint from `exclude`."""
    rng = random.Random(seed * 104729 + 3)
    out: list[tuple[str, int]] = []
    seen = set(exclude)
    while len(out) < n:
        nm = _name(rng)
        item = rng.choice(ITEMS)
        a, b = rng.randint(5, 40), rng.randint(2, 20)
        kind = rng.randrange(4)
        if kind == 0:
            q, ans = f"{nm} has {a} {item} and gets {b} more. How many {item} does {nm} have?", a + b
        elif kind == 1:
            q, ans = f"{nm} has {a + b} {item} and gives away {b}. How many {item} are left?", a
        elif kind == 2:
            k = rng.randint(2, 9)
            q, ans = f"{nm} buys {k} bags with {b} {item} in each. How many {item} is that?", k * b
        else:
            c = rng.randint(1, a - 1)
            q = f"{nm} has {a} {item}, finds {b} more and then loses {c}. How many {item} are there now?"
            ans = a + b - c
        if q not in seen:
            seen.add(q)
            out.append((q, ans))
    return out


def reasoning_problem(sample: Sample) -> str:
    """The problem statement of a reasoning trace (its text up to the first question mark or first sentence)."""
    text = sample.text
    cut = text.find("?")
    if cut < 0:
        cut = text.find(". ")
    return text[: cut + 1] if cut >= 0 else text
