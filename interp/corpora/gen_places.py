"""Generators about places: encyclopedic town entries, building histories, travel diaries, weather reports and
nature notes. Each function takes a seeded `random.Random` and returns one document."""

from __future__ import annotations

import random

from .tables import (
    HILLS,
    MONTHS,
    ORDINALS,
    SEASON_OF_MONTH,
    WEEKDAYS,
    fill,
    join_list,
    load_tables,
    number_word,
    person,
    river,
    sentence_case,
    town,
)

W = load_tables(__file__)  # gen_places.json


def town_entry(rng: random.Random) -> str:
    """An encyclopedia-style entry about an invented town."""
    name, other, third = town(rng), town(rng), town(rng)
    pop = rng.randint(800, 46000)
    kind = "village" if pop < 3000 else "market town" if pop < 15000 else "town"
    riv, y_decline = river(rng), rng.randint(1890, 1975)
    s = dict(name=name, kind=kind, river=riv, other=other, third=third, pop=f"{pop:,}", about=f"{round(pop, -2):,}",
             dir=rng.choice(W.DIRECTIONS), miles=str(rng.randint(4, 30)), hills=rng.choice(HILLS))
    out = [fill(rng, (
        "{name} is a {kind} on {river}, about {miles} miles {dir} of {other}.",
        "{name} is a {kind} in the valley of {river}, {miles} miles {dir} of {other}.",
        "{name} is a {kind} on the edge of the {hills} Hills, roughly {miles} miles {dir} of {other}.",
    ), **s)]
    out.append(fill(rng, (
        "At the most recent census it had a population of {pop}.",
        "Its population was {pop} at the last census.",
        "It has a population of about {about}, a figure that has changed little in recent decades.",
        "The population, {pop} at the last count, has grown steadily since the opening of the bypass.",
    ), **s))
    out.append(f"The {kind} grew up around {rng.choice(W.ORIGINS)}, and its name first appears in records from the "
               f"{rng.choice(ORDINALS[10:14])} century.")
    industry = rng.choice(W.INDUSTRIES)
    decline = rng.choice(W.DECLINES).format(y=y_decline)
    out.append(fill(rng, (
        "For several centuries its prosperity depended on {industry}, but {decline}.",
        "In the nineteenth century the local economy was built on {industry}; {decline}.",
        "The town was once known for {industry}, although {decline}.",
    ), industry=industry, decline=decline))
    out.append(rng.choice(W.TODAY).format(other=other))
    marks = [m.format(saint=rng.choice(W.SAINTS), n=number_word(rng.randint(3, 7)), street=rng.choice(W.STREETS),
                      y=rng.randint(1600, 1880)) for m in rng.sample(W.LANDMARKS, rng.randint(2, 3))]
    out.append(fill(rng, (
        "Notable buildings include {marks}.", "Among its landmarks are {marks}.",
        "Visitors come to see {marks}.",
    ), marks=join_list(marks)))
    extras = [
        f"The {kind} holds {rng.choice(W.EVENTS)} each {rng.choice(MONTHS)}, which draws visitors from across the "
        "region.",
        fill(rng, ("{name} has a railway station on the line between {other} and {third}.",
                   "The nearest railway station is at {other}, and buses run to {third} every hour.",
                   "The {kind} lost its railway station in the 1960s, but the old trackbed is now a cycle path to "
                   "{other}."), **s),
        fill(rng, ("To the {dir} the land rises towards the {hills} Hills, which are popular with walkers.",
                   "Footpaths lead from the centre along {river} and up into the {hills} Hills.",
                   "The water meadows beside {river} are a nature reserve, known for their wading birds."), **s),
    ]
    rng.shuffle(extras)
    out.extend(extras[: rng.randint(1, 3)])
    return " ".join(out)


def building_history(rng: random.Random) -> str:
    """The history of an invented public building, with dates in order."""
    name = town(rng)
    building, lo, hi, purpose = rng.choice(W.BUILDINGS)
    built = rng.randint(lo, hi)
    architect = person(rng, female=built > 1900 and rng.random() < 0.3)
    altered = built + rng.randint(15, 50)
    closed = min(max(altered + rng.randint(10, 40), 1950), 2005)
    reopened = min(closed + rng.randint(5, 30), 2021)
    s = dict(name=name, b=building, built=str(built), purpose=purpose, arch=architect.name,
             altered=str(altered), closed=str(closed), reopened=str(reopened),
             later=rng.choice(W.LATER_USES), present=rng.choice(W.PRESENT_USES), his=architect.slots()["his"])
    out = [fill(rng, (
        "The {name} {b} was built in {built} {purpose}.",
        "The {b} in {name} opened in {built}. It was built {purpose}.",
    ), **s)]
    out.append(fill(rng, (
        "It was designed by the architect {arch}, whose plans were chosen from {n} entries to a competition.",
        "The architect was {arch}, who also designed several chapels and schools in the district.",
        "Its designer, {arch}, was only twenty-six at the time, and the building was {his} first major commission.",
    ), n=number_word(rng.randint(6, 19)), **s))
    out.append(rng.choice((
        "The front is of local sandstone, with tall arched windows and a clock above the entrance.",
        "The building is of red brick with stone dressings, and a small cupola on the roof.",
        "Behind its plain front lies a large hall with a timber roof and a gallery at one end.",
        "Its most striking feature is a glass roof supported by slender iron columns.",
    )))
    out.append(fill(rng, (
        "In {altered} the building was extended at the back, and a new entrance was added on the side street.",
        "A fire in {altered} destroyed part of the roof, which was rebuilt to a slightly different design.",
        "The building was enlarged in {altered} to cope with growing demand.",
    ), **s))
    out.append(fill(rng, (
        "It closed in {closed} and for many years was used as {later}.",
        "By {closed} it had fallen out of use, and it later served as {later}.",
        "After it closed in {closed}, the building became {later}, and much of the original interior was lost.",
    ), **s))
    out.append(fill(rng, (
        "Following a long campaign by local residents, it was restored and reopened in {reopened} as {present}.",
        "In {reopened}, after extensive repairs, it reopened as {present}.",
        "It was bought by a community trust and reopened in {reopened} as {present}.",
    ), **s))
    if rng.random() < 0.6:
        out.append(rng.choice((
            "The original clock still keeps good time and is wound by hand once a week.",
            "A plaque beside the entrance records the names of the people who raised the money to save it.",
            "Guided tours of the building take place on the first Saturday of each month.",
            "The building is listed for its architectural and historic interest.",
        )))
    return " ".join(out)


