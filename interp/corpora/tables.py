"""Word and fact tables shared by the corpus generators, plus small helpers for filling templates.

Everything here is invented or generic: the towns, rivers and people do not exist. The tables are part of
the corpus version: changing any of them changes the generated text and therefore the corpus sha256.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

FEMALE_NAMES = (
    "Alice", "Amara", "Anna", "Beatrice", "Bethany", "Carmen", "Chloe", "Clara", "Daisy", "Diana", "Edith",
    "Eleanor", "Elena", "Eliza", "Emily", "Esther", "Fatima", "Fiona", "Frances", "Grace", "Hannah", "Harriet",
    "Helen", "Imogen", "Iris", "Isabel", "Jane", "Joanna", "Judith", "Julia", "Katherine", "Laura", "Leah",
    "Lillian", "Lucy", "Lydia", "Maggie", "Margaret", "Maria", "Martha", "Maya", "Miriam", "Nadia", "Naomi",
    "Nora", "Olivia", "Patricia", "Priya", "Rachel", "Rebecca", "Rosa", "Ruth", "Sarah", "Sophie", "Stella",
    "Susan", "Teresa", "Vera", "Victoria", "Winifred", "Yasmin", "Zoe",
)
MALE_NAMES = (
    "Aaron", "Adam", "Albert", "Alexander", "Amir", "Andrew", "Arthur", "Benjamin", "Bernard", "Callum",
    "Charles", "Christopher", "Daniel", "David", "Edmund", "Edward", "Elias", "Ernest", "Felix", "Francis",
    "Frederick", "George", "Gregory", "Harold", "Henry", "Hugh", "Isaac", "Jacob", "James", "Jonah", "Joseph",
    "Kwame", "Laurence", "Leo", "Luke", "Malcolm", "Marcus", "Martin", "Matthew", "Michael", "Nathan",
    "Nicholas", "Oliver", "Oscar", "Owen", "Patrick", "Peter", "Philip", "Rafael", "Raymond", "Robert",
    "Samuel", "Simon", "Stephen", "Thomas", "Timothy", "Victor", "Walter", "William", "Yusuf",
)
SURNAMES = (
    "Abbott", "Ainsworth", "Ashby", "Bailey", "Barrow", "Bennett", "Blake", "Bowen", "Bradshaw", "Brennan",
    "Carver", "Chandler", "Clarke", "Cole", "Cooper", "Crane", "Dawson", "Delaney", "Dixon", "Doyle", "Drummond",
    "Ellis", "Evans", "Fairley", "Fenwick", "Fletcher", "Ford", "Foster", "Garner", "Gibson", "Gordon", "Graves",
    "Hale", "Hammond", "Harding", "Hartley", "Hayes", "Holland", "Hughes", "Ingram", "Jarvis", "Kaur", "Keane",
    "Kendall", "Khan", "Lambert", "Lawson", "Lindqvist", "Lowe", "Lucas", "Marsh", "Mason", "Mendes",
    "Merrick", "Morgan", "Murray", "Nash", "Newton", "Novak", "Okafor", "Osborne", "Owens", "Palmer", "Parekh",
    "Parry", "Pearce", "Pike", "Quinn", "Ramsay", "Reed", "Reyes", "Rowe", "Russell", "Sanders", "Sato",
    "Sharma", "Shaw", "Sinclair", "Stone", "Sutton", "Talbot", "Thorne", "Turner", "Vaughan", "Walsh", "Ward",
    "Webb", "Wells", "Whitaker", "Wilde", "Winter", "Wolfe", "Wren", "Yates", "Young",
)
TOWN_PREFIXES = (
    "Ash", "Alder", "Bar", "Bram", "Brock", "Cald", "Coln", "Crom", "Dun", "Ell", "Fern", "Gold", "Gran",
    "Hart", "Hazel", "Holm", "Kings", "Lang", "Lock", "Mar", "Mere", "Nether", "Oak", "Pen", "Quar", "Raven",
    "Red", "Rush", "Sand", "Sel", "Stan", "Stock", "Thorn", "Tren", "Wes", "Whit", "Wil", "Wood", "Yar",
)
TOWN_SUFFIXES = (
    "bourne", "bridge", "brook", "bury", "by", "combe", "cote", "dale", "field", "ford", "gate", "ham",
    "haven", "hurst", "ley", "mouth", "stead", "stow", "thorpe", "ton", "well", "wick",
)
RIVERS = (
    "Alder", "Brent", "Calder", "Colne", "Dane", "Derwen", "Ember", "Fenn", "Glass", "Harle", "Isel", "Kell",
    "Lune", "Marrow", "Otter", "Ribble", "Sallow", "Teal", "Tamber", "Wend", "Wyre", "Yeo",
)
HILLS = ("Barrow", "Blackdown", "Coldharbour", "Greystone", "Hartland", "Longmoor", "Redcliff", "Whitmoor")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
SEASON_OF_MONTH = {
    "January": "winter", "February": "winter", "March": "spring", "April": "spring", "May": "spring",
    "June": "summer", "July": "summer", "August": "summer", "September": "autumn", "October": "autumn",
    "November": "autumn", "December": "winter",
}
NUMBER_WORDS = (
    "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
)
ORDINALS = (
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh",
    "twelfth", "thirteenth", "fourteenth", "fifteenth",
)
COLOURS = ("red", "blue", "green", "yellow", "grey", "white", "black", "brown", "orange", "purple")


@dataclass(frozen=True)
class Person:
    """An invented person with the pronouns templates need."""

    first: str
    last: str
    female: bool

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"

    def slots(self, prefix: str = "") -> dict[str, str]:
        """Template slots: name, first, last, he, him, his, He, His (each under `prefix`)."""
        he, him, his = ("she", "her", "her") if self.female else ("he", "him", "his")
        out = {"name": self.name, "first": self.first, "last": self.last, "he": he, "him": him, "his": his,
               "He": he.capitalize(), "His": his.capitalize()}
        return {prefix + k: v for k, v in out.items()}


def person(rng: random.Random, female: bool | None = None) -> Person:
    """A random invented person; the sex is drawn when not given."""
    if female is None:
        female = rng.random() < 0.5
    first = rng.choice(FEMALE_NAMES if female else MALE_NAMES)
    return Person(first, rng.choice(SURNAMES), female)


def town(rng: random.Random) -> str:
    """An invented English-looking town name such as Hartford or Ravenbury."""
    prefix, suffix = rng.choice(TOWN_PREFIXES), rng.choice(TOWN_SUFFIXES)
    if prefix[-1] == suffix[0]:  # avoid "Wesstow", "Sandd..."
        suffix = rng.choice([s for s in TOWN_SUFFIXES if s[0] != prefix[-1]])
    return prefix + suffix


def river(rng: random.Random) -> str:
    return "the River " + rng.choice(RIVERS)


def a_an(word: str) -> str:
    """`word` with the indefinite article that English would put in front of it."""
    return ("an " if word[:1].lower() in "aeiou" and not word.lower().startswith(("uni", "use", "eu")) else "a ") + word


def number_word(n: int) -> str:
    """Spell small numbers out, as careful prose does; larger ones stay as digits."""
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)


def join_list(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def fill(rng: random.Random, options: tuple[str, ...] | list[str], **slots: str) -> str:
    """Choose one template from `options` and fill its {slots}."""
    return rng.choice(options).format(**slots)


def sentence_case(text: str) -> str:
    """Capitalise the first letter without touching the rest."""
    return text[:1].upper() + text[1:]


def load_tables(module_file: str) -> SimpleNamespace:
    """The word tables of a generator module, from the JSON file beside it (`gen_x.py` -> `gen_x.json`), with
    every list made a tuple again: the tables are data, the templates that fill them are code."""
    def tup(v):
        if isinstance(v, dict):
            return {k: tup(x) for k, x in v.items()}
        return tuple(tup(x) for x in v) if isinstance(v, list) else v

    text = Path(module_file).with_suffix(".json").read_text(encoding="utf-8")
    return SimpleNamespace(**{k: tup(v) for k, v in json.loads(text).items()})
