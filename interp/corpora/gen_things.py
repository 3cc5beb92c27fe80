"""Generators about things and events: product reviews, recipes and local news briefs.
Each function takes a seeded `random.Random` and returns one document."""

from __future__ import annotations

import random

from .tables import (
    MONTHS,
    WEEKDAYS,
    Person,
    a_an,
    fill,
    join_list,
    load_tables,
    number_word,
    person,
    sentence_case,
    town,
)

# gen_things.json. PRODUCTS rows: (product, why bought, good points, bad points); SOUP_VEG, FLAVOURS, FRUITS and
# CAKE_EXTRAS rows: (name for titles, amount as it appears in a method); PLANTS rows: (plant, light, water, soil or
# feeding, a common problem and its cure)
W = load_tables(__file__)
VERDICTS = {
    1: ("I cannot recommend it.", "I have sent it back.", "A disappointing purchase."),
    2: ("It does the job, just about, but I would look elsewhere.", "Not terrible, but not good value either."),
    3: ("It is fine for the price, but not outstanding.", "A reasonable buy if you do not expect too much."),
    4: ("Overall I am very happy with it.", "Good value, and I would buy it again.", "A solid, reliable choice."),
    5: ("I cannot fault it.", "Excellent. I have already recommended it to friends.", "Worth every penny."),
}


def product_review(rng: random.Random) -> str:
    """A customer review whose star rating agrees with the balance of good and bad points."""
    thing, goods, bads = rng.choice(W.PRODUCTS)
    stars = rng.choice((1, 2, 3, 3, 4, 4, 4, 5, 5))
    n_good, n_bad = {1: (0, 3), 2: (1, 2), 3: (2, 2), 4: (2, 1), 5: (3, 0)}[stars]
    item = f"{rng.choice(W.BRANDS)} {thing}"
    plural = thing.startswith("pair")
    it = "they" if plural else "it"
    weeks = rng.choice(("two weeks", "a month", "three months", "six months", "about a year"))
    out = [fill(rng, (
        "I bought this {item} {why}.", "We have had the {item} for {weeks} now.",
        "I have been using this {item} for {weeks}.",
    ), item=item, weeks=weeks, why=rng.choice(("to replace one that finally broke", "after reading several reviews",
                                               "as a present for my father", "on a special offer")))]
    good = rng.sample(goods, n_good)
    bad = rng.sample(bads, n_bad)
    if good:
        out.append(f"On the plus side, {'they' if plural else 'it'} {join_list(good)}.")
    if bad:
        lead = "The main drawback is that" if len(bad) == 1 else "However, there are problems:"
        out.append(f"{lead} {join_list(bad)}.")
    extras = [
        f"I use {'them' if plural else 'it'} almost every day.",
        "Delivery was quick and the packaging was mostly recyclable.",
        f"The instructions were {rng.choice(('clear', 'confusing', 'fine', 'almost useless'))}.",
        f"For the price, {it} {'are' if plural else 'is'} "
        f"{W.PRICE_VIEWS[min(stars, 4) - 1] if stars > 1 else 'poor value'}.",
        f"{'They look' if plural else 'It looks'} "
        f"{rng.choice(('smart', 'fine', 'rather plain', 'better than in the photos'))}.",
    ]
    out.extend(rng.sample(extras, rng.randint(1, 3)))
    out.append(rng.choice(VERDICTS[stars]))
    out.append(f"{number_word(stars).capitalize()} {'star' if stars == 1 else 'stars'} out of five.")
    return " ".join(out)


def _soup(rng: random.Random) -> tuple[str, list[str]]:
    (veg, veg_amount), (fl, fl_amount) = rng.choice(W.SOUP_VEG), rng.choice(W.FLAVOURS)
    mins = rng.choice(("fifteen", "twenty", "twenty-five", "thirty"))
    return f"{sentence_case(veg)} and {fl} soup", [
        "Soften a chopped onion in a little oil or butter for about ten minutes, without letting it brown.",
        f"Add {veg_amount}, {fl_amount}, and a litre of hot stock.",
        f"Simmer for {mins} minutes, until everything is tender.",
        "Blend until smooth, adding a splash more water if it is too thick.",
        f"Season well and serve with "
        f"{rng.choice(('crusty bread', 'a swirl of yogurt', 'toasted seeds', 'cheese scones'))}.",
    ]


