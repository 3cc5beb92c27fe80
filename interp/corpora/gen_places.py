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
    number_word,
    person,
    river,
    sentence_case,
    town,
)

DIRECTIONS = ("north", "south", "east", "west", "north-east", "north-west", "south-east", "south-west")
ORIGINS = (
    "a ford across the river", "a small priory founded in the twelfth century", "a crossroads on an old drovers' road",
    "a weekly cattle market", "a watermill and the cottages of the men who worked it", "a Norman church and its green",
    "a coaching inn on the road to the coast", "a bridge built by the monks of a nearby abbey",
)
INDUSTRIES = (
    "the wool trade", "brick making", "rope making", "the quarrying of limestone from the hills nearby",
    "paper mills powered by the river", "tanning and leatherwork", "brewing", "the manufacture of gloves",
    "boat building", "the making of clay pipes and pottery", "silk weaving", "the cattle and sheep markets",
)
DECLINES = (
    "the last mill closed in {y}", "the trade declined after the railway brought cheaper goods from the cities",
    "competition from larger works in the north led to a long decline", "the industry had all but vanished by {y}",
)
TODAY = (
    "Today most residents work in shops, schools and offices, or commute to {other}.",
    "Today tourism and small businesses are the main employers.",
    "The old warehouses by the river have since been converted into flats, studios and a small museum.",
    "Today the town is best known for its independent shops and its weekly market.",
    "A business park on the edge of town now provides most of the local jobs.",
)
LANDMARKS = (
    "the parish church of St {saint}, with its tall spire",
    "a seventeenth-century market hall standing on stone pillars",
    "a stone bridge of {n} arches", "the old corn exchange, now an arts centre", "a small Victorian railway station",
    "the ruins of a castle on the hill above the town", "a row of weavers' cottages on {street}",
    "a working watermill that grinds flour for local bakers", "a Georgian coaching inn with its original stables",
    "a museum of local history in the former grammar school", "an unusual octagonal chapel",
    "a set of almshouses built in {y}", "a public garden laid out on the site of the old gasworks",
)
SAINTS = ("Mary", "Michael", "Andrew", "Peter", "John", "Margaret", "Lawrence", "Helen", "Nicholas", "Edmund")
STREETS = ("Mill Lane", "Water Street", "Church Row", "Silver Street", "Tanners Lane", "Bridge Street", "High Street")
EVENTS = (
    "an agricultural show", "a folk music festival", "a cheese fair", "a regatta on the river", "a lantern procession",
    "a beer festival", "a book festival", "a horse fair that dates back several centuries", "a food and craft market",
)


