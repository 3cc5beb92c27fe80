"""Generators about people: biographies, personal letters, short stories and everyday conversations.
Each function takes a seeded `random.Random` and returns one document."""

from __future__ import annotations

import random

from .tables import MONTHS, ORDINALS, WEEKDAYS, Person, fill, load_tables, number_word, person, town

W = load_tables(__file__)  # gen_people.json; PROFESSIONS rows: (job, training, the work, remembered for)


def biography(rng: random.Random) -> str:
    """A short biography of an invented person, with birth, career and death years in order."""
    p = person(rng)
    t, t2, t3 = town(rng), town(rng), town(rng)
    job, trained, work, known = rng.choice(W.PROFESSIONS)
    born = rng.randint(1820, 1975)
    n_children = rng.randint(2, 9)
    s = dict(p.slots(), t=t, t2=t2, t3=t3, born=str(born), job=job,
             ord=birth_order(rng.randrange(n_children), n_children), n=number_word(n_children),
             parent=rng.choice(("farmer", "shopkeeper", "railway worker", "miner", "blacksmith", "weaver",
                                "fisherman", "schoolmaster", "carter", "mill worker")))
    out = [fill(rng, (
        "{name} was a {job} from {t}. Born in {born}, {he} was the {ord} of {n} children of a {parent}.",
        "{name}, born in {t} in {born}, was the {ord} of {n} children of a {parent} and became one of the "
        "best-known {job}s in the district.",
        "{name} was born in {t} in {born}. {His} father was a {parent}, and the family lived in a small terraced "
        "house near the market.",
    ), **s)]
    out.append(sentence(rng, (
        "{He} left school early and {trained}.", "After leaving school, {he} {trained}.",
        "As a young {person}, {he} {trained}.",
    ), trained=trained.format(t2=t2), person="woman" if p.female else "man", **s))
    out.append(sentence(rng, (
        "For most of {his} working life {he} {work}.", "After that, {he} {work}.",
        "Returning to {t}, {he} {work}.",
    ), work=work, **s))
    out.append(fill(rng, (
        "{He} is best remembered for {known}.", "Today {he} is chiefly remembered for {known}.",
        "Among {his} achievements was {known}.",
    ), known=known, **s))
    spouse = person(rng, female=not p.female)
    married = born + rng.randint(21, 36)
    out.append(fill(rng, (
        "In {m} {he} married {sp}, and they had {k} children.",
        "{He} married {sp} in {m}; the couple had {k} children and lived for many years on the edge of {t3}.",
        "{He} never married, and lived with a younger sibling in a cottage outside {t3}.",
    ), m=str(married), sp=spouse.name, k=number_word(rng.randint(1, 5)), **s))
    out.append(f"Outside work, {s['he']} was {rng.choice(W.HOBBIES)}.")
    age = rng.randint(58, 96)
    if born + age <= 2023:
        out.append(fill(rng, ("{He} died in {died} at the age of {age}.", "{He} died at {t3} in {died}, aged {age}.",
                              "{He} died in {died}, after a short illness, at the age of {age}."),
                        died=str(born + age), age=str(age), **s))
    else:
        out.append(fill(rng, ("{He} retired in {r} and still lives in {t}.",
                              "Since retiring in {r}, {he} has divided {his} time between {t} and {t3}."),
                        r=str(born + rng.randint(60, 67)), **s))
    out.append(rng.choice(W.LEGACIES).format(**s))
    return " ".join(out)


def birth_order(index: int, n: int) -> str:
    """'eldest', 'youngest' or 'third' for the child at `index` (0-based) of `n`."""
    return "eldest" if index == 0 else "youngest" if index == n - 1 else ORDINALS[index]


def sentence(rng: random.Random, options: tuple[str, ...], **slots: str) -> str:
    """`fill`, then capitalise the first letter (templates may start with a pronoun slot)."""
    text = fill(rng, options, **slots)
    return text[:1].upper() + text[1:]