def travel_diary(rng: random.Random) -> str:
    """A first-person travel diary entry for one day of an invented journey."""
    month = rng.choice(MONTHS)
    a, b = town(rng), town(rng)
    how, route = rng.choice(W.TRANSPORT)
    local = person(rng)
    out = [f"Day {rng.randint(2, 14)}, {rng.choice(WEEKDAYS)} {rng.randint(1, 28)} {month}. From {a} to {b}, {how}."]
    out.append(rng.choice(W.WEATHER_PHRASES[SEASON_OF_MONTH[month]]))
    out.append(route.format(a=town(rng), river=river(rng)))
    out.append(f"Lunch was {rng.choice(W.MEALS)}.")
    out.append(fill(rng, ("I reached {b} in the middle of the afternoon.",
                          "I arrived in {b} just before dark, tired but happy.",
                          "It was after four when {b} finally came into view."), b=b))
    out.extend(rng.sample(W.SIGHTS, 2))
    out.append(rng.choice(W.ENCOUNTERS).format(p=local.name, his=local.slots()["his"]))
    out.append(rng.choice(W.EVENINGS))
    return " ".join(out)


def degrees(n: int) -> str:
    """'1 degree', '5 degrees', 'minus 3 degrees'."""
    return f"{'minus ' if n < 0 else ''}{abs(n)} {'degree' if abs(n) == 1 else 'degrees'}"


def weather_report(rng: random.Random) -> str:
    """A regional weather forecast with internally consistent temperatures and days."""
    month = rng.choice(MONTHS)
    season = SEASON_OF_MONTH[month]
    lo, hi = W.TEMPS[season]
    day = rng.randrange(7)
    regions = rng.sample(W.REGIONS, 3)
    conds = rng.sample(W.CONDITIONS[season], 3)
    high = rng.randint(lo + 2, hi)
    out = [f"Here is the forecast for {WEEKDAYS[day]} {rng.randint(1, 28)} {month}."]
    out.append(f"{sentence_case(regions[0])} can expect {conds[0]}, while {regions[1]} will see {conds[1]}.")
    out.append(f"In {regions[2]} there will be {conds[2]}, with {rng.choice(W.WINDS)}.")
    out.append(f"Top temperatures will reach {degrees(high)} in the warmest spots and around "
               f"{degrees(high - rng.randint(2, 5))} further north.")
    night = high - rng.randint(6, 10)
    out.append(rng.choice((
        f"Tonight will be {'cold' if night < 4 else 'mild' if night > 10 else 'fairly cool'}, with a low of "
        f"{degrees(night)}.",
        f"Overnight, temperatures will fall to about {degrees(night)}, and skies will clear in many places.",
    )))
    nxt, after = WEEKDAYS[(day + 1) % 7], WEEKDAYS[(day + 2) % 7]
    out.append(f"{nxt} looks {rng.choice(('drier', 'more unsettled', 'similar', 'brighter', 'windier'))}, and by "
               f"{after} {rng.choice(W.CONDITIONS[season])} {rng.choice(('is likely', 'may return', 'is expected'))} "
               f"across much of the country.")
    if rng.random() < 0.6:
        out.append(rng.choice(W.TIPS[season]))
    return " ".join(out)


def nature_note(rng: random.Random) -> str:
    """A naturalist's dated field note from a walk, with seasonally consistent sightings."""
    month = rng.choice(MONTHS)
    season = SEASON_OF_MONTH[month]
    a = town(rng)
    seen = rng.sample(W.SIGHTINGS[season], 4)
    out = [f"{rng.randint(1, 28)} {month}. " + fill(rng, (
        "Walked along {river} from {a} in the early morning.", "A slow circuit of the lanes and woods above {a}.",
        "Out before breakfast on the footpath from {a} to the old mill.",
    ), river=river(rng), a=a)]
    out.append(rng.choice(W.MORNINGS[season]))
    out.append(f"The first thing I noticed was {seen[0]}.")
    out.append(fill(rng, ("Further on there was {x}, and then {y}.", "Near the bridge I saw {x}; a little later, {y}.",
                          "By the stile: {x}. In the next field, {y}."), x=seen[1], y=seen[2]))
    out.append(f"On the way home, {seen[3]}.")
    out.append(rng.choice((
        "It is easy to walk this path without seeing anything at all; it pays to stop and wait.",
        f"Compared with the same week last year, everything seems about {number_word(rng.randint(2, 3))} weeks "
        f"{rng.choice(('early', 'late'))}.",
        "Nothing rare, but a good morning.",
        "I must come back with the binoculars.",
        "I stood for a long time by the gate, listening.",
    )))
    return " ".join(out)
