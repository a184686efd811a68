"""Tool-calling tasks for the training corpus: many everyday domains, each with several tool
names, parameter names and request phrasings, so the model learns to pick the offered tool
that fits the request and to copy each argument's span out of the user's words, whatever the
tool is called and whatever the value is.

A role is what an argument means ("city", "count"); a schema names each role with one of its
parameter names. Values come from the lexicon (made-up names and places, any number), so the
only way to get an argument right is to copy it.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lexicon import Lexicon

UNITS = ["km", "miles", "kg", "pounds", "liters", "gallons", "celsius", "fahrenheit", "meters", "feet",
         "inches", "cm", "mm", "yards", "ounces", "grams", "tons", "cups", "pints", "seconds", "minutes",
         "hours", "days", "weeks", "bytes", "MB", "GB", "mph", "knots", "acres", "hectares", "kelvin", "stone"]
LANGUAGES = ["French", "German", "Spanish", "Italian", "Japanese", "Korean", "Greek", "Polish", "Dutch",
             "Swahili", "Hindi", "Arabic", "Finnish", "Czech", "Russian"]
CURRENCIES = ["EUR", "USD", "GBP", "JPY", "CHF", "SEK", "NOK", "CAD", "AUD", "INR", "BRL", "PLN"]

#: role -> (JSON type, value kind)
ROLES: dict[str, tuple[str, str]] = {
    "city": ("string", "place"), "origin": ("string", "place"), "destination": ("string", "place"),
    "person": ("string", "name"), "venue": ("string", "name"), "artist": ("string", "name"),
    "title": ("string", "words"), "body": ("string", "words"), "query": ("string", "words"),
    "item": ("string", "word"), "room": ("string", "word"), "date": ("string", "date"),
    "email": ("string", "email"), "language": ("string", "language"), "unit_from": ("string", "unit"),
    "unit_to": ("string", "unit"), "cur_from": ("string", "currency"), "cur_to": ("string", "currency"),
    "amount": ("number", "number"), "count": ("integer", "count"), "minutes": ("integer", "count"),
    "nights": ("integer", "count"), "level": ("integer", "count"),
}

#: (keywords tool names are made from, {role: parameter names}, phrasings with {role} slots)
DOMAINS: list[tuple[list[str], dict[str, list[str]], list[str]]] = [
    (["weather", "forecast", "conditions", "climate", "rain_check", "weather_report"],
     {"city": ["city", "location", "town", "where"]},
     ["What's the weather in {city}?", "How is the weather in {city} today?", "Weather in {city}?",
      "Is it raining in {city}?", "Will it snow in {city} this week?", "Do I need an umbrella in {city}?",
      "How hot is it in {city}?", "Tell me the forecast in {city}.", "Is it sunny in {city} right now?",
      "Weather report for {city}, please.", "Check the weather for {city}.", "Any storms coming to {city}?"]),
    (["time", "local_time", "clock", "current_time", "hour"],
     {"city": ["city", "location", "zone", "where"]},
     ["What time is it in {city}?", "Current time in {city}?", "Tell me the local time in {city}.",
      "Is it late in {city} now?", "What's the hour in {city}?", "Clock check for {city}."]),
    (["units", "unit", "measure", "measurement", "length", "quantity"],
     {"amount": ["value", "amount", "quantity", "number"], "unit_from": ["from_unit", "from", "source_unit", "unit_from"],
      "unit_to": ["to_unit", "to", "target_unit", "unit_to"]},
     ["Convert {amount} {unit_from} into {unit_to}.", "What is {amount} {unit_from} in {unit_to}?",
      "{amount} {unit_from} to {unit_to}, please.", "How much is {amount} {unit_from} in {unit_to}?",
      "Change {amount} {unit_from} to {unit_to}.", "Express {amount} {unit_from} in {unit_to}.",
      "I have {amount} {unit_from}; how many {unit_to} is that?", "Turn {amount} {unit_from} into {unit_to}.",
      "How many {unit_to} are in {amount} {unit_from}?", "Give me {amount} {unit_from} as {unit_to}."]),
    (["currency", "money", "fx", "exchange_rate"],
     {"amount": ["amount", "value", "sum"], "cur_from": ["from", "from_currency", "base"],
      "cur_to": ["to", "to_currency", "target"]},
     ["Convert {amount} {cur_from} into {cur_to}.", "How much is {amount} {cur_from} in {cur_to}?",
      "Exchange {amount} {cur_from} for {cur_to}.", "What are {amount} {cur_from} worth in {cur_to}?"]),
    (["table", "restaurant", "reservation", "dinner", "dining"],
     {"venue": ["restaurant", "venue", "place_name", "name"], "count": ["people", "guests", "party_size", "seats"]},
     ["Get me a table at {venue} for {count}.", "Make a reservation at {venue} for {count} people.",
      "I need a table for {count} at {venue}.", "Reserve {venue} for {count} guests.",
      "Can you book dinner at {venue} for {count}?", "Table for {count} at {venue}, please.",
      "We are {count}; find us seats at {venue}.", "Book us in at {venue}, party of {count}."]),
    (["hotel", "room", "lodging", "stay"],
     {"city": ["city", "location", "destination"], "nights": ["nights", "stay_nights", "duration"]},
     ["Book a hotel in {city} for {nights} nights.", "I need a room in {city} for {nights} nights.",
      "Find me somewhere to stay in {city}, {nights} nights.", "Reserve {nights} nights in {city}."]),
    (["flights", "flight", "airfare", "plane_ticket"],
     {"origin": ["origin", "from", "departure"], "destination": ["destination", "to", "arrival"]},
     ["Find flights from {origin} to {destination}.", "Are there flights between {origin} and {destination}?",
      "Fly me from {origin} to {destination}.", "Search a flight {origin} to {destination}."]),
    (["directions", "route", "navigation", "map_route"],
     {"origin": ["origin", "start", "from"], "destination": ["destination", "end", "to"]},
     ["How do I get from {origin} to {destination}?", "Directions from {origin} to {destination}, please.",
      "Plan a route from {origin} to {destination}.", "Navigate me to {destination} from {origin}."]),
    (["message", "text", "sms", "chat_message", "note_to"],
     {"person": ["recipient", "to", "contact", "person"], "body": ["message", "text", "body", "content"]},
     ["Message {person}: {body}", "Send {person} a text: {body}", "Tell {person} that {body}",
      "Write to {person} saying {body}", "Let {person} know: {body}", "Drop {person} a note: {body}",
      "Send a message to {person} that says {body}", "Ping {person} with: {body}"]),
    (["email", "mail", "e_mail"],
     {"email": ["to", "address", "recipient"], "title": ["subject", "title", "topic"]},
     ["Send an email to {email} with subject {title}.", "Email {email} about {title}.",
      "Mail {email}, subject: {title}", "Write an email to {email} titled {title}."]),
    (["music", "song", "track", "playlist", "tunes", "audio"],
     {"artist": ["artist", "singer", "band", "performer"]},
     ["Play some {artist}.", "I want to hear {artist}.", "Start music by {artist}.",
      "Queue a few songs by {artist}.", "Can you play {artist} for me?", "Put {artist} on.",
      "Music from {artist}, please.", "Let's listen to {artist}."]),
    (["reminder", "remind", "alert"],
     {"body": ["text", "note", "what"], "minutes": ["minutes", "in_minutes", "delay"]},
     ["Remind me to {body} in {minutes} minutes.", "In {minutes} minutes, remind me: {body}",
      "Set a reminder for {minutes} minutes from now: {body}"]),
    (["timer", "countdown", "stopwatch"],
     {"minutes": ["minutes", "duration", "length"]},
     ["Set a timer for {minutes} minutes.", "Start a {minutes} minute timer.", "Countdown {minutes} minutes, please.",
      "Time {minutes} minutes for me."]),
    (["web", "search", "info", "internet"],
     {"query": ["query", "q", "terms", "text"]},
     ["Search the web for {query}.", "Look up {query}.", "Find information about {query}.",
      "Google {query} for me.", "Search: {query}"]),
    (["translation", "translate", "language"],
     {"body": ["text", "source", "phrase"], "language": ["language", "target", "lang"]},
     ["Translate {body} into {language}.", "How would you say {body} in {language}?",
      "Put {body} into {language}."]),
    (["event", "calendar", "meeting", "appointment"],
     {"title": ["title", "name", "event"], "date": ["date", "day", "when"]},
     ["Add {title} to my calendar on {date}.", "Schedule {title} for {date}.", "Create an event {title} on {date}.",
      "Put {title} in the calendar for {date}."]),
    (["cart", "order", "purchase", "shopping"],
     {"item": ["item", "product", "name"], "count": ["quantity", "count", "qty"]},
     ["Add {count} {item} to my cart.", "Buy {count} {item}.", "Order {count} {item} for me.",
      "I'd like {count} {item}, please."]),
    (["lights", "lamp", "brightness"],
     {"room": ["room", "area", "zone"], "level": ["level", "brightness", "percent"]},
     ["Set the {room} lights to {level}.", "Dim the {room} to {level} percent.", "Lights in the {room} at {level}.",
      "Make the {room} {level} percent bright."]),
]

#: The "colons" recipe's extra phrasings, by the domain's first keyword: requests shaped like a
#: repeat instruction (words, a colon, a text), so that what tells a call from a copy is whether
#: an offered tool fits the words before the colon, not the colon.
COLON_PHRASINGS: dict[str, list[str]] = {
    "weather": ["Weather for: {city}", "Forecast please: {city}", "Rain or shine? {city}", "Weather check: {city}"],
    "time": ["Local time: {city}", "Clock for: {city}"],
    "units": ["Convert: {amount} {unit_from} to {unit_to}", "Units, {amount} {unit_from}: to {unit_to}"],
    "currency": ["Exchange: {amount} {cur_from} to {cur_to}"],
    "table": ["Table at {venue}: {count} people", "Reservation, {venue}: {count}"],
    "hotel": ["Hotel in {city}: {nights} nights"],
    "flights": ["Flight search: {origin} to {destination}"],
    "directions": ["Route: {origin} to {destination}"],
    "message": ["SMS {person}: {body}", "Message to {person}: {body}", "DM {person}: {body}",
                "Note for {person}: {body}", "Ping {person}: {body}", "Chat {person}: {body}",
                "Send {person}: {body}", "{person}, message: {body}"],
    "email": ["Email {email}: {title}", "Mail to {email}, subject: {title}"],
    "music": ["Play: {artist}", "Music: {artist}", "Song request: {artist}", "Queue up: {artist}"],
    "reminder": ["Remind me in {minutes} minutes: {body}", "Reminder, {minutes} minutes: {body}"],
    "timer": ["Timer: {minutes} minutes"],
    "web": ["Look up: {query}", "Web search: {query}"],
    "translation": ["Translate into {language}: {body}", "{language} please: {body}"],
    "event": ["Calendar, {date}: {title}", "Schedule on {date}: {title}"],
    "cart": ["Add to cart: {count} {item}", "Order: {count} {item}"],
    "lights": ["Lights, {room}: {level}", "Brightness in the {room}: {level}"],
}

#: The "composed" recipe's requests, by the domain's first keyword: (imperative cores, questions),
#: written with "(a|b)" alternatives and "[optional]" parts. An imperative core goes into one of
#: IMPERATIVE_FRAMES, so the same request comes in many sentence shapes and only the domain's
#: own words (rain, song, table, SMS...) tell which tool fits: the listed DOMAINS phrasings are
#: few enough per domain to be learnt whole, and a request phrased otherwise then went to the
#: wrong offered tool (123 of the shipped model's 209 held-out argument misses).
COMPOSED: dict[str, tuple[list[str], list[str]]] = {
    "weather": (["(check|look up|get|pull up|find out) the (weather|forecast|outlook|temperature) (in|for) {city}[ (today|tomorrow|tonight|this week|this weekend)]",
                 "see (if|whether) it (will be|is going to be|is) (rainy|sunny|windy|cold|warm|snowy|stormy|foggy) in {city}",
                 "find out how (hot|cold|warm|wet|windy) it (is|gets|will be) in {city}",
                 "tell me (if|whether) I need (an umbrella|a coat|sunscreen) in {city}"],
                ["(Is it|Will it be) (sunny|cold|hot|windy|cloudy|stormy|rainy|snowy|humid) in {city}[ (today|tomorrow|tonight|later)]?",
                 "What's the (temperature|weather|outlook) [like ](in|for) {city}[ (today|tomorrow|this weekend)]?",
                 "Any (rain|snow|storms|sun|wind) (in|for|over) {city}[ (today|tomorrow|this week)]?",
                 "How (cold|warm|hot|wet) (is it|will it be) in {city}?"]),
    "time": (["(tell me|check|look up|get) the [(local |current )]time in {city}",
              "find out what time it is in {city}"],
             ["What time is it [now ]in {city}?", "Is it (morning|night|evening|daytime) in {city}[ (now|right now)]?",
              "What's the [(local |current )]time in {city}?"]),
    "units": (["(convert|change|turn|translate) {amount} {unit_from} (into|to|in) {unit_to}",
               "(express|give|show) {amount} {unit_from} (in|as) {unit_to}",
               "work out how many {unit_to} (are in|make|equal) {amount} {unit_from}"],
              ["What (is|are) {amount} {unit_from} in {unit_to}?", "How many {unit_to} (make|are in|equal) {amount} {unit_from}?",
               "{amount} {unit_from} (is|are) how many {unit_to}?", "(Can|Could) {amount} {unit_from} be (shown|given) in {unit_to}?"]),
    "currency": (["(convert|change|exchange|swap) {amount} {cur_from} (into|to|for) {cur_to}",
                  "(tell me|find out|check) what {amount} {cur_from} (is|are) worth in {cur_to}"],
                 ["How much (is|are) {amount} {cur_from} in {cur_to}?", "What (is|are) {amount} {cur_from} worth in {cur_to}?",
                  "{amount} {cur_from} in {cur_to}?"]),
    "table": (["(book|reserve|get|find|grab) [(us |me )]a table (at|in) {venue} for {count}[ (people|guests|of us)]",
               "(make|place) a (booking|reservation) (at|with) {venue} for {count}[ (people|guests)]",
               "(book|reserve) (dinner|lunch|brunch) at {venue} for {count}"],
              ["(Can|Could) we (get|have) a table (at|in) {venue} for {count}?", "Is there a table for {count} at {venue}?",
               "Any [free ]tables at {venue} for {count}[ (people|guests)]?"]),
    "hotel": (["(book|reserve|find|get) [(me |us )](a hotel|a room|somewhere to stay|a place to sleep) in {city} for {nights} nights",
               "(arrange|sort out) {nights} nights (of lodging|at a hotel) in {city}"],
              ["(Can|Could) you (find|get) (me|us) a room in {city} for {nights} nights?",
               "Any hotels in {city} for {nights} nights?"]),
    "flights": (["(find|search|look for|check) (flights|a flight|plane tickets) from {origin} to {destination}",
                 "(book|get) [(me |us )]a (flight|plane ticket) (from|out of) {origin} to {destination}"],
                ["(Are there|Any) flights (from|out of) {origin} to {destination}?",
                 "How (can|do) I fly from {origin} to {destination}?"]),
    "directions": (["(give me|show me|find|plan) (directions|a route|the way) from {origin} to {destination}",
                    "(navigate|guide|take) (me|us) from {origin} to {destination}"],
                   ["How do (I|we) (get|drive|walk) from {origin} to {destination}?",
                    "What's the [(best |fastest )](way|route) from {origin} to {destination}?"]),
    "message": (["(send|write|shoot|fire off) (a message|a text|a note|an SMS|a DM) to {person} (saying|that says|reading|with) {body}",
                 "(message|text|ping|DM) {person} (that|saying|with) {body}",
                 "(let {person} know|tell {person}) [that ]{body} (by|via) (text|message|SMS)"],
                ["(Can|Could) you (text|message) {person} (saying|that) {body}?"]),
    "email": (["(send|write|compose|draft) (an email|a mail|an e-mail) to {email} (about|titled|with the subject) {title}",
               "(email|mail) {email} (about|regarding|on) {title}"],
              ["(Can|Could) you (email|mail) {email} about {title}?"]),
    "music": (["(play|put on|queue|start|stream) (some|a song by|a track by|music by|songs by|something from) {artist}",
               "(play|put on) {artist}[ (now|for me|next|again)]",
               "(queue up|line up|start) (a playlist|an album|a few tracks) (by|of|from) {artist}"],
              ["(Can|Could) you (play|put on) [some ]{artist}?", "(Got|Have you got) any (songs|music|tracks) by {artist}?"]),
    "reminder": (["(remind me|set a reminder|give me a reminder) to {body} in {minutes} minutes",
                  "(set|create|add) a reminder (for|in) {minutes} minutes (to|that says|saying) {body}"],
                 ["(Can|Could) you remind me (to|that) {body} in {minutes} minutes?"]),
    "timer": (["(set|start|run) a (timer|countdown) (for|of) {minutes} minutes",
               "(time|count down) {minutes} minutes"],
              ["(Can|Could) you (set|start) a {minutes} minute (timer|countdown)?"]),
    "web": (["(search|look up|google|find) [(the web for |online for |information on |info about )]{query}",
             "(do|run) a [(web |quick )]search (for|on) {query}"],
            ["What (can you find|does the web say) about {query}?"]),
    "translation": (["(translate|put|render) {body} (into|in) {language}",
                     "(tell me|show me) how to say {body} in {language}"],
                    ["How (do|would) you say {body} in {language}?", "What is {body} in {language}?"]),
    "event": (["(add|put|schedule|create) {title} (on|in) (my|the) calendar (for|on) {date}",
               "(schedule|plan|book) {title} (for|on) {date}",
               "(create|make|add) (an event|a meeting|an appointment) {title} (on|for) {date}"],
              ["(Can|Could) you (schedule|add) {title} (for|on) {date}?"]),
    "cart": (["(add|put) {count} {item} (in|into|to) (my|the) (cart|basket)",
              "(buy|order|purchase|get) {count} {item}[ (for me|online|now)]"],
             ["(Can|Could) you (order|buy) {count} {item}?"]),
    "lights": (["(set|turn|dim|bring) the {room} lights (to|down to|up to) {level}[ percent]",
                "(make|set) the {room} {level} percent (bright|brightness)"],
               ["(Can|Could) you (set|dim) the {room} lights to {level}?"]),
}
IMPERATIVE_FRAMES = ["{C}.", "{C}, please.", "Please {c}.", "Can you {c}?", "Could you {c}?", "Would you {c}?",
                     "I need you to {c}.", "I'd like you to {c}.", "I want you to {c}.", "Go ahead and {c}.",
                     "Help me {c}.", "Kindly {c}.", "{C} for me.", "Time to {c}.", "Let's {c}.", "Just {c}.",
                     "{C}"]


def signature(d: int) -> tuple[str, ...]:
    """A domain's argument types, sorted: ("integer", "string") for a table booking."""
    return tuple(sorted(ROLES[role][0] for role in DOMAINS[d][1]))