def letter(rng: random.Random) -> str:
    """A personal letter between invented friends or relatives."""
    to, frm, kid = person(rng), person(rng), person(rng)
    month = rng.choice(MONTHS)
    t = town(rng)
    out = [rng.choice(("Dear {f},", "Hi {f},", "Dearest {f},")).format(f=to.first)]
    out.append(rng.choice((
        "Thank you so much for your letter, and sorry it has taken me so long to reply.",
        "It was lovely to see you last month, and I have been meaning to write ever since.",
        "I hope you are well and that the winter has not been too hard on you.",
        "I was so pleased to get your card, and it made me realise how long it has been since we talked.",
    )))
    for item in rng.sample(W.NEWS_ITEMS, rng.randint(2, 4)):
        out.append(item.format(kid=kid.first, kh=kid.slots()["he"], t=t, month=month))
    out.append(rng.choice(W.QUESTIONS))
    out.append(rng.choice(W.PLANS).format(month=rng.choice(MONTHS), t=town(rng)))
    out.append(rng.choice(W.SIGNOFFS) + " " + frm.first)
    return "\n".join([out[0], " ".join(out[1:-1]), out[-1]])


def _story_lost(rng: random.Random, p: Person, f: Person, t: str, month: str) -> list[str]:
    thing = rng.choice(("wedding ring", "grandfather's watch", "house keys", "silver locket", "old notebook"))
    place = rng.choice(("on the beach", "in the park", "somewhere in the market", "on the walk home"))
    return [
        f"On a {rng.choice(('grey', 'bright', 'windy', 'damp'))} {rng.choice(WEEKDAYS)} in {month}, {p.name} lost "
        f"{p.slots()['his']} {thing} {place}.",
        rng.choice((f"{p.slots()['He']} retraced {p.slots()['his']} steps twice, looking under benches and in the "
                    "gutters, but found nothing.",
                    f"{p.slots()['He']} searched until it was too dark to see, then walked home feeling sick.")),
        f"That evening {p.slots()['he']} put a notice in the window of the post office in {t}, without much hope.",
        rng.choice((f"Three days later there was a knock at the door. It was {f.name}, a "
                    f"{'woman' if f.female else 'man'} {p.slots()['he']} had never met, holding the {thing} in an "
                    "envelope.",
                    f"A week went by. Then {f.name}, who delivered the newspapers, mentioned that {f.slots()['he']} "
                    f"had found something shiny by the bandstand.")),
        rng.choice((f"{p.first} tried to give {f.slots()['him']} a reward, but {f.slots()['he']} would only accept "
                    "a cup of tea.",
                    f"{p.first} was so relieved that {p.slots()['he']} laughed out loud, and then, to "
                    f"{p.slots()['his']} own surprise, burst into tears.")),
        rng.choice(("They are still friends.", f"Every {month} since, a card has arrived from {f.first}.",
                    f"These days {p.first} checks {p.slots()['his']} pockets twice before leaving the house.")),
    ]


def _story_storm(rng: random.Random, p: Person, f: Person, t: str, month: str) -> list[str]:
    return [
        f"The storm reached {t} just after dark, and by eight o'clock the power had gone.",
        f"{p.name} found candles in a kitchen drawer and sat by the window, listening to the wind in the chimney.",
        rng.choice((f"At about nine there was a knock. It was {f.name} from next door, holding a torch and a "
                    "flask of soup.",
                    f"Across the road {p.slots()['he']} could see a torch moving. It was {f.name}, checking on "
                    "the older neighbours one house at a time.")),
        rng.choice(("They had lived in the same street for years and had hardly spoken.",
                    f"{p.first} had always thought {f.slots()['him']} rather unfriendly.")),
        rng.choice(("By midnight half the street was sitting in one kitchen, playing cards by candlelight.",
                    "They talked until the early hours, about the town, their families and the storms of the past.")),
        rng.choice(("When the lights came back on at dawn, there was a small groan of disappointment.",
                    "The damage was cleared within a week, but something in the street had changed for good.")),
    ]


def _story_newcomer(rng: random.Random, p: Person, f: Person, t: str, month: str) -> list[str]:
    club = rng.choice(("choir", "allotment society", "quiz team", "walking group", "amateur dramatics club"))
    return [
        f"{p.name} moved to {t} in {month}, knowing nobody.",
        rng.choice((f"For the first few weeks {p.slots()['he']} spoke to no one but the woman in the corner shop.",
                    "The house was quiet, and the evenings were long.")),
        f"In the end it was a poster in the library that changed things: the {club} was looking for new members.",
        rng.choice((f"{p.first} nearly turned back at the door, but {f.name} saw {p.slots()['him']} hesitating and "
                    f"waved {p.slots()['him']} in.",
                    f"{p.slots()['He']} sat at the back at the first meeting, next to {f.name}, who talked all "
                    f"the way through and made {p.slots()['him']} laugh.")),
        rng.choice(("By the spring, the evenings were no longer long enough.",
                    f"Within a year {p.first} was the secretary of the {club} and knew half the town.")),
        rng.choice((f"{p.slots()['He']} still says that moving to {t} was the best decision {p.slots()['he']} "
                    "ever made.", "Sometimes the hardest part is simply going through the door.")),
    ]


