"""Generators about things and events: product reviews, recipes and local news briefs.
Each function takes a seeded `random.Random` and returns one document."""

from __future__ import annotations

import random

from .tables import MONTHS, WEEKDAYS, Person, a_an, fill, join_list, number_word, person, sentence_case, town

BRANDS = ("Halden", "Corvex", "Brightwell", "Nordby", "Ambleside", "Kestrel", "Marlow", "Tidewater", "Pennant",
          "Oakhurst", "Vantage", "Linden")
# (product, what replaced it / why bought, good points, bad points)
PRODUCTS = (
    ("kettle", ("boils a full jug in under three minutes", "is much quieter than my old one",
                "has a clear window so you can see the water level", "switches off reliably"),
     ("the lid is stiff to open", "the handle gets warm", "it leaves limescale flakes in the water",
      "the cord is rather short")),
    ("rucksack", ("has plenty of pockets without feeling cluttered", "sits comfortably even when it is full",
                  "kept everything dry in a heavy shower", "has a padded sleeve that fits my laptop"),
     ("the zips are a little stiff", "the side pockets are too shallow for a water bottle",
      "the straps started to fray after a few months", "it is heavier than it looks")),
    ("desk lamp", ("gives a warm, even light", "folds flat when not in use", "has three brightness settings",
                   "is very stable on the desk"),
     ("the switch is awkward to find in the dark", "it flickers slightly at the lowest setting",
      "the arm will not stay in some positions", "the base scratches easily")),
    ("pair of walking boots", ("were comfortable straight out of the box", "kept my feet dry through muddy fields",
                               "have excellent grip on wet rock", "give good support to the ankles"),
     ("they are warm in summer", "the laces keep coming undone", "the soles wore down faster than I expected",
      "they took a long time to dry after a soaking")),
    ("bread maker", ("makes a decent loaf with very little effort", "has a useful delay timer",
                     "is easy to clean", "comes with a good recipe book"),
     ("it is noisy during kneading", "the paddle gets stuck in the loaf", "it takes up a lot of counter space",
      "the crust is often too pale")),
    ("vacuum cleaner", ("has strong suction on carpets", "is light enough to carry upstairs",
                        "comes with a useful crevice tool", "empties without any mess"),
     ("the battery lasts barely twenty minutes", "it is loud", "hair wraps around the brush",
      "the dust container is small")),
    ("garden hose", ("does not kink, which is a first for me", "has a spray gun with several useful settings",
                     "reels back in neatly", "is long enough to reach the end of the garden"),
     ("the connectors leak slightly", "it is stiff in cold weather", "the reel is flimsy",
      "the spray gun broke after a season")),
    ("alarm clock", ("has a gentle light that brightens before the alarm", "is easy to set",
                     "has a pleasant, not too shrill alarm", "keeps good time"),
     ("the display is too bright at night", "the buttons are tiny", "the snooze button is in an awkward place",
      "the radio reception is poor")),
    ("frying pan", ("heats evenly", "has a non-stick surface that really works", "goes in the oven",
                    "has a comfortable handle"),
     ("it is heavy", "the coating scratched within months", "the handle gets hot",
      "it warped slightly on a high heat")),
    ("bicycle lock", ("feels very solid", "comes with a bracket that fits the frame", "has a key that turns smoothly",
                      "is long enough to go round a lamp post"),
     ("it is heavy to carry", "the bracket rattles", "the lock jams in the rain", "the keys are easily lost")),
)
PRICE_VIEWS = ("poor value", "a little overpriced", "about what I expected", "a fair deal")
VERDICTS = {
    1: ("I cannot recommend it.", "I have sent it back.", "A disappointing purchase."),
    2: ("It does the job, just about, but I would look elsewhere.", "Not terrible, but not good value either."),
    3: ("It is fine for the price, but not outstanding.", "A reasonable buy if you do not expect too much."),
    4: ("Overall I am very happy with it.", "Good value, and I would buy it again.", "A solid, reliable choice."),
    5: ("I cannot fault it.", "Excellent. I have already recommended it to friends.", "Worth every penny."),
}


