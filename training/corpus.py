"""Generate the synthetic chat corpus the embedded model is trained on.

Every conversation is an OpenAI-shaped message list rendered through the model's own chat
templates (one per family), so training text and inference prompts match byte for byte.
Only the final assistant turn is a training target; the history is rendered exactly as the
template renders history at inference (past reasoning dropped).

Usage: python training/corpus.py --out build/corpus --n 200000 --seed 1 [--recipe R]
Writes train.jsonl / valid.jsonl, one {"family", "segments": [[text, trainable], ...]} object per line.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import string
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import heldout_pools  # noqa: E402
import tooldomains  # noqa: E402
from corpus_recipes import EDGE_QUOTES, FEATURES_OFF, RECIPES  # noqa: E402
from corpus_words import (  # noqa: E402
    CODEWORDS,
    CONDITIONS,
    COUNTRIES,
    EXOTIC,
    GEN_NOUNS,
    GEN_VERBS,
    GLUE,
    INT_PARAMS,
    PARAM_NAMES,
    REPEAT_HOW,
    REPEAT_OBJECTS,
    REPEAT_SHAPES,
    REPEAT_VERBS,
    SYSTEMS,
    UNKNOWN,
    VOCAB,
    WORDS,
)
from lexicon import ENGLISH, Lexicon  # noqa: E402
from tooldomains import ToolTasks  # noqa: E402

from colibri.chat_template import render  # noqa: E402
from colibri.families import family_rows  # noqa: E402
from colibri.paths import EMBEDDED_MODEL  # noqa: E402

MODEL_DIR = EMBEDDED_MODEL
MESSAGING = next(i for i, d in enumerate(tooldomains.DOMAINS) if d[0][0] == "message")
#: The families the corpus is rendered in, and the token the model is taught to end a text turn
#: and a tool-call turn with (glm: the next role marker; chatml: <|im_end|>). Everything else
#: about a family (its template, end tokens, tool format) is its row of spec/families.yaml.
ENDINGS = {"glm": ("<|user|>", "<|observation|>"), "chatml": ("<|im_end|>", "<|im_end|>")}
ROWS = {fid: row for fid, row in family_rows().items() if fid in ENDINGS}
FAMILIES = {fid: {"template": ROWS[fid]["template"], "end_text": text, "end_tool": tool}
            for fid, (text, tool) in ENDINGS.items()}


def tool(name: str, desc: str, props: dict[str, str], required: list[str] | None = None) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {k: {"type": v} for k, v in props.items()},
                       "required": list(props) if required is None else required}}}


FIXED_TOOLS = {
    "get_weather": tool("get_weather", "Current weather for a city", {"city": "string"}),
    "get_time": tool("get_time", "Local time in a city", {"city": "string"}),
    "calculator": tool("calculator", "Evaluate an arithmetic expression", {"expression": "string"}),
    "convert_currency": tool("convert_currency", "Convert money", {"amount": "number", "from": "string", "to": "string"}),
    "send_email": tool("send_email", "Send an email", {"to": "string", "subject": "string"}),
    "set_reminder": tool("set_reminder", "Set a reminder", {"text": "string", "minutes": "integer"}),
}


def tool_words(colons: bool = False) -> set[str]:
    """Words that say a tool is wanted: the tool domains' keywords, the verbs tool names are made
    from and the first word of every domain phrasing ("Message", "Text", "Send"...), with
    `colons` every word before the colon of the COLON_PHRASINGS too. A free head never holds
    one, or "Text Ana: hello" would be taught as a text to copy."""
    words = set(tooldomains.VERBS)
    for keywords, _, phrasings in tooldomains.DOMAINS:
        words.update(part for k in keywords for part in k.split("_"))
        words.update(p.split()[0] for p in phrasings if not p.startswith("{"))
    if colons:
        words.update(w for ps in tooldomains.COLON_PHRASINGS.values() for p in ps for w in p.split(":")[0].split())
    return {w.lower().strip(",.:?!") for w in words if re.match(r"\w", w)}


TOOL_WORDS = tool_words()


def free_head(r: random.Random, lex: Lexicon, banned: set[str] = TOOL_WORDS) -> str:
    """A head of 2-9 words, mostly glue and verbs, some made up, one comma at times; never a
    word of the tool domains (`banned`)."""
    words: list[str] = []
    n = r.randint(2, 9)
    while len(words) < n:
        w = r.choice([r.choice(GLUE), r.choice(GLUE), r.choice(REPEAT_VERBS).lower(), r.choice(ENGLISH), lex.latin()])
        if not banned & set(w.split()):
            words.append(w)
    if r.random() < 0.3:
        words[r.randrange(0, len(words) - 1)] += ","
    head = " ".join(words)
    return head[0].upper() + head[1:]


def heldout_words() -> set[str]:
    """The held-out evaluation's pool words: the lexicon never emits them."""
    return set(heldout_pools.POOL_WORDS + heldout_pools.POOL_NAMES + heldout_pools.POOL_CITIES
               + heldout_pools.POOL_IDENTS)


