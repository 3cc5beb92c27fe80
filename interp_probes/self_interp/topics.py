"""The built-in topic list (500 common topics, 25 categories of 20) and the stratified split.

Topics are chosen to be well known even to a 135M model; each has a category and aliases
("USA" for "United States"). A user JSONL of ``{topic, category, aliases}`` rows replaces it.
Torch-free.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from interp.errors import ConfigError

# category -> topics; "name|alias|alias" carries aliases
_TOPICS: dict[str, list[str]] = {
    "countries": [
        "France", "Germany", "Italy", "Spain", "Japan", "China", "India", "Brazil", "Canada", "Mexico",
        "Russia", "Egypt", "Australia", "United States|USA|US|America|United States of America",
        "United Kingdom|UK|Britain|Great Britain", "Greece", "Turkey", "Sweden", "Argentina", "Ireland",
    ],
    "cities": [
        "Paris", "London", "Tokyo", "New York|New York City|NYC", "Rome", "Berlin", "Madrid", "Moscow",
        "Beijing", "Sydney", "Cairo", "Chicago", "Los Angeles|LA", "Toronto", "Venice", "Amsterdam", "Istanbul",
        "Dubai", "Hong Kong", "San Francisco",
    ],
    "animals": [
        "dog|puppy", "cat|kitten", "horse", "elephant", "lion", "tiger", "bear", "wolf", "rabbit|bunny", "mouse",
        "shark", "whale", "dolphin", "eagle", "snake", "frog", "monkey", "giraffe", "penguin", "cow",
    ],
    "foods": [
        "pizza", "bread", "cheese", "rice", "pasta|spaghetti", "chocolate", "soup", "salad", "sandwich",
        "hamburger|burger", "sushi", "cake", "cookie|biscuit", "pancake", "egg", "butter", "honey", "ice cream",
        "bacon", "noodles|noodle",
    ],
    "fruits": [
        "apple", "banana", "orange", "grape", "strawberry", "lemon", "cherry", "peach", "pear", "mango",
        "pineapple", "watermelon", "coconut", "blueberry", "plum", "kiwi", "lime", "apricot", "raspberry", "melon",
    ],
    "plants": [
        "rose", "oak|oak tree", "pine|pine tree", "cactus", "tulip", "sunflower", "grass", "bamboo", "fern",
        "moss", "palm tree|palm", "daisy", "lily", "orchid", "ivy", "maple|maple tree", "lavender", "willow",
        "clover", "seaweed",
    ],
    "sports": [
        "chess", "soccer|football", "basketball", "tennis", "golf", "baseball", "swimming", "boxing", "rugby",
        "volleyball", "hockey|ice hockey", "skiing", "cycling", "surfing", "wrestling", "badminton", "karate",
        "archery", "gymnastics", "bowling",
    ],
    "instruments": [
        "piano", "guitar", "violin", "drum|drums", "flute", "trumpet", "saxophone|sax", "cello", "harp",
        "clarinet", "trombone", "accordion", "banjo", "ukulele", "organ", "harmonica", "tuba", "bagpipes",
        "xylophone", "oboe",
    ],
    "professions": [
        "doctor|physician", "teacher", "lawyer|attorney", "nurse", "engineer", "chef|cook", "pilot", "farmer",
        "police officer|policeman|police", "firefighter|fireman", "scientist", "artist", "writer|author",
        "dentist", "soldier", "judge", "plumber", "carpenter", "actor", "singer",
    ],
    "vehicles": [
        "car|automobile", "bus", "train", "bicycle|bike", "motorcycle|motorbike", "airplane|plane|aeroplane",
        "helicopter", "ship", "boat", "truck|lorry", "taxi|cab", "tractor", "submarine", "rocket", "scooter",
        "tram", "ambulance", "van", "yacht", "canoe",
    ],
    "weather": [
        "rain", "snow", "wind", "storm", "thunder", "lightning", "fog", "hail", "tornado", "hurricane",
        "sunshine|sun", "cloud", "rainbow", "drought", "frost", "blizzard", "heat wave|heatwave", "breeze",
        "drizzle", "flood",
    ],
    "sciences": [
        "physics", "chemistry", "biology", "mathematics|math|maths", "astronomy", "geology", "psychology",
        "economics", "medicine", "botany", "zoology", "genetics", "ecology", "computer science", "linguistics",
        "sociology", "anthropology", "meteorology", "neuroscience", "statistics",
    ],
    "body parts": [
        "heart", "brain", "hand", "foot|feet", "eye", "ear", "nose", "mouth", "tooth|teeth", "knee", "shoulder",
        "finger", "lung", "liver", "stomach", "skin", "bone", "hair", "elbow", "neck",
    ],
    "household objects": [
        "chair", "table", "bed", "lamp", "sofa|couch", "mirror", "clock", "refrigerator|fridge",
        "television|TV", "door", "window", "spoon", "fork", "knife", "cup|mug", "plate", "pillow", "blanket",
        "towel", "umbrella",
    ],
    "emotions": [
        "happiness|joy", "sadness", "anger", "fear", "love", "surprise", "disgust", "jealousy", "pride",
        "shame", "guilt", "hope", "anxiety", "loneliness", "excitement", "boredom", "gratitude", "envy",
        "grief", "curiosity",
    ],
    "holidays": [
        "Christmas", "Easter", "Halloween", "Thanksgiving", "New Year's Eve|New Year", "Valentine's Day",
        "Hanukkah", "Diwali", "Ramadan", "Passover", "Independence Day", "Mother's Day", "Chinese New Year",
        "Mardi Gras", "Eid", "Saint Patrick's Day|St Patrick's Day", "Father's Day", "Labor Day", "Carnival",
        "Kwanzaa",
    ],
    "materials": [
        "wood", "steel", "iron", "gold", "silver", "copper", "glass", "plastic", "paper", "cotton", "wool",
        "leather", "silk", "stone", "concrete", "rubber", "aluminum|aluminium", "clay", "diamond", "marble",
    ],
    "clothing": [
        "shirt", "dress", "jacket", "hat", "shoe|shoes", "sock|socks", "scarf", "glove|gloves", "coat", "skirt",
        "jeans", "sweater|jumper", "boot|boots", "tie|necktie", "belt", "suit", "pajamas|pyjamas", "sandal",
        "hoodie", "uniform",
    ],
    "drinks": [
        "coffee", "tea", "water", "milk", "beer", "wine", "juice", "lemonade", "whiskey|whisky", "vodka", "soda",
        "champagne", "hot chocolate|cocoa", "smoothie", "milkshake", "cider", "rum", "espresso", "tequila", "gin",
    ],
    "buildings": [
        "house|home", "castle", "church", "school", "hospital", "library", "museum", "bridge", "tower",
        "airport", "stadium", "temple", "prison|jail", "factory", "hotel", "restaurant", "bank", "farm",
        "palace", "lighthouse",
    ],
    "vegetables": [
        "carrot", "potato", "tomato", "onion", "garlic", "cabbage", "broccoli", "lettuce", "cucumber", "pumpkin",
        "spinach", "bell pepper|pepper", "corn|maize", "pea|peas", "bean|beans", "mushroom", "celery",
        "eggplant|aubergine", "radish", "beetroot|beet",
    ],
    "tools": [
        "hammer", "screwdriver", "wrench|spanner", "saw", "drill", "axe", "shovel|spade", "ladder", "scissors",
        "needle", "rope", "nail", "tape measure", "paintbrush", "pliers", "chisel", "rake", "broom",
        "flashlight|torch", "wheelbarrow",
    ],
    "insects": [
        "ant", "bee|honeybee", "butterfly", "spider", "mosquito", "fly|housefly", "beetle", "ladybug|ladybird",
        "grasshopper", "cockroach", "caterpillar", "dragonfly", "wasp", "moth", "snail", "worm|earthworm",
        "scorpion", "termite", "flea", "firefly",
    ],
    "space": [
        "Moon|the Moon", "Mars", "Jupiter", "Saturn", "Venus", "Mercury", "Neptune", "Uranus", "Pluto",
        "Earth|planet Earth", "comet", "asteroid", "galaxy", "Milky Way", "black hole", "star", "telescope",
        "astronaut", "satellite", "meteor|shooting star",
    ],
    "technology": [
        "computer", "smartphone|mobile phone|cell phone|phone", "internet", "camera", "radio", "robot", "laptop",
        "keyboard", "printer", "battery", "headphones", "microphone", "calculator", "email|e-mail", "website",
        "software", "light bulb|lightbulb", "tablet", "video game|videogame", "artificial intelligence|AI",
    ],
}


@dataclass(frozen=True)
class Topic:
    topic: str
    category: str
    aliases: tuple[str, ...] = field(default_factory=tuple)


def builtin_topics() -> list[Topic]:
    """The 500 built-in topics in a fixed order (category, then listing order)."""
    out = []
    for category, items in _TOPICS.items():
        for item in items:
            name, *aliases = item.split("|")
            out.append(Topic(name, category, tuple(aliases)))
    return out


def load_topics(path: str | None) -> list[Topic]:
    """The built-in list, or a user JSONL of {topic, category, aliases} rows."""
    if path is None:
        return builtin_topics()
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError("topics_file", path, "an existing JSONL file of {topic, category, aliases} rows")
    out, seen = [], set()
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            t = Topic(str(row["topic"]).strip(), str(row.get("category", "all")), tuple(row.get("aliases", ())))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError("topics_file", f"{path}:{n}",
                              f"a JSON object with topic, category, aliases ({e})") from None
        if t.topic and t.topic.lower() not in seen:
            seen.add(t.topic.lower())
            out.append(t)
    if len(out) < 20:
        raise ConfigError("topics_file", path, "at least 20 distinct topics")
    return out


def split_topics(topics: Sequence[Topic], heldout_frac: float, cap: int | None,
                 seed: int = 0) -> tuple[list[Topic], list[str]]:
    """Stratified split: within each category the topics are shuffled (seed), the first
    floor(cap * n_c / N) kept when a cap applies, and of those the first ceil(heldout_frac * n_c) held out.

    Returns (kept topics in category order, split per kept topic: "train" | "heldout").
    """
    by_cat: dict[str, list[Topic]] = {}
    for t in topics:
        by_cat.setdefault(t.category, []).append(t)
    n_total = len(topics)
    kept, split = [], []
    for i, items in enumerate(by_cat.values()):
        rng = np.random.default_rng([seed, i])
        order = rng.permutation(len(items))
        items = [items[j] for j in order]
        if cap is not None and cap < n_total:
            items = items[: math.floor(cap * len(items) / n_total)]
        n_held = math.ceil(heldout_frac * len(items)) if len(items) > 1 else 0
        for j, t in enumerate(items):
            kept.append(t)
            split.append("heldout" if j < n_held else "train")
    return kept, split