def product_review(rng: random.Random) -> str:
    """A customer review whose star rating agrees with the balance of good and bad points."""
    thing, goods, bads = rng.choice(PRODUCTS)
    stars = rng.choice((1, 2, 3, 3, 4, 4, 4, 5, 5))
    n_good, n_bad = {1: (0, 3), 2: (1, 2), 3: (2, 2), 4: (2, 1), 5: (3, 0)}[stars]
    item = f"{rng.choice(BRANDS)} {thing}"
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
        f"{PRICE_VIEWS[min(stars, 4) - 1] if stars > 1 else 'poor value'}.",
        f"{'They look' if plural else 'It looks'} "
        f"{rng.choice(('smart', 'fine', 'rather plain', 'better than in the photos'))}.",
    ]
    out.extend(rng.sample(extras, rng.randint(1, 3)))
    out.append(rng.choice(VERDICTS[stars]))
    out.append(f"{number_word(stars).capitalize()} {'star' if stars == 1 else 'stars'} out of five.")
    return " ".join(out)


# (name for titles, amount as it appears in a method)
SOUP_VEG = (
    ("carrot", "six large carrots, chopped"), ("leek", "three leeks, sliced"),
    ("pea", "five hundred grams of frozen peas"),
    ("parsnip", "four parsnips, chopped"), ("butternut squash", "a butternut squash, peeled and cubed"),
    ("mushroom", "four hundred grams of mushrooms, sliced"), ("tomato", "a kilo of ripe tomatoes, chopped"),
    ("sweet potato", "two large sweet potatoes, cubed"), ("cauliflower", "a cauliflower, broken into florets"),
    ("beetroot", "four raw beetroot, peeled and chopped"), ("courgette", "three courgettes, sliced"),
    ("celeriac", "a small celeriac, peeled and diced"),
)
FLAVOURS = (
    ("ginger", "a thumb of fresh ginger, grated"), ("cumin", "a teaspoon of ground cumin"),
    ("thyme", "a few sprigs of thyme"), ("mint", "a handful of fresh mint"),
    ("smoked paprika", "a teaspoon of smoked paprika"), ("coriander", "a bunch of coriander, chopped"),
    ("rosemary", "a sprig of rosemary"), ("lemon", "the zest and juice of a lemon"),
    ("chilli", "a red chilli, finely chopped"), ("garlic", "three cloves of garlic, crushed"),
    ("sage", "a few sage leaves"), ("nutmeg", "a good grating of nutmeg"),
)
FRUITS = (
    ("apple", "two apples, peeled and thinly sliced"), ("pear", "two ripe pears, peeled and sliced"),
    ("plum", "six plums, stoned and halved"), ("blackberry", "two handfuls of blackberries"),
    ("rhubarb", "three sticks of rhubarb, cut into short lengths"), ("cherry", "a bowl of cherries, stoned"),
    ("apricot", "eight apricots, halved"), ("raspberry", "a punnet of raspberries"),
    ("gooseberry", "a bowl of gooseberries, topped and tailed"), ("blueberry", "a punnet of blueberries"),
)
CAKE_EXTRAS = (
    ("almond", "a handful of flaked almonds"), ("hazelnut", "a handful of chopped hazelnuts"),
    ("walnut", "a handful of chopped walnuts"), ("pistachio", "a handful of chopped pistachios"),
    ("coconut", "two tablespoons of desiccated coconut"), ("ginger", "a teaspoon of ground ginger"),
    ("cinnamon", "a teaspoon of cinnamon"), ("cardamom", "the seeds of four cardamom pods, crushed"),
    ("vanilla", "a teaspoon of vanilla extract"), ("orange", "the grated zest of an orange"),
)
ROAST_VEG = ("carrots", "parsnips", "red onions", "peppers", "cubes of squash", "sweet potatoes", "beetroot",
             "courgettes", "cauliflower florets", "new potatoes", "fennel")