#: Per domain, the other domains whose tools take the same argument types (weather, clock, music
#: and web search each take one string): offered together, the values cannot tell which tool a
#: request is for, only its words and the tools' names can (the "look-alikes" recipe).
LOOK_ALIKES: list[list[int]] = [[o for o in range(len(DOMAINS)) if o != d and signature(o) == signature(d)]
                                for d in range(len(DOMAINS))]


def expand(r: Any, pattern: str) -> str:
    """One spelling of a COMPOSED pattern: each "[part]" kept half the time, each "(a|b)" one of
    its alternatives (alternatives do not nest)."""
    pattern = re.sub(r"\[([^\]]*)\]", lambda m: m.group(1) if r.random() < 0.5 else "", pattern)
    return re.sub(r"\(([^()]*)\)", lambda m: r.choice(m.group(1).split("|")), pattern)


def loose(template: str) -> list[str]:
    """A phrasing's words with slots blanked and punctuation and case dropped, to compare
    phrasings by their words: "Send an SMS to {person}, saying {body}." -> [send, an, sms, to, {}, saying, {}]."""
    return re.sub(r"[^\w{} ]", " ", re.sub(r"\{\w*\}", " {} ", template).lower()).split()


def contains(words: list[str], part: list[str]) -> bool:
    """Whether `part` occurs in `words` as a run of consecutive words."""
    return any(words[i:i + len(part)] == part for i in range(len(words) - len(part) + 1))