def _cake(rng: random.Random) -> tuple[str, list[str]]:
    (fruit, fruit_amount), (extra, extra_amount) = rng.choice(W.FRUITS), rng.choice(W.CAKE_EXTRAS)
    temp = rng.choice(("one hundred and seventy", "one hundred and eighty"))
    mins = rng.choice(("forty", "forty-five", "fifty"))
    return f"{sentence_case(fruit)} and {extra} cake", [
        f"Heat the oven to {temp} degrees and line a round cake tin.",
        "Beat two hundred grams of soft butter with the same weight of sugar until pale and fluffy.",
        "Add four eggs one at a time, beating well after each.",
        f"Fold in two hundred grams of self-raising flour and {extra_amount}, then spread half the mixture in the tin.",
        f"Scatter over {fruit_amount}, cover with the rest of the mixture, and bake for {mins} minutes, until a "
        "skewer comes out clean.",
        "Leave to cool in the tin for ten minutes before turning out.",
    ]


def _traybake(rng: random.Random) -> tuple[str, list[str]]:
    veg, (_, fl_amount) = rng.sample(W.ROAST_VEG, 2), rng.choice(W.FLAVOURS)
    protein = rng.choice(("chicken thighs", "sausages", "chickpeas", "salmon fillets", "halloumi", "pork chops"))
    return f"{sentence_case(protein)} with roast {veg[0]} and {veg[1]}", [
        "Heat the oven to two hundred degrees.",
        f"Toss the {veg[0]} and {veg[1]} in a large roasting tin with oil, salt, pepper and {fl_amount}.",
        f"Roast for twenty minutes, then add the {protein} and return the tin to the oven.",
        f"Cook for another {rng.choice(('fifteen', 'twenty', 'twenty-five'))} minutes, until everything is golden.",
        f"Serve with {rng.choice(('rice', 'couscous', 'a green salad', 'flatbreads', 'crusty bread'))}.",
    ]


def _crumble(rng: random.Random) -> tuple[str, list[str]]:
    (a, a_amount), (b, b_amount) = rng.sample(W.FRUITS, 2)
    return f"{sentence_case(a)} and {b} crumble", [
        f"Put {a_amount} and {b_amount} in a baking dish with a few spoonfuls of sugar.",
        "Rub a hundred grams of cold butter into a hundred and fifty grams of flour until it looks like breadcrumbs.",
        f"Stir in seventy-five grams of brown sugar and a handful of {rng.choice(('oats', 'chopped nuts', 'seeds'))}.",
        "Scatter the topping over the fruit and bake at one hundred and eighty degrees for forty minutes.",
        f"Serve warm with {rng.choice(('custard', 'cream', 'vanilla ice cream', 'thick yogurt'))}.",
    ]


RECIPES = (_soup, _cake, _traybake, _crumble)


def recipe(rng: random.Random) -> str:
    """A short recipe with an introduction, numbered-free method sentences and a serving note."""
    title, steps = rng.choice(RECIPES)(rng)
    serves = rng.randint(2, 8)
    intro = rng.choice((
        "This is a simple dish that can be made with whatever is in season.",
        "A family favourite that takes very little effort.",
        "This recipe was handed down from my grandmother, with a few changes of my own.",
        "A good one for a cold evening, and it freezes well.",
        "Cheap, cheerful and very hard to get wrong.",
    ))
    tail = rng.choice((
        "Leftovers keep for two days in the fridge.", "It is even better the next day.",
        "Children usually ask for seconds.", "Double the quantities for a crowd.",
    ))
    return f"{title}. Serves {number_word(serves)}. {intro} " + " ".join(steps) + f" {tail}"