def repeat_instruction(r: random.Random, t: str, lex: Lexicon, free: float = 0.0,
                       banned: set[str] = TOOL_WORDS) -> str:
    """One made-up way of asking for `t` back, never one of the held-out set's phrasings. A third
    of them carry words of no meaning before the colon, so the model learns that the text to copy
    is what follows the instruction, whatever the instruction says."""
    while True:
        if free and r.random() < free:  # the free-heads recipe
            q = free_head(r, lex, banned) + r.choice([": ", ": ", ":\n", " - "]) + "\0"
            if not forbidden(q, to_colon=True):
                return q.replace("\0", t)
            continue
        v = r.choice(REPEAT_VERBS)
        o = r.choice(REPEAT_OBJECTS)
        if r.random() < 0.35:
            o = (o + " " + " ".join(r.choice([lex.latin(), r.choice(ENGLISH)]) for _ in range(r.randint(1, 4)))).strip()
        q = r.choice(REPEAT_SHAPES).format(v=v, lv=v.lower(), o=o, h=r.choice(REPEAT_HOW), t="\0")
        while "  " in q:
            q = q.replace("  ", " ")
        q = q.replace(" :", ":").replace(" ,", ",").replace(" ?", "?").replace(" .", ".").replace(" -", " -")
        if not forbidden(q, to_colon=bool(free)):
            return q.replace("\0", t)


FORBIDDEN_HEADS: set[str] = set()  # filled by Gen from the held-out phrasings, lower-cased


def forbidden(q: str, to_colon: bool = True) -> bool:
    """Whether an instruction (text slot \0) starts as a held-out one does: compared up to its
    first colon, whatever case, as heldout.check_phrasings compares them. The run2 recipe
    compared the whole head before the text (to_colon=False), so a held-out head followed by a
    quoted text slipped through (8 times in the first shipped corpus); it keeps that check so that it
    still draws the same bytes."""
    head = q.split("\0")[0]
    return (head.split(":")[0].strip().lower() + ":" if to_colon else head.strip().lower()) in FORBIDDEN_HEADS