def composed(r: Any, keyword: str, forbidden: list[list[str]]) -> str:
    """A request template of the domain with first keyword `keyword`: an imperative core in a
    frame, or a question. Never one that holds a `forbidden` phrasing's words (the held-out
    set's, given by the generator) as a run."""
    cores, questions = COMPOSED[keyword]
    while True:
        if r.random() < 0.65:
            c = expand(r, r.choice(cores))
            t = r.choice(IMPERATIVE_FRAMES).replace("{C}", c[0].upper() + c[1:]).replace("{c}", c)
        else:
            t = expand(r, r.choice(questions))
        t = re.sub(r"\s+", " ", t).strip()
        t = t[0].upper() + t[1:] if not t.startswith("{") else t
        if not any(contains(loose(t), f) for f in forbidden):
            return t


VERBS = ["get", "check", "find", "lookup", "fetch", "show", "query", "read", "do", "run", "make", "set", "send",
         "book", "play", "convert", "start", "add", "create", "search", "plan", "request", "open", "call", "use"]
#: the held-out evaluation's tool names (training/heldout.py); names are never made equal to one
HELDOUT_NAMES = {"convert_units", "book_table", "check_forecast", "send_sms", "play_track"}


def value(lex: Lexicon, kind: str) -> Any:
    r = lex.r
    if kind == "place":
        return lex.place()
    if kind == "name":
        return lex.name() if r.random() < 0.8 else f"{lex.name()} {lex.name()}"
    if kind == "words":
        return " ".join(lex.token() if r.random() < 0.5 else lex.latin() for _ in range(r.randint(1, 5)))
    if kind == "word":
        return lex.latin() if r.random() < 0.7 else lex.name()
    if kind == "date":
        return r.choice([f"{r.randint(1, 28)} {r.choice(['May', 'June', 'July', 'March'])}",
                         f"2026-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}", r.choice(["Monday", "Friday", "tomorrow"])])
    if kind == "email":
        return f"{lex.latin().encode('ascii', 'ignore').decode() or 'x'}@{lex.latin().encode('ascii', 'ignore').decode() or 'y'}.com"
    if kind == "language":
        return r.choice(LANGUAGES)
    if kind == "unit":
        return r.choice(UNITS)
    if kind == "currency":
        return r.choice(CURRENCIES)
    if kind == "number":
        return r.randint(1, 9999) if r.random() < 0.8 else round(r.uniform(0.5, 999), r.choice([1, 2]))
    if kind == "count":
        return r.randint(1, 120)
    raise ValueError(kind)