def _news_opening(rng: random.Random, t: str, n: int, p: Person, day: str) -> list[str]:
    shop = rng.choice(("bakery", "bookshop", "café", "hardware shop", "bicycle repair shop", "greengrocer's"))
    return [
        f"A new {shop} has opened in the high street in {t}, filling a unit that had stood empty for "
        f"{number_word(rng.randint(2, 6))} years.",
        f"More than {n} customers came through the door on the first day, {day}.",
        f"\"We have been overwhelmed by the welcome,\" said the owner, {p.name}, who grew up in the town.",
        rng.choice(("Neighbouring traders said the opening was a welcome sign that the high street was recovering.",
                    f"The {shop} will be open six days a week and plans to take on two more staff in the summer.")),
    ]


def _news_charity(rng: random.Random, t: str, n: int, p: Person, day: str) -> list[str]:
    cause = rng.choice(("the local hospice", "the children's ward at the hospital", "the air ambulance",
                        "the food bank", "the lifeboat station"))
    return [
        f"Around {n} people took part in a sponsored {rng.choice(('walk', 'run', 'swim', 'cycle ride'))} in {t} "
        f"on {day}, raising money for {cause}.",
        f"Participants ranged in age from {rng.randint(4, 9)} to {rng.randint(78, 91)}.",
        f"\"The weather was kind to us, and the atmosphere was wonderful,\" said {p.name}, one of the organisers.",
        f"The total raised so far is more than {rng.randint(3, 40)},{rng.randint(0, 9)}00 pounds.",
        rng.choice(("Donations can still be made online until the end of the month.",
                    "Organisers hope to make the event an annual fixture.")),
    ]


def _news_council(rng: random.Random, t: str, n: int, p: Person, day: str) -> list[str]:
    plan = rng.choice(("a new car park on the site of the old cattle market", "a cycle lane along the main road",
                       "plans to close the public toilets in the park", "the conversion of the old school into flats",
                       "a twenty miles an hour speed limit in the town centre"))
    return [
        f"Councillors in {t} have {rng.choice(('approved', 'rejected', 'delayed a decision on'))} {plan}.",
        f"The meeting on {day} was attended by {n} members of the public, and feelings ran high on both sides.",
        f"\"We have listened carefully to everyone's views,\" said {p.name}, who chairs the planning committee.",
        rng.choice(("A further report is expected in the spring.",
                    "Campaigners have said they will continue to fight the decision.",
                    "The full minutes of the meeting will be published on the council's website.")),
    ]


def _news_sport(rng: random.Random, t: str, n: int, p: Person, day: str) -> list[str]:
    sport = rng.choice(("cricket", "football", "netball", "rugby", "hockey", "bowls"))
    return [
        f"{t} {sport.capitalize()} Club won the county cup for the first time in {rng.randint(12, 60)} years on {day}.",
        f"A crowd of {n} watched the final, which was decided in the last few minutes.",
        f"\"The players deserve every bit of this,\" said the club captain, {p.name}, adding that the celebrations "
        "would go on for some time.",
        rng.choice((f"The team will be honoured at a reception at the town hall in {rng.choice(MONTHS)}.",
                    "The trophy will be on display in the clubhouse for the rest of the season.")),
    ]


def _news_school(rng: random.Random, t: str, n: int, p: Person, day: str) -> list[str]:
    prize = rng.choice(("a national science competition", "a regional award for its school garden",
                        "a county chess tournament", "a national poetry prize", "a robotics challenge"))
    return [
        f"Pupils from {t} Primary School are celebrating after winning {prize}.",
        f"The team of {number_word(rng.randint(4, 12))} pupils, aged between nine and eleven, beat entries from more "
        f"than {n} schools.",
        f"\"I could not be prouder of them,\" said the head teacher, {p.name}. \"They worked on this every lunchtime "
        "for months.\"",
        "The school plans to spend the prize money on new books for the library.",
    ]