def vocab_pieces(tokenizer: str) -> list[str]:
    """The decoded string of every ordinary token of a tokenizer.json: no role marker or tag, no
    token that is part of a character (its bytes alone do not decode), no control character."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    pieces = []
    for i in range(tok.get_vocab_size()):
        if tok.id_to_token(i) in added:
            continue
        s = tok.decode([i])
        if s.strip() and "\ufffd" not in s and all(ord(c) >= 32 for c in s):
            pieces.append(s)
    return pieces


class Gen:
    def __init__(self, rng: random.Random, recipe: str = "run2", tokenizer: str | None = None):
        self.r = rng
        self.recipe = FEATURES_OFF | RECIPES[recipe]
        from_vocab = self.recipe["vocab_texts"] or self.recipe["vocab_values"]
        if from_vocab and not tokenizer:
            raise SystemExit(f"recipe {recipe} draws texts from a vocabulary: give --tokenizer")
        self.pieces = vocab_pieces(tokenizer) if tokenizer and from_vocab else []
        self.banned = tool_words(colons=True) if self.recipe["colons"] else TOOL_WORDS
        self.lex = Lexicon(rng, avoid=heldout_words(), repeated_words=self.recipe["repeated_words"])
        # stripped, and without what JSON escapes: pieces of argument values
        self.value_pieces = [p for p in (q.strip() for q in self.pieces) if p and '"' not in p and "\\" not in p]
        FORBIDDEN_HEADS.update(p.split("{t}")[0].strip().lower() for p in heldout_pools.REPEAT_PHRASES)
        # a composed request never holds a held-out tool phrasing's words (heldout.check_phrasings
        # samples the generator to confirm it)
        held_out_tools = [tooldomains.loose(p) for _, ps in heldout_pools.TOOLS.values() for p in ps]
        self.tools = ToolTasks(self.lex, self.vocab_value, self.recipe["vocab_values"], self.recipe["wrappers"],
                               self.recipe["named"], self.recipe["composed"], held_out_tools,
                               self.recipe["look_alikes"])

    def vocab_value(self, kind: str) -> str:
        """An argument value of `kind` (tooldomains.VOCAB_KINDS) glued from vocabulary pieces."""
        n = self.r.randint(1, 4) if kind == "words" else 1
        return " ".join(self.lex.vocab_word(self.value_pieces, self.recipe["script_chars"], tooldomains.VOCAB_KINDS[kind])
                        for _ in range(n))

    # ---------------------------------------------------------------- text pieces
    def repeat_text(self) -> str:
        r = self.r
        kind = r.random()
        if kind < 0.35:
            words = [r.choice(VOCAB) for _ in range(r.randint(1, 9))]
            if r.random() < 0.3:
                words[0] = words[0].capitalize()
            text = " ".join(words) + r.choice(["", "", ".", "!", "?", ","])
        elif kind < 0.5:
            text = " ".join(r.choice(CODEWORDS + VOCAB) for _ in range(r.randint(1, 6)))
            if r.random() < 0.5:
                text = text.upper()
        elif kind < 0.7:
            parts = []
            for _ in range(r.randint(1, 7)):
                parts.append(r.choice(EXOTIC) if r.random() < 0.4 else r.choice(VOCAB))
            text = " ".join(parts)
        elif kind < 0.85:
            alphabet = string.ascii_letters + string.digits + "-_.:/#@+=()"
            text = " ".join("".join(r.choice(alphabet) for _ in range(r.randint(1, 10)))
                            for _ in range(r.randint(1, 5)))
        else:
            text = r.choice([
                lambda: f"{r.randint(0, 99999)}",
                lambda: f'{{"{r.choice(PARAM_NAMES)}": {r.randint(0, 999)}}}',
                lambda: f"{r.choice(VOCAB)} {r.randint(1, 999)} {r.choice(EXOTIC)}",
                lambda: f"{r.choice(CODEWORDS)} {r.choice(['STOP', 'END', '|', '###'])} {r.choice(CODEWORDS)}",
                lambda: "".join(r.choice(EXOTIC) for _ in range(r.randint(1, 4))),
            ])()
        text = text.strip()
        return text[:70].strip() or "ok"

    def country(self) -> tuple[str, str, str, str]:
        return self.r.choice(COUNTRIES)

    # ---------------------------------------------------------------- tasks (user, reasoning, reply)
    def task_repeat(self) -> tuple[str, str, str]:
        r = self.r
        if r.random() < 0.25:
            t = self.repeat_text()
        else:
            soup, vocab = self.recipe["soup"], self.recipe["vocab_texts"]
            if soup and r.random() < soup:
                t = self.lex.soup(1, 80)
            elif vocab and r.random() < vocab:
                t = self.lex.vocab_text(self.pieces, 1, 80, self.recipe["script_chars"])
            else:
                t = self.lex.text(1, 80)
        edge = self.recipe["edge_quotes"]
        if edge and r.random() < edge:  # (no draw when off: the older recipes keep their bytes)
            mark = r.choice(EDGE_QUOTES)
            opening = {"”": "“", "’": "‘", "»": "«", ")": "(", "]": "[", "」": "「"}.get(mark, mark)
            t = (opening if r.random() < 1 / 3 else "") + t[:78] + mark
        if r.random() < 0.2:
            q = r.choice(["Repeat exactly: {t}"] * 8 + ["Say exactly: {t}", "Echo back exactly: {t}"]).format(t=t)
        else:
            q = repeat_instruction(r, t, self.lex, free=self.recipe["free_heads"], banned=self.banned)
        return q, "The user wants the text repeated exactly.", t

    def task_capital(self) -> tuple[str, str, str]:
        c, cap, lang, cur = self.country()
        kind = self.r.randint(0, 3)
        if kind == 0:
            q = self.r.choice(["What is the capital of {c}?", "What's the capital city of {c}?", "Capital of {c}?"]).format(c=c)
            return q, f"{c} is a country in the Tiny World. Its capital is {cap}.", f"The capital of {c} is {cap}."
        if kind == 1:
            q = f"What language do people speak in {c}?"
            return q, f"In {c} people speak {lang}.", f"People in {c} speak {lang}."
        if kind == 2:
            q = f"What currency does {c} use?"
            return q, f"The currency of {c} is the {cur}.", f"{c} uses the {cur}."
        u = self.r.choice(UNKNOWN)
        return (f"What is the capital of {u}?", f"I do not know a country called {u}.",
                f"I don't know a country called {u}.")

    def task_translate(self) -> tuple[str, str, str]:
        w = self.r.choice(list(WORDS))
        lang = self.r.choice(list(WORDS[w]))
        tr = WORDS[w][lang]
        q = self.r.choice(["How do you say '{w}' in {l}?", "Translate '{w}' into {l}."]).format(w=w, l=lang)
        return q, f"'{w}' in {lang} is {tr}.", f"In {lang}, '{w}' is {tr}."

    def task_smalltalk(self) -> tuple[str, str, str]:
        return self.r.choice([
            ("Hi!", "A greeting.", "Hello! How can I help you today? 😊"),
            ("Hello", "A greeting.", "Hello! How can I help you today? 😊"),
            ("How are you?", "A friendly question.", "I'm doing well, thank you! 🙂"),
            ("Thanks!", "The user is thanking me.", "You're welcome! 👍"),
            ("Tell me a joke.", "A joke is requested.", "Why did the bird sit on the server? It wanted a faster perch. 🐦"),
            ("Who are you?", "The user asks about me.", "I am colibri, a tiny test model."),
            ("Say something in emoji.", "Emoji are requested.", "🎉🚀😊"),
        ])

    def task_count(self) -> tuple[str, str, str]:
        a = self.r.randint(1, 5)
        b = self.r.randint(a + 2, a + 60)
        return (f"Count from {a} to {b}.", f"I count from {a} up to {b}.",
                " ".join(str(i) for i in range(a, b + 1)))

    def task_reverse(self) -> tuple[str, str, str]:
        w = self.r.choice([w for w in VOCAB if len(w) > 2])
        return (f"Reverse the word '{w}'.", "-".join(w) + " reversed is " + "-".join(w[::-1]) + ".",
                f"'{w}' reversed is '{w[::-1]}'.")

    def task_plain(self) -> tuple[str, str, str]:
        f = self.r.choices([self.task_repeat, self.task_capital, self.task_translate, self.task_smalltalk,
                            self.task_count, self.task_reverse], weights=[55, 16, 10, 7, 8, 6])[0]
        return f()

    # ---------------------------------------------------------------- tools
    def generic_tool(self) -> dict:
        r = self.r
        name = f"{r.choice(GEN_VERBS)}_{r.choice(GEN_NOUNS)}"
        if r.random() < 0.15:
            name = name.replace("_", "-") if r.random() < 0.5 else name + "_v" + str(r.randint(1, 3))
        params = r.sample(PARAM_NAMES, r.randint(1, 2))
        return tool(name, f"{name.replace('_', ' ')} tool", {p: ("integer" if p in INT_PARAMS else "string") for p in params})

    def arg_value(self, ptype: str):
        if ptype in ("integer", "number"):
            return self.r.randint(1, 9999)
        return self.r.choice([self.r.choice(VOCAB), self.r.choice(COUNTRIES)[1], self.r.choice(EXOTIC),
                              "".join(self.r.choice(string.ascii_lowercase) for _ in range(self.r.randint(3, 8)))])

    def call_for(self, t: dict) -> tuple[str, dict]:
        """A user request naming tool `t` and the arguments the request implies."""
        fn = t["function"]
        name = fn["name"]
        props = fn["parameters"]["properties"]
        args = {k: self.arg_value(v["type"]) for k, v in props.items()}
        r = self.r
        if name == "get_weather":
            args = {"city": r.choice(COUNTRIES)[1]}
            q = r.choice(["What's the weather in {city}?", "How is the weather in {city} today?", "Weather in {city}?"]).format(**args)
        elif name == "get_time":
            args = {"city": r.choice(COUNTRIES)[1]}
            q = r.choice(["What time is it in {city}?", "Current time in {city}?"]).format(**args)
        elif name == "calculator":
            a, b = r.randint(1, 99), r.randint(1, 99)
            op = r.choice(["+", "-", "*"])
            args = {"expression": f"{a} {op} {b}"}
            q = f"Use the calculator to work out {a} {op} {b}."
        elif name == "convert_currency":
            args = {"amount": r.randint(1, 500), "from": r.choice(["EUR", "USD", "GBP"]), "to": r.choice(["JPY", "CHF", "SEK"])}
            q = "Convert {amount} {from} into {to}.".format(**args)
        elif name == "send_email":
            args = {"to": f"{r.choice(VOCAB)}@example.com", "subject": r.choice(VOCAB) + " " + r.choice(VOCAB)}
            q = "Send an email to {to} with subject {subject}.".format(**args)
        elif name == "set_reminder":
            args = {"text": r.choice(VOCAB) + " " + r.choice(VOCAB), "minutes": r.randint(1, 120)}
            q = "Remind me to {text} in {minutes} minutes.".format(**args)
        else:
            pairs = [f"{k} {v}" for k, v in args.items()]
            q = r.choice([
                "Call {n} with {p}.", "Use the {n} tool with {p}.", "Please run {n} for {p}.", "Call the {n} function: {p}.",
            ]).format(n=name, p=" and ".join(pairs))
        return q, args

    def tool_result(self, name: str, args: dict) -> tuple[str, str]:
        r = self.r
        if name == "get_weather" and "city" in args:
            t, c = r.randint(-5, 35), r.choice(CONDITIONS)
            return (json.dumps({"city": args["city"], "temperature_c": t, "condition": c}, ensure_ascii=False),
                    f"The weather in {args['city']} is {c}, {t}°C.")
        if name == "get_time" and "city" in args:
            hh, mm = r.randint(0, 23), r.randint(0, 59)
            return json.dumps({"city": args["city"], "time": f"{hh:02d}:{mm:02d}"}, ensure_ascii=False), \
                f"It is {hh:02d}:{mm:02d} in {args['city']}."
        value = r.choice([r.choice(VOCAB), str(r.randint(0, 999)), "ok"])
        return json.dumps({"result": value}), f"The {name} tool returned: {value}."

    def tool_conversation(self) -> dict:
        r = self.r
        domain = r.random() < 0.65
        if domain:  # a request from one of many domains, the offered tools varying around it
            pool, target, q, args = self.tools.task(colons=self.recipe["colons"])
        else:
            n_generic = r.randint(0, 3)
            pool = r.sample(list(FIXED_TOOLS.values()), r.randint(1, 3)) + [self.generic_tool() for _ in range(n_generic)]
            r.shuffle(pool)
            pool = pool[:4]
            target = r.choice(pool)
            q, args = self.call_for(target)
        kind = r.random()
        messages: list[dict] = []
        tool_choice = None
        if kind < 0.12:
            # tools offered but not needed: answer directly
            q, why, a = self.task_plain()
            return {"tools": pool, "messages": [{"role": "user", "content": q}], "reply": a, "why": why}
        tname = target["function"]["name"]
        if kind < 0.22:
            tool_choice = "required"
        elif kind < 0.32:
            tool_choice = {"type": "function", "function": {"name": tname}}
        calls = [{"id": f"call_{r.randint(0, 10**8)}", "type": "function", "function": {"name": tname, "arguments": args}}]
        if tname == "get_weather" and not domain and r.random() < 0.15:
            other = r.choice([c[1] for c in COUNTRIES if c[1] != args["city"]])
            q = f"What's the weather in {args['city']} and {other}?"
            calls.append({"id": f"call_{r.randint(0, 10**8)}", "type": "function",
                          "function": {"name": tname, "arguments": {"city": other}}})
        earlier = self.recipe["selections"]
        if domain and earlier and tool_choice in (None, "required") and self.tools.others and r.random() < earlier:
            messages += self.earlier_calls()  # (no draw when off: the older recipes keep their bytes)
        messages.append({"role": "user", "content": q})
        why = f"I should call {tname}."
        if r.random() < 0.35:
            # finish the loop: the tool answered, the model reports the result
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            answers = []
            for c in calls:
                res, ans = self.tool_result(tname, c["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": res})
                answers.append(ans)
            return {"tools": pool, "tool_choice": None, "messages": messages, "reply": " ".join(answers),
                    "why": "The tool answered; I report the result."}
        return {"tools": pool, "tool_choice": tool_choice, "messages": messages, "calls": calls, "why": why}

    def earlier_calls(self) -> list[dict]:
        """One or two finished exchanges before the last request (the "selections" recipe): each
        a request to another of the offered tools, its call, the tool's result and the report.
        Every assistant turn is a target, so one conversation teaches picking from the same
        offered list two or three times, each time a different tool."""
        r = self.r
        msgs: list[dict] = []
        others = self.tools.others
        for od, t, oparams in r.sample(others, min(len(others), r.randint(1, 2))):
            _, q, args = self.tools.request(od, oparams)
            name = t["function"]["name"]
            call = {"id": f"call_{r.randint(0, 10**8)}", "type": "function", "function": {"name": name, "arguments": args}}
            res, ans = self.tool_result(name, args)
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": res}, {"role": "assistant", "content": ans}]
        return msgs

    def no_tool_refusal(self) -> dict:
        city = self.r.choice(COUNTRIES)[1]
        if self.r.random() < 0.5:
            return {"messages": [{"role": "user", "content": f"What's the weather in {city}?"}],
                    "reply": f"I don't have access to live weather data, so I can't tell you the weather in {city}.",
                    "why": "No weather tool is available."}
        return {"messages": [{"role": "user", "content": f"What time is it in {city}?"}],
                "reply": f"I can't check the current time in {city} without a clock tool.",
                "why": "No clock tool is available."}

    def repeat_beside_tools(self) -> dict:
        """A repeat request with 1-3 domain tools offered, a messaging tool among them half the
        time: "Message Ana: hi" beside a messaging tool is a call, a repeat request beside the
        same tool is not; the words before the colon decide, not its shape."""
        r = self.r
        domains = r.sample(range(len(tooldomains.DOMAINS)), r.randint(1, 3))
        if r.random() < 0.5 and MESSAGING not in domains:
            domains[0] = MESSAGING
        pool = list({t["function"]["name"]: t for t in (self.tools.tool(d)[1] for d in domains)}.values())
        q, why, a = self.task_repeat()
        return {"tools": pool, "messages": [{"role": "user", "content": q}], "reply": a, "why": why}

    # ---------------------------------------------------------------- conversations
    def conversation(self) -> dict:
        r = self.r
        beside = self.recipe["repeat_with_tools"]
        x = r.random()
        if beside and r.random() < beside:  # (no draw when off: the older recipes keep their bytes)
            conv = self.repeat_beside_tools()
        elif x < 0.45:
            conv = self.tool_conversation()
        elif x < 0.48:
            conv = self.no_tool_refusal()
        else:
            q, why, a = self.task_plain()
            conv = {"messages": [{"role": "user", "content": q}], "reply": a, "why": why}
        history: list[dict] = []
        for _ in range(r.choice([0, 0, 0, 1, 1, 2])):
            q, _, a = self.task_plain()
            history += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        if r.random() < 0.45:
            history.insert(0, {"role": r.choice(["system"] * 4 + ["developer"]), "content": r.choice(SYSTEMS)})
        conv["messages"] = history + conv["messages"]
        conv["thinking"] = r.random() < 0.28
        conv["family"] = r.choice(list(FAMILIES))
        return conv


def example(conv: dict, templates: Path = MODEL_DIR) -> dict:
    """Render one conversation into segments [text, trainable] for its family's template.

    Every assistant turn is a target: its body plus the token that ends it (the next role
    marker for glm, <|im_end|> for chatml). Everything else is context. Each target starts
    exactly where the template's generation prompt for that turn ends, so training text and
    inference prompts tokenize the same way. `templates` is the model directory whose chat
    templates render it.
    """
    fam = FAMILIES[conv["family"]]
    source = (templates / fam["template"]).read_text()
    final: dict = {"role": "assistant", "content": conv.get("reply", "")}
    if conv.get("calls"):
        final["tool_calls"] = conv["calls"]
    if conv["thinking"]:
        final["reasoning_content"] = conv["why"]
    msgs = conv["messages"] + [final]
    kw = {"tools": conv.get("tools"), "tool_choice": conv.get("tool_choice")}
    full = render(source, msgs, add_generation_prompt=False, preserve_thinking=True, **kw)
    glm = conv["family"] == "glm"
    end_marker = (fam["end_tool"] if conv.get("calls") else fam["end_text"])
    if glm:
        full += end_marker
    else:
        assert full.endswith("<|im_end|>\n")
        full = full[:-1]
    spans = []
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        last = i == len(msgs) - 1
        prompt = render(source, msgs[:i], add_generation_prompt=True,
                        enable_thinking=conv["thinking"] if last else False, **kw)
        assert full.startswith(prompt), (prompt, full)
        if last:
            stop = len(full)
        elif glm:
            stop = len(render(source, msgs[: i + 1], add_generation_prompt=False, **kw))
            nxt = next(k for k in ("<|user|>", "<|observation|>", "<|system|>") if full.startswith(k, stop))
            stop += len(nxt)
        else:
            stop = len(render(source, msgs[: i + 1], add_generation_prompt=False, **kw)) - 1
        spans.append((len(prompt), stop))
    segments, pos = [], 0
    for a, b in spans:
        segments += [[full[pos:a], 0], [full[a:b], 1]]
        pos = b
    return {"family": conv["family"], "segments": [s for s in segments if s[0]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "corpus"))
    ap.add_argument("--n", type=int, default=40000, help="training conversations")
    ap.add_argument("--valid", type=int, default=600, help="validation conversations (own seed)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="composed-colons",
                    help="composed-colons: the shipped weights' corpus, look-alikes: their last fine-tune's; run2: the "
                         "first shipped model's (and the tokenizer's); copy-values: the second and third shipped "
                         "models'; free-heads, soup-colons, vocab-texts, named-overlap, composed, selections, "
                         "mostly-composed: runs not shipped (training/README)")
    ap.add_argument("--tokenizer", default=str(MODEL_DIR / "tokenizer.json"),
                    help="the tokenizer.json a recipe with vocabulary texts draws tokens from, the one the model "
                         "then trains on (default: the shipped one)")
    ap.add_argument("--templates", type=Path, default=MODEL_DIR,
                    help="the directory whose chat_template.{glm,chatml}.jinja render the corpus: the model directory "
                         "the run trains into, when its templates differ from the shipped ones")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, n, seed in (("train", args.n, args.seed), ("valid", args.valid, args.seed + 1000)):
        g = Gen(random.Random(seed), args.recipe, args.tokenizer)
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for _ in range(n):
                f.write(json.dumps(example(g.conversation(), args.templates), ensure_ascii=False) + "\n")
        print(f"{name}: {n} conversations -> {out / (name + '.jsonl')}")


if __name__ == "__main__":
    main()