def schema_tool(name: str, params: dict[str, str], description: str | None) -> dict:
    fn: dict[str, Any] = {"name": name}
    if description:
        fn["description"] = description
    fn["parameters"] = {"type": "object", "properties": {p: {"type": ROLES[role][0]} for p, role in params.items()},
                        "required": list(params)}
    return {"type": "function", "function": fn}


#: The "copy-values" recipe's openers and closers around a domain request, so that the request
#: is found inside other words, not only as a whole sentence; some end in a colon, so a colon
#: before a request that fits an offered tool is met as often as one before a text to copy.
OPENERS = ["Please,", "Hey,", "Hi,", "Hello!", "OK,", "Right,", "Quick one:", "One thing:", "Next:",
           "Could you help?", "Help me out:", "Hmm,", "Alright,", "So,", "Question:", "Task for you:"]
CLOSERS = ["Thanks!", "Thank you.", "Cheers.", "Please.", "Thanks a lot.", "No rush.", ":)", "Ta."]
#: value kinds a copy-values recipe may draw from the vocabulary instead of the lexicon
VOCAB_KINDS = {"place": 0.8, "name": 0.8, "word": 0.3, "words": 0.2}  # kind -> share capitalised


def wrap(r: Any, template: str, request: str) -> str:
    """The request with an opener before it and/or a closer after it (the first letter lowered
    after an opener unless it is a value or "I")."""
    if r.random() < 0.7:
        lower = not template.startswith("{") and not re.match(r"I\b|I'", request)
        request = r.choice(OPENERS) + " " + (request[0].lower() + request[1:] if lower else request)
        if r.random() < 0.3:
            request += " " + r.choice(CLOSERS)
    else:
        request += " " + r.choice(CLOSERS)
    return request