def _soup(rng: random.Random) -> tuple[str, list[str]]:
    (veg, veg_amount), (fl, fl_amount) = rng.choice(SOUP_VEG), rng.choice(FLAVOURS)
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
    (fruit, fruit_amount), (extra, extra_amount) = rng.choice(FRUITS), rng.choice(CAKE_EXTRAS)
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
    veg, (_, fl_amount) = rng.sample(ROAST_VEG, 2), rng.choice(FLAVOURS)
    protein = rng.choice(("chicken thighs", "sausages", "chickpeas", "salmon fillets", "halloumi", "pork chops"))
    return f"{sentence_case(protein)} with roast {veg[0]} and {veg[1]}", [
        "Heat the oven to two hundred degrees.",
        f"Toss the {veg[0]} and {veg[1]} in a large roasting tin with oil, salt, pepper and {fl_amount}.",
        f"Roast for twenty minutes, then add the {protein} and return the tin to the oven.",
        f"Cook for another {rng.choice(('fifteen', 'twenty', 'twenty-five'))} minutes, until everything is golden.",
        f"Serve with {rng.choice(('rice', 'couscous', 'a green salad', 'flatbreads', 'crusty bread'))}.",
    ]


def _crumble(rng: random.Random) -> tuple[str, list[str]]:
    (a, a_amount), (b, b_amount) = rng.sample(FRUITS, 2)
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


# (plant, light, water, soil or feeding, a common problem and its cure)
PLANTS = (
    ("spider plant", "bright light but not fierce midday sun", "water when the top of the compost feels dry",
     "feed once a month in spring and summer", "brown tips on the leaves usually mean the air is too dry"),
    ("peace lily", "shade or indirect light",
     "keep the compost moist; the leaves droop dramatically when it is thirsty",
     "feed every few weeks while it is flowering", "yellow leaves are often a sign of too much water"),
    ("rosemary", "full sun and shelter from cold winds", "water sparingly; it hates sitting in wet soil",
     "grow it in gritty, well-drained soil", "a plant that has gone woody can be cut back lightly after flowering"),
    ("tomato plant", "the sunniest spot you have", "water every day in hot weather, always at the base",
     "feed weekly with a tomato feed once the first fruits appear",
     "split fruit is caused by irregular watering, so keep it steady"),
    ("sweet pea", "sun or light shade", "water well in dry spells",
     "grow it up canes or netting in rich soil", "pick the flowers often, or the plant will stop producing them"),
    ("cactus", "as much light as possible", "water only when the soil is completely dry, and hardly at all in winter",
     "use a special gritty compost", "a soft, dark base means rot, usually from overwatering"),
    ("lavender", "full sun", "water young plants until they are established, then rarely",
     "plant it in poor, free-draining soil", "trim it after flowering to stop it becoming leggy"),
    ("fern", "shade and humidity", "keep the compost evenly moist", "feed lightly in summer",
     "crispy fronds suggest the room is too warm or too dry, so try a bathroom or kitchen"),
    ("runner bean", "a sunny, sheltered spot", "water generously once the flowers appear",
     "dig plenty of compost into the bed before planting", "if the flowers fall without setting, water more often"),
    ("orchid", "bright, indirect light", "soak the roots once a week and let them drain completely",
     "use bark compost rather than ordinary potting soil",
     "silvery roots mean it needs water; green roots mean it does not"),
)


def plant_care(rng: random.Random) -> str:
    """A short how-to on looking after a plant, in the second person."""
    plant, light, water, soil, problem = rng.choice(PLANTS)
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


EVENT_KINDS = (
    ("quiz night", "the village hall", "Teams of up to six are welcome, and there will be a raffle at half time."),
    ("jumble sale", "the church hall", "Donations of clothes, books and toys can be left at the hall on Friday."),
    ("open garden afternoon", "the gardens of the old rectory", "Tea and homemade cakes will be served on the lawn."),
    ("talk on local history", "the library", "The talk will be illustrated with old photographs and maps of the town."),
    ("charity concert", "St {saint}'s church", "The programme includes music by the town band and the school choir."),
    ("family fun day", "the recreation ground", "There will be a bouncy castle, a dog show and a tug of war."),
    ("plant sale", "the community garden", "Bring your own bags and boxes, and come early for the best choice."),
    ("film night", "the community centre", "Doors open half an hour before the film, and there will be popcorn."),
)


def event_notice(rng: random.Random) -> str:
    """A community notice for a local event, with a contact person."""
    kind, where, detail = rng.choice(EVENT_KINDS)
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