def _story_contest(rng: random.Random, p: Person, f: Person, t: str, month: str) -> list[str]:
    entry = rng.choice(("a lemon cake", "a marrow", "a loaf of bread", "a jar of plum jam", "a bunch of dahlias"))
    return [
        f"Every {month}, the {t} show was the biggest event of the year, and every year {p.name} entered "
        f"{entry} and every year {p.slots()['he']} came second to {f.name}.",
        rng.choice(("This year, things would be different.", f"This year, {p.first} had a plan.")),
        rng.choice((f"{p.slots()['He']} spent months preparing, asking advice from everyone who would listen.",
                    f"{p.slots()['He']} practised every weekend and wrote down every detail in a notebook.")),
        rng.choice(("On the morning of the show, disaster struck: the dog knocked it off the kitchen table.",
                    f"On the morning of the show {p.slots()['he']} dropped {entry} on the garden path.")),
        rng.choice((f"It was {f.first}, of all people, who came to the rescue, lending {p.slots()['him']} "
                    "everything needed to start again.",
                    f"{p.first} entered what was left of it anyway.")),
        rng.choice((f"{p.first} came second again. {p.slots()['He']} found that {p.slots()['he']} did not mind "
                    "in the least.",
                    f"The judges gave first prize to {p.first}, and {f.first} was the first to shake "
                    f"{p.slots()['his']} hand.")),
    ]


def _story_letter(rng: random.Random, p: Person, f: Person, t: str, month: str) -> list[str]:
    year = rng.randint(1920, 1975)
    return [
        f"{p.name} found the letter inside a second-hand book bought for fifty pence at a market in {t}.",
        f"It was dated {rng.randint(1, 28)} {month} {year} and began, 'My dearest {f.first}'.",
        rng.choice(("It was a love letter, and an unhappy one: the writer was leaving, and did not say why.",
                    "It described a summer by the sea and ended with a promise to come back.")),
        rng.choice((f"{p.first} could not stop thinking about it, and began to make enquiries.",
                    f"For weeks {p.slots()['he']} tried to put it out of {p.slots()['his']} mind, and failed.")),
        rng.choice((f"The trail led, after many phone calls, to a care home on the edge of {t}, where a very old "
                    f"{'woman' if f.female else 'man'} called {f.name} read the letter twice and then smiled.",
                    f"The local paper printed the letter, and a week later {f.name}'s grandchildren got in touch.")),
        rng.choice(("'I always wondered what happened to it,' was all that was said.",
                    "Nobody ever found out who had written it, but it found its way home all the same.")),
    ]


STORY_PLOTS = (_story_lost, _story_storm, _story_newcomer, _story_contest, _story_letter)


def short_story(rng: random.Random) -> str:
    """A very short story built from one of several plot skeletons."""
    p, f = person(rng), person(rng)
    month = rng.choice(MONTHS)
    plot = rng.choice(STORY_PLOTS)
    return " ".join(plot(rng, p, f, town(rng), month))


def conversation(rng: random.Random) -> str:
    """A short everyday exchange in a shop or office, told with a line of narration before and after."""
    where, turns = rng.choice(W.SCENES)
    customer, staff = person(rng), person(rng)
    weekday = rng.choice(WEEKDAYS)
    lines = [fill(rng, (
        "It was a {mood} {weekday} morning at {where} in {t} when {c} came in, and {s} looked up from the counter.",
        "{c} arrived at {where} in {t} just after it opened on {weekday}. {s} was behind the counter.",
        "On {weekday} afternoon {c} called in at {where} in {t}, where {s} was on duty.",
    ), mood=rng.choice(("quiet", "busy", "wet", "sunny", "cold")), weekday=weekday, where=where, t=town(rng),
        c=customer.name, s=staff.name)]
    for i, (who, text) in enumerate(turns):
        name = customer.first if who == "C" else staff.first
        text = text.format(t=town(rng))
        if text.endswith("?"):
            lines.append(f'"{text}" asked {name}.')
        else:
            verb = "replied" if i and rng.random() < 0.3 else "said"
            lines.append(f'"{text[:-1]}," {verb} {name}.')
    lines.append(rng.choice(W.ENDINGS).format(c=customer.first, s=staff.first, weekday=weekday))
    return " ".join(lines)