class ToolTasks:
    def __init__(self, lex: Lexicon, vocab_value: Callable[[str], str] | None = None, vocab_values: float = 0.0,
                 wrappers: float = 0.0, named: float = 0.0, composed: float = 0.0,
                 forbidden: list[list[str]] | None = None, look_alikes: float = 0.0):
        self.lex = lex
        self.r = lex.r
        self.vocab_value = vocab_value  # kind -> a value drawn from the model's vocabulary
        self.vocab_values = vocab_values  # share of VOCAB_KINDS values drawn so
        self.wrappers = wrappers  # share of requests wrapped in an opener or closer
        self.named = named  # share of targets renamed after a keyword their request uses
        self.composed = composed  # share of domain requests composed (COMPOSED) instead of listed
        self.forbidden = forbidden or []  # phrasings (as `loose` words) a composed request never holds
        self.look_alikes = look_alikes  # share of tasks whose other offered tools take the same argument types
        self.others: list[tuple[int, dict, dict[str, str]]] = []  # the last task's other offered tools

    def tool(self, domain: int | None = None) -> tuple[int, dict, dict[str, str]]:
        """(domain index, an OpenAI tool, {parameter name: role})."""
        r = self.r
        d = r.randrange(len(DOMAINS)) if domain is None else domain
        keywords, roles, phrasings = DOMAINS[d]
        name = self.name(keywords)
        params: dict[str, str] = {}
        for role, pnames in roles.items():
            choices = [p for p in pnames if p not in params]
            params[r.choice(choices)] = role
        if len(roles) == 1 and r.random() < 0.25:  # one argument: any name will do, copy it from the schema
            params = {self.lex.ident().lower().strip("_-") or "arg": next(iter(roles))}
        desc = name.replace("_", " ").capitalize() + "." if r.random() < 0.4 else None
        return d, schema_tool(name, params, desc), params

    def value(self, kind: str) -> Any:
        if self.vocab_values and self.vocab_value and kind in VOCAB_KINDS and self.r.random() < self.vocab_values:
            return self.vocab_value(kind)
        return value(self.lex, kind)

    def name(self, keywords: list[str]) -> str:
        """A tool name: mostly a verb and one of the domain's keywords in some spelling, sometimes
        a made-up word, so the name has to be copied from the offered list, not remembered."""
        r = self.r
        while True:
            k, v = r.choice(keywords), r.choice(VERBS)
            x = r.random()
            if x < 0.45:
                n = f"{v}_{k}"
            elif x < 0.6:
                n = k
            elif x < 0.7:
                n = f"{k}_{v}"
            elif x < 0.8:
                n = f"{v}{k.title().replace('_', '')}"
            elif x < 0.9:
                n = f"{v}_{k}_{self.lex.latin().encode('ascii', 'ignore').decode() or 'x'}"
            else:
                n = f"{self.lex.latin()}_{k}".encode("ascii", "ignore").decode()
            if n not in HELDOUT_NAMES and n[:1].isalpha():
                return n

    def renamed(self, target: dict, d: int, template: str, used: set[str]) -> dict:
        """The target named after one of its domain's keywords that its phrasing uses (the
        "named-overlap" recipe), so that a word shared by the request and one offered name is a
        reason to pick that tool; unchanged when the phrasing uses none. Slots are left out: a
        keyword inside a copied value says nothing about the tool."""
        words = set(re.findall(r"[a-z]+", re.sub(r"\{\w+\}", " ", template).lower()))
        hits = [k for k in DOMAINS[d][0] if k in words]
        if not hits:
            return target
        fn = target["function"]
        for _ in range(8):
            name = self.name([self.r.choice(hits)])
            if name not in used:
                renamed = {"name": name} | ({"description": name.replace("_", " ").capitalize() + "."}
                                            if "description" in fn else {})
                return {"type": "function", "function": renamed | {"parameters": fn["parameters"]}}
        return target

    def task(self, colons: float = 0.0) -> tuple[list[dict], dict, str, dict[str, Any]]:
        """(offered tools, the tool to call, the user's request, the arguments it implies); with
        `colons`, that share of requests is one of the domain's COLON_PHRASINGS. The other offered
        tools are left in `self.others` as (domain, tool, {parameter: role}), for requests to them
        (the "selections" recipe)."""
        r = self.r
        d, target, params = self.tool()
        old = target["function"]["name"]
        self.others = []
        used = {old}
        near: list[int] = []
        if self.look_alikes and r.random() < self.look_alikes:  # (no draw when off: the older recipes keep their bytes)
            near = LOOK_ALIKES[d]
        for _ in range(r.choice([0, 1, 1, 2, 2, 3])):
            if near:  # look-alikes of distinct domains, so that one offered tool fits the request
                left = [o for o in near if o not in {od for od, _, _ in self.others}]
                if not left:
                    break
                od = r.choice(left)
            else:
                od = r.choice([i for i in range(len(DOMAINS)) if i != d])
            _, t, oparams = self.tool(od)
            if t["function"]["name"] not in used:
                used.add(t["function"]["name"])
                self.others.append((od, t, oparams))
        offered = [target] + [t for _, t, _ in self.others]
        r.shuffle(offered)
        template, request, args = self.request(d, params, colons)
        if self.named and r.random() < self.named:
            target = self.renamed(target, d, template, used)
            offered = [target if t["function"]["name"] == old else t for t in offered]
        return offered, target, request, args

    def request(self, d: int, params: dict[str, str], colons: float = 0.0) -> tuple[str, str, dict[str, Any]]:
        """(phrasing, the user's request, the arguments it implies) for a tool of domain `d`
        whose parameters name `params`' roles."""
        r = self.r
        by_role = {role: self.value(ROLES[role][1]) for role in dict.fromkeys(params.values())}  # ordered: reproducible
        phrasings = DOMAINS[d][2]
        if colons and r.random() < colons:  # (no draw when off: the older recipes keep their bytes)
            phrasings = COLON_PHRASINGS[DOMAINS[d][0][0]]
        if self.composed and r.random() < self.composed:  # (no draw when off: the older recipes keep their bytes)
            template = composed(r, DOMAINS[d][0][0], self.forbidden)
        else:
            template = r.choice(phrasings)
        request = template.format(**by_role)
        if self.wrappers and r.random() < self.wrappers:
            request = wrap(r, template, request)
        return template, request, {p: by_role[role] for p, role in params.items()}
