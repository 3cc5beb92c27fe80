"""Offline data of the keystone probe: capability prompts, the task suite and the SFT problems.

Everything is generated deterministically from the project's own tables and templates; nothing
is downloaded. The method never scores the capability prompts' answers: it only needs prompts
that make the model generate in four different regimes (knowledge multiple choice, competition
math, coding, grade-school word problems), which any well-formed prompt of each kind does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from interp.errors import ConfigError

CAPABILITIES = ("knowledge", "math", "code", "word_problem")

# ----------------------------------------------------------------------------- fact table

CAPITALS: tuple[tuple[str, str], ...] = (
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"),
    ("Egypt", "Cairo"), ("Greece", "Athens"), ("Austria", "Vienna"), ("Poland", "Warsaw"),
    ("Ireland", "Dublin"), ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"), ("Belgium", "Brussels"), ("Netherlands", "Amsterdam"),
    ("Hungary", "Budapest"), ("Czech Republic", "Prague"), ("Thailand", "Bangkok"),
    ("South Korea", "Seoul"), ("Indonesia", "Jakarta"), ("Philippines", "Manila"),
    ("Vietnam", "Hanoi"), ("India", "New Delhi"), ("Pakistan", "Islamabad"), ("Iran", "Tehran"),
    ("Iraq", "Baghdad"), ("Turkey", "Ankara"), ("Saudi Arabia", "Riyadh"), ("Israel", "Jerusalem"),
    ("Kenya", "Nairobi"), ("Ethiopia", "Addis Ababa"), ("Nigeria", "Abuja"), ("Ghana", "Accra"),
    ("Morocco", "Rabat"), ("Argentina", "Buenos Aires"), ("Chile", "Santiago"), ("Peru", "Lima"),
    ("Colombia", "Bogota"), ("Venezuela", "Caracas"), ("Cuba", "Havana"), ("Mexico", "Mexico City"),
    ("Canada", "Ottawa"), ("United States", "Washington"), ("Australia", "Canberra"),
    ("New Zealand", "Wellington"), ("Brazil", "Brasilia"), ("Ukraine", "Kyiv"), ("Romania", "Bucharest"),
    ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Switzerland", "Bern"),
    ("Iceland", "Reykjavik"), ("Afghanistan", "Kabul"), ("Nepal", "Kathmandu"), ("Lebanon", "Beirut"),
    ("Syria", "Damascus"), ("Jordan", "Amman"), ("Qatar", "Doha"), ("Malaysia", "Kuala Lumpur"),
)

ELEMENTS: tuple[tuple[str, str], ...] = (
    ("hydrogen", "H"), ("helium", "He"), ("lithium", "Li"), ("carbon", "C"), ("nitrogen", "N"),
    ("oxygen", "O"), ("fluorine", "F"), ("neon", "Ne"), ("sodium", "Na"), ("magnesium", "Mg"),
    ("aluminium", "Al"), ("silicon", "Si"), ("phosphorus", "P"), ("sulfur", "S"), ("chlorine", "Cl"),
    ("argon", "Ar"), ("potassium", "K"), ("calcium", "Ca"), ("iron", "Fe"), ("copper", "Cu"),
    ("zinc", "Zn"), ("silver", "Ag"), ("tin", "Sn"), ("iodine", "I"), ("gold", "Au"),
    ("mercury", "Hg"), ("lead", "Pb"), ("uranium", "U"), ("nickel", "Ni"), ("cobalt", "Co"),
)

ANIMALS: tuple[tuple[str, str], ...] = (
    ("whale", "mammal"), ("dolphin", "mammal"), ("bat", "mammal"), ("elephant", "mammal"),
    ("kangaroo", "mammal"), ("platypus", "mammal"), ("tiger", "mammal"), ("horse", "mammal"),
    ("eagle", "bird"), ("penguin", "bird"), ("ostrich", "bird"), ("owl", "bird"), ("parrot", "bird"),
    ("sparrow", "bird"), ("crocodile", "reptile"), ("snake", "reptile"), ("turtle", "reptile"),
    ("lizard", "reptile"), ("chameleon", "reptile"), ("frog", "amphibian"), ("salamander", "amphibian"),
    ("toad", "amphibian"), ("newt", "amphibian"), ("shark", "fish"), ("salmon", "fish"), ("tuna", "fish"),
    ("trout", "fish"), ("seahorse", "fish"), ("ant", "insect"), ("bee", "insect"), ("butterfly", "insect"),
    ("beetle", "insect"),
)
ANIMAL_CLASSES = ("mammal", "bird", "reptile", "amphibian", "fish", "insect")

# ~60 small function specifications for the coding prompts
FUNCTION_SPECS: tuple[str, ...] = (
    "`is_palindrome(s)` that returns True if the string s reads the same forwards and backwards",
    "`count_vowels(s)` that returns the number of vowels in the string s",
    "`reverse_words(s)` that reverses the order of the words in a sentence",
    "`factorial(n)` that returns n! for a non-negative integer n",
    "`fibonacci(n)` that returns the n-th Fibonacci number",
    "`is_prime(n)` that returns True if n is a prime number",
    "`gcd(a, b)` that returns the greatest common divisor of two integers",
    "`lcm(a, b)` that returns the least common multiple of two integers",
    "`flatten(lst)` that flattens a nested list of lists into a single list",
    "`unique(lst)` that returns the elements of lst without duplicates, keeping their order",
    "`second_largest(nums)` that returns the second largest number in a list",
    "`word_count(text)` that returns a dict mapping each word to how often it occurs",
    "`capitalize_words(s)` that capitalizes the first letter of every word",
    "`celsius_to_fahrenheit(c)` that converts a temperature from Celsius to Fahrenheit",
    "`sum_digits(n)` that returns the sum of the decimal digits of n",
    "`is_anagram(a, b)` that returns True if the two strings are anagrams",
    "`merge_sorted(a, b)` that merges two sorted lists into one sorted list",
    "`chunk(lst, n)` that splits a list into consecutive chunks of length n",
    "`binary_search(lst, x)` that returns the index of x in a sorted list, or -1",
    "`remove_punctuation(s)` that removes all punctuation characters from a string",
    "`running_sum(nums)` that returns the list of running totals of nums",
    "`max_subarray(nums)` that returns the largest sum of a contiguous sub-list",
    "`rotate(lst, k)` that rotates a list to the right by k positions",
    "`is_leap_year(y)` that returns True if the year y is a leap year",
    "`to_binary(n)` that returns the binary representation of n as a string",
    "`from_roman(s)` that converts a Roman numeral to an integer",
    "`to_roman(n)` that converts an integer to a Roman numeral",
    "`mean(nums)` that returns the arithmetic mean of a list of numbers",
    "`median(nums)` that returns the median of a list of numbers",
    "`mode(nums)` that returns the most frequent element of a list",
    "`transpose(matrix)` that transposes a matrix given as a list of rows",
    "`dot(a, b)` that returns the dot product of two vectors",
    "`count_words(s)` that returns the number of words in a string",
    "`longest_word(s)` that returns the longest word in a sentence",
    "`is_sorted(lst)` that returns True if a list is sorted in ascending order",
    "`pairwise_sums(a, b)` that returns the element-wise sums of two lists",
    "`caesar(s, k)` that shifts every letter of s by k places in the alphabet",
    "`char_histogram(s)` that returns a dict of character counts",
    "`power_set(lst)` that returns all subsets of a list",
    "`primes_below(n)` that returns all primes smaller than n",
    "`digits(n)` that returns the list of decimal digits of n",
    "`clamp(x, lo, hi)` that limits x to the interval [lo, hi]",
    "`title_case(s)` that converts a sentence to title case",
    "`snake_to_camel(s)` that converts snake_case to camelCase",
    "`camel_to_snake(s)` that converts camelCase to snake_case",
    "`count_occurrences(lst, x)` that counts how often x appears in lst",
    "`zip_to_dict(keys, values)` that builds a dict from two lists",
    "`invert_dict(d)` that swaps the keys and values of a dict",
    "`filter_even(nums)` that returns only the even numbers of a list",
    "`square_all(nums)` that returns the squares of a list of numbers",
    "`product(nums)` that returns the product of a list of numbers",
    "`is_power_of_two(n)` that returns True if n is a power of two",
    "`hamming(a, b)` that returns the number of positions where two strings differ",
    "`compress(s)` that run-length encodes a string, e.g. aaab -> a3b1",
    "`balanced(s)` that checks whether the brackets in s are balanced",
    "`distance(p, q)` that returns the Euclidean distance between two 2D points",
    "`triangle_area(a, b, c)` that returns the area of a triangle from its side lengths",
    "`days_in_month(m, y)` that returns the number of days in month m of year y",
    "`kth_smallest(nums, k)` that returns the k-th smallest element of a list",
    "`interleave(a, b)` that alternates the elements of two lists",
)

NAMES = ("Maria", "Tom", "Aisha", "Ken", "Lena", "Omar", "Sofia", "Ravi", "Nina", "Jack", "Mei", "Lucas")

# ----------------------------------------------------------------------------- capability prompts

BUILTIN_PROMPTS: tuple[tuple[str, str, str], ...] = (
    (
        "mmlu",
        "knowledge",
        "Which gas do plants mainly absorb from the air to carry out photosynthesis?\n"
        "A. Oxygen\nB. Nitrogen\nC. Carbon dioxide\nD. Hydrogen\n"
        "Answer: think it through briefly, then output the line 'The final answer is [X]' "
        "where X is the letter of the correct option.",
    ),
    (
        "math500",
        "math",
        "Let $f(x) = 3x^2 - 5x + 2$. Find the sum of all real numbers $x$ such that $f(x) = 2$. "
        "Please reason step by step, and put your final answer within \\boxed{}.",
    ),
    (
        "evalplus",
        "code",
        "Write a Python function `is_palindrome(s)` that returns True if the string s reads the same "
        "forwards and backwards, ignoring case and spaces. Include a short docstring.",
    ),
    (
        "mgsm",
        "word_problem",
        "A baker makes 24 muffins in the morning and 18 in the afternoon. She sells 29 muffins and gives "
        "5 to her neighbours. How many muffins does she have left? Solve it step by step.",
    ),
)


@dataclass(frozen=True)
class Prompt:
    group: int
    """1-based group; group 1 is the four built-in prompts (the main keystone set)."""
    id: str
    capability: str
    text: str


def _mc_prompt(rng: np.random.Generator) -> str:
    kind = int(rng.integers(3))
    letters = "ABCD"
    if kind == 0:
        i = int(rng.integers(len(CAPITALS)))
        country, right = CAPITALS[i]
        others = [c for j, (_, c) in enumerate(CAPITALS) if j != i]
        question = f"What is the capital of {country}?"
    elif kind == 1:
        i = int(rng.integers(len(ELEMENTS)))
        element, right = ELEMENTS[i]
        others = [s for j, (_, s) in enumerate(ELEMENTS) if j != i]
        question = f"What is the chemical symbol of {element}?"
    else:
        i = int(rng.integers(len(ANIMALS)))
        animal, right = ANIMALS[i]
        others = [c for c in ANIMAL_CLASSES if c != right]
        question = f"To which class of animals does the {animal} belong?"
    options = [right] + [str(o) for o in rng.choice(others, 3, replace=False)]
    order = rng.permutation(4)
    lines = "\n".join(f"{letters[k]}. {options[o]}" for k, o in enumerate(order))
    return (
        f"{question}\n{lines}\nAnswer: think it through briefly, then output the line "
        "'The final answer is [X]' where X is the letter of the correct option."
    )


def _math_prompt(rng: np.random.Generator) -> str:
    kind = int(rng.integers(3))
    tail = " Please reason step by step, and put your final answer within \\boxed{}."
    if kind == 0:
        a, c = (int(v) for v in rng.integers(2, 10, 2))
        x = int(rng.integers(-9, 10))
        b = int(rng.integers(1, 30))
        d = a * x + b - c * x
        return f"Solve for $x$: ${a}x + {b} = {c}x + {d}$." + tail
    if kind == 1:
        p, q, r, s = (int(v) for v in rng.integers(1, 10, 4))
        return f"Compute $\\frac{{{p}}}{{{q + 1}}} + \\frac{{{r}}}{{{s + 1}}}$ and simplify the result." + tail
    pct = int(rng.choice([5, 10, 15, 20, 25, 30, 40, 60, 75]))
    base = int(rng.integers(2, 40)) * 20
    return (f"A price of ${base}$ dollars is raised by ${pct}\\%$ and then lowered by ${pct}\\%$. "
            "What is the final price?" + tail)


def _code_prompt(rng: np.random.Generator) -> str:
    spec = FUNCTION_SPECS[int(rng.integers(len(FUNCTION_SPECS)))]
    return f"Write a Python function {spec}. Include a short docstring."


def _word_prompt(rng: np.random.Generator) -> str:
    kind = int(rng.integers(3))
    name = str(rng.choice(NAMES))
    if kind == 0:
        n, price = int(rng.integers(2, 9)), int(rng.integers(2, 12))
        paid = (n * price // 10 + 1) * 10
        item = str(rng.choice(["notebooks", "apples", "pens", "tickets", "cups"]))
        return (f"{name} buys {n} {item} that cost {price} dollars each and pays with {paid} dollars. "
                "How much change does the shop give back? Solve it step by step.")
    if kind == 1:
        speed, hours, extra = int(rng.integers(30, 90)), int(rng.integers(2, 6)), int(rng.integers(10, 60))
        return (f"A train travels at {speed} km per hour for {hours} hours and then {extra} km more. "
                "How far does it travel in total? Solve it step by step.")
    k, each, left = int(rng.integers(3, 7)), int(rng.integers(3, 12)), int(rng.integers(1, 6))
    return (f"{name} shares some stickers equally among {k} friends. Each friend gets {each} stickers and "
            f"{left} stickers are left over. How many stickers did {name} have? Solve it step by step.")


_GENERATORS = {"knowledge": _mc_prompt, "math": _math_prompt, "code": _code_prompt, "word_problem": _word_prompt}


def builtin_prompts(n_groups: int) -> list[Prompt]:
    """Group 1: the four built-in prompts; groups 2..n: template prompts, group g from seed g.

    No prompt repeats across groups (a repeat is redrawn from the same group's generator).
    """
    out = [Prompt(1, pid, cap, text) for pid, cap, text in BUILTIN_PROMPTS]
    seen = {p.text for p in out}
    for g in range(2, n_groups + 1):
        rng = np.random.default_rng(g)
        for cap in CAPABILITIES:
            for _ in range(1000):
                text = _GENERATORS[cap](rng)
                if text not in seen:
                    break
            else:  # pragma: no cover - the tables are large enough for 10 groups
                raise RuntimeError(f"could not draw a new {cap} prompt for group {g}")
            seen.add(text)
            out.append(Prompt(g, f"g{g}_{cap}", cap, text))
    return out


def load_prompts(source: str, n_groups: int) -> list[Prompt]:
    """The capability prompts: builtin, or a JSONL file of {id, capability, prompt[, group]}.

    A file without `group` fields is cut into `n_groups` consecutive groups of equal size.
    """
    if source == "builtin":
        return builtin_prompts(n_groups)
    path = Path(source).expanduser()
    if not path.is_file():
        raise ConfigError("prompt_source", source, '"builtin" or an existing JSONL file')
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not str(r.get("prompt", "")).strip():
            raise ConfigError("prompt_source", source, f"JSONL rows with a non-empty 'prompt' (row {i} has none)")
    if all("group" in r for r in rows):
        groups = sorted({int(r["group"]) for r in rows})
        remap = {g: k + 1 for k, g in enumerate(groups)}
        prompts = [Prompt(remap[int(r["group"])], str(r.get("id", i)), str(r.get("capability", "")), r["prompt"])
                   for i, r in enumerate(rows)]
    else:
        per = len(rows) // n_groups
        if per < 1:
            raise ConfigError("prompt_source", source, f"at least n_groups={n_groups} prompts")
        prompts = [Prompt(i // per + 1, str(r.get("id", i)), str(r.get("capability", "")), r["prompt"])
                   for i, r in enumerate(rows[: per * n_groups])]
    if sum(p.group == 1 for p in prompts) < 2:
        raise ConfigError("prompt_source", source, "at least 2 prompts in the first group")
    return prompts


# ----------------------------------------------------------------------------- task suite

TASKS = ("arith", "capitals", "sequences")

_ARITH_SHOTS = "2 + 3 = 5\n14 + 7 = 21\n30 + 12 = 42\n"
_CAPITAL_SHOTS = "France: Paris\nJapan: Tokyo\nItaly: Rome\n"
_SEQ_SHOTS = "1, 2, 3, 4 -> 5\nMonday, Tuesday, Wednesday -> Thursday\nA, B, C, D -> E\n"
_SHOT_CAPITALS = {"France", "Japan", "Italy"}
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")


@dataclass(frozen=True)
class TaskItem:
    task: str
    prompt: str
    """Raw text: the fixed 3-shot prefix, then the query (no chat template)."""
    answer: str


def _seq_item(rng: np.random.Generator) -> tuple[str, str]:
    kind = int(rng.integers(7))
    if kind < 4:
        step = (1, 2, 5, 10)[kind]
        start = step * int(rng.integers(1, 20))
        vals = [start + step * i for i in range(5)]
        return ", ".join(map(str, vals[:4])) + " ->", str(vals[4])
    table = (_WEEKDAYS, _MONTHS, tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))[kind - 4]
    start = int(rng.integers(0, len(table) - 4))
    vals = table[start : start + 4]
    return ", ".join(vals) + " ->", table[start + 4]


def builtin_tasks(n_items: int, seed: int = 0) -> list[TaskItem]:
    """`n_items` items split evenly over addition, capitals and sequence continuation."""
    rng = np.random.default_rng([seed, 7])
    per = [n_items // 3 + (1 if k < n_items % 3 else 0) for k in range(3)]
    items: list[TaskItem] = []
    for _ in range(per[0]):
        a, b = (int(v) for v in rng.integers(0, 51, 2))
        items.append(TaskItem("arith", f"{_ARITH_SHOTS}{a} + {b} =", str(a + b)))
    pool = [c for c in CAPITALS if c[0] not in _SHOT_CAPITALS]
    order = rng.permutation(len(pool))
    for k in range(per[1]):
        country, capital = pool[int(order[k % len(pool)])]
        items.append(TaskItem("capitals", f"{_CAPITAL_SHOTS}{country}:", capital))
    for _ in range(per[2]):
        query, answer = _seq_item(rng)
        items.append(TaskItem("sequences", f"{_SEQ_SHOTS}{query}", answer))
    return items


def load_tasks(source: str, n_items: int, seed: int = 0) -> list[TaskItem]:
    """builtin, or a JSONL file of {task, prompt, answer} rows (the first `n_items`)."""
    if source == "builtin":
        return builtin_tasks(n_items, seed)
    path = Path(source).expanduser()
    if not path.is_file():
        raise ConfigError("task_suite", source, '"builtin" or an existing JSONL file')
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    items = [TaskItem(str(r.get("task", "task")), str(r["prompt"]), str(r["answer"])) for r in rows[:n_items]]
    if not items:
        raise ConfigError("task_suite", source, "a JSONL file with {task, prompt, answer} rows")
    return items


def score_answer(output: str, answer: str) -> bool:
    """Cut at the first newline, strip surrounding whitespace, exact string match."""
    return output.split("\n", 1)[0].strip() == answer.strip()


# ----------------------------------------------------------------------------- SFT problems


@dataclass(frozen=True)
class SFTItem:
    question: str
    solution: str
    """A short worked solution ending "The answer is N."."""
    answer: int


_ITEMS = ("apples", "marbles", "stamps", "books", "coins", "shells", "stickers", "cards")


def _sft_item(rng: np.random.Generator) -> SFTItem:
    name = str(rng.choice(NAMES))
    item = str(rng.choice(_ITEMS))
    kind = int(rng.integers(4))
    while True:
        if kind == 0:  # a + b - c
            a, b = int(rng.integers(5, 60)), int(rng.integers(2, 40))
            c = int(rng.integers(1, a + b))
            s, r = a + b, a + b - c
            q = (f"{name} has {a} {item}. {name} gets {b} more and then gives away {c}. "
                 f"How many {item} does {name} have now?")
            sol = f"{a} + {b} = {s}. {s} - {c} = {r}. The answer is {r}."
        elif kind == 1:  # a - b + c
            a = int(rng.integers(20, 90))
            b, c = int(rng.integers(1, a)), int(rng.integers(2, 40))
            s, r = a - b, a - b + c
            q = f"{name} had {a} {item}, lost {b} of them, and then found {c} more. How many {item} does {name} have?"
            sol = f"{a} - {b} = {s}. {s} + {c} = {r}. The answer is {r}."
        elif kind == 2:  # k * m + c
            k, m = int(rng.integers(2, 10)), int(rng.integers(2, 10))
            c = int(rng.integers(1, 30))
            s, r = k * m, k * m + c
            q = (f"{name} has {k} boxes with {m} {item} in each box and {c} loose {item}. "
                 f"How many {item} is that in total?")
            sol = f"{k} * {m} = {s}. {s} + {c} = {r}. The answer is {r}."
        else:  # k * m - c
            k, m = int(rng.integers(2, 10)), int(rng.integers(3, 10))
            c = int(rng.integers(1, k * m))
            s, r = k * m, k * m - c
            q = f"{name} buys {k} packs of {m} {item} and uses {c} of them. How many {item} are left?"
            sol = f"{k} * {m} = {s}. {s} - {c} = {r}. The answer is {r}."
        if max(s, r) <= 99:
            return SFTItem(q, sol, r)


def sft_data(n_train: int, n_eval: int, seed: int = 0) -> tuple[list[SFTItem], list[SFTItem]]:
    """Disjoint train and held-out two-step arithmetic word problems (numbers <= 99)."""
    rng = np.random.default_rng([seed, 11])
    seen: set[str] = set()
    items: list[SFTItem] = []
    while len(items) < n_train + n_eval:
        it = _sft_item(rng)
        if it.question not in seen:
            seen.add(it.question)
            items.append(it)
    return items[:n_train], items[n_train:]


_INT = re.compile(r"-?\d+")


def final_integer(text: str) -> int | None:
    """The last integer in `text` (None if there is none)."""
    found = _INT.findall(text.replace(",", ""))
    return int(found[-1]) if found else None