def town_entry(rng: random.Random) -> str:
    """An encyclopedia-style entry about an invented town."""
    name, other, third = town(rng), town(rng), town(rng)
    pop = rng.randint(800, 46000)
    kind = "village" if pop < 3000 else "market town" if pop < 15000 else "town"
    riv, y_decline = river(rng), rng.randint(1890, 1975)
    s = dict(name=name, kind=kind, river=riv, other=other, third=third, pop=f"{pop:,}", about=f"{round(pop, -2):,}",
             dir=rng.choice(DIRECTIONS), miles=str(rng.randint(4, 30)), hills=rng.choice(HILLS))
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
    out.append(f"The {kind} grew up around {rng.choice(ORIGINS)}, and its name first appears in records from the "
               f"{rng.choice(ORDINALS[10:14])} century.")
    industry = rng.choice(INDUSTRIES)
    decline = rng.choice(DECLINES).format(y=y_decline)
    out.append(fill(rng, (
        "For several centuries its prosperity depended on {industry}, but {decline}.",
        "In the nineteenth century the local economy was built on {industry}; {decline}.",
        "The town was once known for {industry}, although {decline}.",
    ), industry=industry, decline=decline))
    out.append(rng.choice(TODAY).format(other=other))
    marks = [m.format(saint=rng.choice(SAINTS), n=number_word(rng.randint(3, 7)), street=rng.choice(STREETS),
                      y=rng.randint(1600, 1880)) for m in rng.sample(LANDMARKS, rng.randint(2, 3))]
    out.append(fill(rng, (
        "Notable buildings include {marks}.", "Among its landmarks are {marks}.",
        "Visitors come to see {marks}.",
    ), marks=join_list(marks)))
    extras = [
        f"The {kind} holds {rng.choice(EVENTS)} each {rng.choice(MONTHS)}, which draws visitors from across the "
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


BUILDINGS = (
    ("Corn Exchange", 1840, 1880, "as a covered hall where farmers could sell their grain"),
    ("Assembly Hall", 1760, 1820, "for dances, concerts and public meetings"),
    ("Free Library", 1870, 1905, "with money left to the town by a local mill owner"),
    ("Mechanics' Institute", 1830, 1870, "to give working men a place to attend lectures and borrow books"),
    ("Market Hall", 1820, 1880, "to replace the open-air stalls that had filled the square for centuries"),
    ("Picture House", 1912, 1936, "as one of the first purpose-built cinemas in the county"),
    ("Swimming Pool", 1880, 1910, "at a time when few houses in the town had a bathroom"),
    ("Cottage Hospital", 1865, 1910, "after a public appeal that raised money from almost every household"),
    ("Town Hall", 1780, 1890, "to house the council chamber, the courtroom and the police station"),
)
LATER_USES = (
    "a furniture warehouse", "a bingo hall", "a carpet showroom", "council offices", "a storage depot",
    "a nightclub", "a second-hand market", "a garage for the council's lorries",
)
PRESENT_USES = (
    "an arts centre with a theatre, a gallery and a café", "a community hub run by volunteers",
    "a library and local history archive", "a music venue", "a food hall with stalls run by local producers",
    "workshops and studios for artists and craftspeople", "a museum of the town's history",
)


def building_history(rng: random.Random) -> str:
    """The history of an invented public building, with dates in order."""
    name = town(rng)
    building, lo, hi, purpose = rng.choice(BUILDINGS)
    built = rng.randint(lo, hi)
    architect = person(rng, female=built > 1900 and rng.random() < 0.3)
    altered = built + rng.randint(15, 50)
    closed = min(max(altered + rng.randint(10, 40), 1950), 2005)
    reopened = min(closed + rng.randint(5, 30), 2021)
    s = dict(name=name, b=building, built=str(built), purpose=purpose, arch=architect.name,
             altered=str(altered), closed=str(closed), reopened=str(reopened),
             later=rng.choice(LATER_USES), present=rng.choice(PRESENT_USES), his=architect.slots()["his"])
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


TRANSPORT = (
    ("by train", "The train was half empty, and I had a table to myself as far as {a}."),
    ("by bus", "The bus wound through small villages, stopping at every shelter whether anyone was waiting or not."),
    ("on foot", "The path followed {river} for most of the way, and I met only two other walkers all morning."),
    ("by bicycle", "The road was quiet and mostly flat, and I stopped often to look at the view."),
    ("by car", "I took the back roads rather than the motorway, which added an hour but was far more pleasant."),
)
WEATHER_PHRASES = {
    "winter": ("It was bitterly cold, with a thin layer of frost on the fields.", "A grey drizzle fell all day.",
               "The sky was clear and pale, and the low sun made long shadows."),
    "spring": ("It was a bright, breezy day with fast clouds.", "There were showers in the morning, then sunshine.",
               "The air was mild, and blossom was out along the hedges."),
    "summer": ("It was hot by nine o'clock, without a cloud in the sky.", "The day was warm and hazy.",
               "A thunderstorm broke in the afternoon and cleared the air."),
    "autumn": ("Mist lay in the valleys until almost noon.", "It was cool and windy, with leaves blowing everywhere.",
               "The light was soft and golden all afternoon."),
}
MEALS = (
    "a bowl of soup and thick bread in a pub by the bridge", "fish and chips eaten on a bench by the harbour",
    "a pie from the bakery, still warm", "a plate of local cheese and pickles at a farm café",
    "sandwiches on a bench in the churchyard", "a very large slice of cake in a tea room",
)
SIGHTS = (
    "The town centre is small, with a market square and a church that seems far too large for it.",
    "The old streets are steep and narrow, and many of the houses lean slightly towards each other.",
    "The harbour was busy with small boats, and the smell of fish and diesel hung over everything.",
    "From the castle walls there is a view over the whole valley and the river winding through it.",
    "The museum was closed, but the woman in the shop next door told me most of its history anyway.",
    "There is a fine old bridge at the bottom of the hill, and a weir where children were paddling.",
)
ENCOUNTERS = (
    "In the evening I talked for an hour with {p}, who has lived here all {his} life and remembers when the "
    "railway still ran.",
    "At the guesthouse I met {p}, a retired teacher who was walking the same route in the other direction.",
    "{p}, who runs the bookshop, recommended a walk up to the old quarry for tomorrow.",
    "A farmer called {p} stopped to ask whether I was lost, then gave me directions and a bag of apples.",
)
EVENINGS = (
    "I slept very well.", "My feet ache, but it was a good day.", "Tomorrow the forecast is for rain, so we shall see.",
    "I wrote these notes by the window, watching the lights come on across the river.",
    "It was an early night, with the sound of the river outside the window.",
)


def travel_diary(rng: random.Random) -> str:
    """A first-person travel diary entry for one day of an invented journey."""
    month = rng.choice(MONTHS)
    a, b = town(rng), town(rng)
    how, route = rng.choice(TRANSPORT)
    local = person(rng)
    out = [f"Day {rng.randint(2, 14)}, {rng.choice(WEEKDAYS)} {rng.randint(1, 28)} {month}. From {a} to {b}, {how}."]
    out.append(rng.choice(WEATHER_PHRASES[SEASON_OF_MONTH[month]]))
    out.append(route.format(a=town(rng), river=river(rng)))
    out.append(f"Lunch was {rng.choice(MEALS)}.")
    out.append(fill(rng, ("I reached {b} in the middle of the afternoon.",
                          "I arrived in {b} just before dark, tired but happy.",
                          "It was after four when {b} finally came into view."), b=b))
    out.extend(rng.sample(SIGHTS, 2))
    out.append(rng.choice(ENCOUNTERS).format(p=local.name, his=local.slots()["his"]))
    out.append(rng.choice(EVENINGS))
    return " ".join(out)


REGIONS = (
    "the north", "the south", "the east", "the west", "coastal areas", "the hills", "the Midlands", "the islands",
)
CONDITIONS = {
    "winter": ("a frosty start with freezing fog in places", "rain spreading from the west",
               "snow showers on high ground", "a cold, bright day with sunny spells", "sleet and strong winds"),
    "spring": ("sunny spells and scattered showers", "a damp, cloudy morning brightening later",
               "heavy showers with hail", "a dry day with plenty of sunshine", "mist and low cloud"),
    "summer": ("long sunny spells", "hazy sunshine and high humidity", "thunderstorms developing in the afternoon",
               "a cloudy start followed by sunshine", "a few showers, mainly in the morning"),
    "autumn": ("fog patches slow to clear", "blustery showers", "a band of persistent rain",
               "a dry, bright and chilly day", "heavy rain clearing by the afternoon"),
}
TEMPS = {"winter": (0, 9), "spring": (7, 17), "summer": (17, 30), "autumn": (8, 17)}
TIPS = {
    "winter": ("Drivers are advised to allow extra time for journeys in the morning, as roads may be icy.",
               "Anyone heading to the hills should take warm and waterproof clothing.",
               "It is worth checking on elderly neighbours during the cold spell."),
    "spring": ("Gardeners should protect tender plants overnight.",
               "Pollen levels will be moderate, rising later in the week.",
               "Keep an umbrella handy if you are out for long."),
    "summer": ("Pollen levels will be high, which is bad news for hay fever sufferers.",
               "Remember sun cream and plenty of water if you are outdoors for long.",
               "Anyone heading to the beach should check the tide times before setting out."),
    "autumn": ("Leaves on the roads may make them slippery, so take care on bends.",
               "Anyone heading to the hills should take warm and waterproof clothing.",
               "It would be wise to secure garden furniture before the wind picks up."),
}
WINDS = ("light winds", "a gentle breeze from the south-west", "a fresh westerly wind", "strong gusts on high ground",
         "a cold north-easterly wind", "winds easing through the day")


def degrees(n: int) -> str:
    """'1 degree', '5 degrees', 'minus 3 degrees'."""
    return f"{'minus ' if n < 0 else ''}{abs(n)} {'degree' if abs(n) == 1 else 'degrees'}"


def weather_report(rng: random.Random) -> str:
    """A regional weather forecast with internally consistent temperatures and days."""
    month = rng.choice(MONTHS)
    season = SEASON_OF_MONTH[month]
    lo, hi = TEMPS[season]
    day = rng.randrange(7)
    regions = rng.sample(REGIONS, 3)
    conds = rng.sample(CONDITIONS[season], 3)
    high = rng.randint(lo + 2, hi)
    out = [f"Here is the forecast for {WEEKDAYS[day]} {rng.randint(1, 28)} {month}."]
    out.append(f"{sentence_case(regions[0])} can expect {conds[0]}, while {regions[1]} will see {conds[1]}.")
    out.append(f"In {regions[2]} there will be {conds[2]}, with {rng.choice(WINDS)}.")
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
               f"{after} {rng.choice(CONDITIONS[season])} {rng.choice(('is likely', 'may return', 'is expected'))} "
               f"across much of the country.")
    if rng.random() < 0.6:
        out.append(rng.choice(TIPS[season]))
    return " ".join(out)