def _news_animal(rng: random.Random, t: str, n: int, p: Person, day: str) -> list[str]:
    animal = rng.choice(("cat", "tortoise", "parrot", "dog", "rabbit"))
    days = rng.randint(3, 40)
    where = rng.choice(("in a hedge", "on a garage roof", "in a shed", "by the canal"))
    return [
        f"A {animal} that went missing from a garden in {t} has been reunited with its owners after {days} days.",
        f"It was found on {day} by {p.name}, who spotted it {where} almost a mile from home.",
        rng.choice(("A microchip allowed the vet to trace the owners within minutes.",
                    "A neighbour recognised it from a poster in the post office window.")),
        "\"We had almost given up hope,\" said the owner. \"The children are over the moon.\"",
    ]


NEWS = (_news_opening, _news_charity, _news_council, _news_sport, _news_school, _news_animal)


def news_brief(rng: random.Random) -> str:
    """A local news story about an invented town, with a quoted source."""
    t = town(rng)
    n = rng.choice((40, 60, 80, 120, 150, 200, 250, 300, 400, 500))
    return " ".join(rng.choice(NEWS)(rng, t, n, person(rng), rng.choice(WEEKDAYS)))


def plant_care(rng: random.Random) -> str:
    """A short how-to on looking after a plant, in the second person."""
    plant, light, water, soil, problem = rng.choice(W.PLANTS)
    grower = person(rng)
    out = [rng.choice((
        f"How to look after {a_an(plant)}.", f"Growing {a_an(plant)}: a beginner's guide.",
        f"A few notes on {plant} care, from {grower.name} of the {town(rng)} Gardening Club.",
    ))]
    out.append(rng.choice((
        f"The {plant} is easy to grow if you get a few basics right.",
        f"Many people give up on the {plant} too quickly, but it is forgiving once you understand what it needs.",
        f"Of all the plants I have grown, the {plant} has given me the most pleasure for the least effort.",
    )))
    out.append(f"Give it {light}.")
    out.append(sentence_case(water) + ".")
    out.append(sentence_case(soil) + ".")
    out.append(rng.choice(("Troubleshooting: ", "Remember that ", "Worth knowing: ")) + problem + ".")
    out.append(rng.choice((
        "Above all, look at the plant often; it will usually tell you what is wrong before it is too late.",
        "Do not be afraid to experiment. Plants are tougher than they look.",
        "With a little attention, it should reward you for years.",
        f"If in doubt, ask at your local garden centre, or come along to a club meeting on the first "
        f"{rng.choice(WEEKDAYS)} of the month.",
    )))
    return " ".join(out)


def event_notice(rng: random.Random) -> str:
    """A community notice for a local event, with a contact person."""
    kind, where, detail = rng.choice(W.EVENT_KINDS)
    where = where.format(saint=rng.choice(("Mary", "John", "Anne", "Luke", "Michael")))
    t, contact = town(rng), person(rng)
    cause = rng.choice(("the church roof fund", "the village school", "the local hospice", "the scout group",
                        "new playground equipment", "the lifeboat station"))
    out = [f"{sentence_case(kind)} in {t}.", fill(rng, (
        "Come along to {a_kind} at {where} on {day} {date} {month}, starting at {time}.",
        "Everyone is invited to {a_kind} at {where} on {day} {date} {month} from {time}.",
    ), a_kind=a_an(kind), where=where, day=rng.choice(WEEKDAYS), date=str(rng.randint(1, 28)),
        month=rng.choice(MONTHS), time=rng.choice(("ten o'clock", "two o'clock", "half past seven", "seven o'clock")))]
    out.append(detail)
    out.append(rng.choice((
        f"Entry is {rng.choice(('three pounds', 'five pounds for adults, children free', 'two pounds'))}, and all "
        f"money raised will go to {cause}.",
        f"Entry is free, but there will be a collection for {cause}.",
        f"There is no charge, but donations to {cause} would be very welcome.",
    )))
    out.append(rng.choice((
        "Parking is limited, so please walk or share a car if you can.",
        "The venue is accessible to wheelchair users.",
        "Last year's event was a great success, and we hope to see even more of you this time.",
        "Volunteers to help set up in the morning would be greatly appreciated.",
    )))
    out.append(f"For more information, please contact {contact.name}.")
    return " ".join(out)