SIGHTINGS = {
    "winter": ("a flock of fieldfares stripping the hawthorns of their last berries",
               "a heron standing in the shallows",
               "a pair of bullfinches in the hedge", "the tracks of a fox in the frost", "a kingfisher on the weir",
               "long-tailed tits moving through the alders in a noisy group", "snowdrops under the churchyard wall"),
    "spring": ("the first chiffchaff singing from the willows", "frogspawn in the ditch by the gate",
               "a brimstone butterfly, bright yellow against the bare hedge", "primroses on the bank of the lane",
               "a pair of swallows back at the old barn", "lambs asleep in a heap by the wall",
               "a cuckoo calling from across the valley"),
    "summer": ("swifts screaming over the rooftops", "damselflies over the water, electric blue",
               "a hare sitting upright in the middle of the field", "meadowsweet thick along the river bank",
               "a buzzard circling high above the wood", "young moorhens following their mother through the reeds",
               "the smell of cut hay from the far meadow"),
    "autumn": ("geese flying over in a long, untidy line", "fungi pushing up through the leaf litter",
               "a jay burying acorns at the edge of the wood", "spiders' webs strung with dew on every gate",
               "starlings gathering on the wires above the lane", "blackberries, most of them already taken",
               "a robin singing its thin autumn song from the holly"),
}


MORNINGS = {
    "winter": ("Hard frost, the puddles frozen white.", "Grey and still, with a raw cold that got into the fingers.",
               "A clear sky and a low red sun over the fields."),
    "spring": ("A soft grey morning, mild for the time of year.", "Bright and breezy after overnight rain.",
               "Dew heavy on the grass, and a thin mist over the water."),
    "summer": ("Already warm at six, with a haze over the valley.", "Overcast and close, with thunder in the air.",
               "A cool, fresh start after a hot night."),
    "autumn": ("Thick mist that did not lift until nine.", "Wind from the west, with leaves coming down in showers.",
               "A cold, clear morning with the first real chill of the year."),
}


def nature_note(rng: random.Random) -> str:
    """A naturalist's dated field note from a walk, with seasonally consistent sightings."""
    month = rng.choice(MONTHS)
    season = SEASON_OF_MONTH[month]
    a = town(rng)
    seen = rng.sample(SIGHTINGS[season], 4)
    out = [f"{rng.randint(1, 28)} {month}. " + fill(rng, (
        "Walked along {river} from {a} in the early morning.", "A slow circuit of the lanes and woods above {a}.",
        "Out before breakfast on the footpath from {a} to the old mill.",
    ), river=river(rng), a=a)]
    out.append(rng.choice(MORNINGS[season]))
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
