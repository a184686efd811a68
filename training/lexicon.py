"""Broad text pieces for the training corpus: invented words in several scripts, names, numbers,
code identifiers, punctuation and mixed case, so that a task built on them teaches the skill
(copy what is there) rather than a list of samples the model could memorise.

Nothing here draws from a fixed word list the evaluation uses: words are made up syllable by
syllable or character by character, and any made-up word that happens to be one of the
held-out pools' words (training/heldout.py) is thrown away and drawn again.
"""
from __future__ import annotations

import random
import string
from collections.abc import Callable

# Latin: plain and accented letters of many European languages, weighted towards plain ones.
CONSONANTS = "bcdfghjklmnprstvwzbcdfgklmnprst"
RARE_CONSONANTS = "ñçłśźżćńşčšžřđğ"
VOWELS = "aeiouaeiouy"
RARE_VOWELS = "áéíóúàèìòùäöüëïâêîôûåøæœőűąęıã"
ONSETS = ["br", "cr", "dr", "fr", "gr", "pr", "tr", "bl", "cl", "fl", "gl", "pl", "sl", "st", "sp", "sk",
          "sch", "th", "sh", "ch", "kw", "dz", "sz", "cz", "ts", "kh", "zh", "ph", "gn", "tl"]
CODAS = ["n", "r", "s", "t", "l", "m", "k", "nd", "nt", "st", "rk", "ck", "ng", "sk", "ß", "tz", "x", "ll"]

# Other scripts: (first code point, last code point) ranges of letters.
SCRIPTS = {
    "cyrillic": [(0x0430, 0x044F)],
    "greek": [(0x03B1, 0x03C9), (0x03AC, 0x03AF)],
    "cjk": [(0x4E00, 0x9FA5)],
    "hangul": [(0xAC00, 0xD7A3)],
    "kana": [(0x3041, 0x3093), (0x30A1, 0x30F3)],
    "arabic": [(0x0627, 0x064A)],
    "hebrew": [(0x05D0, 0x05EA)],
    "devanagari": [(0x0915, 0x0939)],
    "thai": [(0x0E01, 0x0E2E)],
}
EMOJI = ["😊", "🚀", "🎉", "👍", "🙂", "🐦", "🌍", "🔥", "✨", "🍕", "⚽", "🎵", "📦", "✓", "★", "→", "…", "—", "€", "°"]
PUNCT = [",", ".", "!", "?", ";", ":", "-", "(", ")", "'", '"', "/", "&", "%", "#", "*", "+", "=", "@", "…", "[", "]"]
ENGLISH = (
    "apple house river stone garden window paper music table chair bread water light shadow forest island "
    "silver golden winter summer autumn spring yellow purple orange little bright quiet happy simple "
    "letter number answer question morning evening candle pillow mirror rocket planet ocean desert "
    "engine bottle basket button carpet jacket ticket pocket rabbit monkey tiger dragon castle village "
    "doctor teacher farmer sailor hunter driver singer dancer painter writer market school office station "
    "coffee butter cheese pepper sugar honey lemon cherry banana tomato potato carrot onion garlic "
    "rain snow wind storm cloud thunder sunny cold warm hot dry wet early late fast slow big small "
    "red green blue black white grey pink brown north south east west left right up down open closed"
).split()


class Lexicon:
    def __init__(self, r: random.Random, avoid: set[str] | None = None, repeated_words: float = 0.0):
        self.r = r
        self.repeated_words = repeated_words  # share of a text's words that are ones already used
        self.avoid = {w.lower() for w in (avoid or set())}
        self.avoid_inside = {w for w in self.avoid if len(w) >= 4}  # never glued back together by glued()

    def _ok(self, w: str) -> bool:
        return bool(w) and w.lower() not in self.avoid

    # ------------------------------------------------------------------ words
    def latin(self) -> str:
        r = self.r
        while True:
            parts = []
            for _ in range(r.choice([1, 1, 2, 2, 2, 3, 3, 4])):
                on = (r.choice(ONSETS) if r.random() < 0.25 else r.choice(RARE_CONSONANTS) if r.random() < 0.06
                      else r.choice(CONSONANTS) if r.random() < 0.85 else "")
                vowel = r.choice(RARE_VOWELS) if r.random() < 0.15 else r.choice(VOWELS)
                parts.append(on + vowel + (r.choice(CODAS) if r.random() < 0.3 else ""))
            w = "".join(parts)
            if self._ok(w):
                return w

    def script_word(self, script: str | None = None) -> str:
        r = self.r
        ranges = SCRIPTS[script or r.choice(list(SCRIPTS))]
        n = r.randint(1, 3) if ranges[0][0] >= 0x3000 else r.randint(2, 9)
        while True:
            w = "".join(chr(r.randint(*r.choice(ranges))) for _ in range(n))
            if self._ok(w):
                return w

    def name(self) -> str:
        """A capitalised made-up proper name (person, place, restaurant, artist)."""
        w = self.latin()
        if len(w) < 3:
            w += self.latin()
        return w[0].upper() + w[1:]

    def place(self) -> str:
        r = self.r
        k = r.random()
        if k < 0.75:
            return self.name()
        if k < 0.9:
            return f"{self.name()} {r.choice(['City', 'Bay', 'Falls', 'Springs', 'Harbour', 'Heights'])}"
        return f"{r.choice(['San', 'Saint', 'Port', 'New', 'Nova', 'Bad', 'Las'])} {self.name()}"

    def number(self) -> str:
        r = self.r
        k = r.random()
        if k < 0.6:
            return str(r.randint(0, 10 ** r.randint(1, 6)))
        if k < 0.8:
            return f"{r.randint(0, 999)}.{r.randint(0, 99)}"
        if k < 0.9:
            return f"{r.randint(1, 999)},{r.randint(0, 999):03d}"
        return f"-{r.randint(1, 999)}"

    def ident(self) -> str:
        r = self.r
        parts = [r.choice([self.latin(), r.choice(ENGLISH)]).encode("ascii", "ignore").decode() or "x"
                 for _ in range(r.randint(1, 4))]
        if r.random() < 0.3:
            parts.append(str(r.randint(0, 99)))
        style = r.randrange(6)
        if style == 0:
            s = "_".join(p.lower() for p in parts)
        elif style == 1:
            s = parts[0].lower() + "".join(p.capitalize() for p in parts[1:])
        elif style == 2:
            s = "".join(p.capitalize() for p in parts)
        elif style == 3:
            s = "_".join(p.upper() for p in parts)
        elif style == 4:
            s = "-".join(p.lower() for p in parts)
        else:
            s = "__" + "_".join(p.lower() for p in parts) + "__"
        return s if self._ok(s) else self.ident()

    def random_chars(self) -> str:
        alphabet = string.ascii_letters + string.digits + "-_.:/#@+=()"
        return "".join(self.r.choice(alphabet) for _ in range(self.r.randint(1, 10)))

    def token(self) -> str:
        """One whitespace-free piece of text of any kind."""
        r = self.r
        k = r.random()
        if k < 0.30:
            w = self.latin()
        elif k < 0.42:
            w = r.choice(ENGLISH)
        elif k < 0.52:
            w = self.name()
        elif k < 0.66:
            w = self.script_word()
        elif k < 0.76:
            w = self.number()
        elif k < 0.86:
            w = self.ident()
        elif k < 0.92:
            w = self.random_chars()
        else:
            w = r.choice(EMOJI)
        c = r.random()
        if c < 0.08:
            w = w.upper()
        elif c < 0.16:
            w = w.capitalize()
        if r.random() < 0.15:
            w += r.choice(PUNCT)
        if r.random() < 0.04:
            w = r.choice("\"'([") + w + r.choice("\"')]")
        return w

    def text(self, lo: int = 1, hi: int = 80) -> str:
        """Text of lo..hi characters (lengths spread evenly), words joined by single spaces."""
        r = self.r
        want = r.randint(lo, hi)
        words: list[str] = []
        while len(" ".join(words)) < want:
            # A word already used (often the one before): copying must follow the position,
            # not the word, or a repeated word sends the copy round in a loop.
            if words and self.repeated_words and r.random() < self.repeated_words:
                words.append(words[-1] if r.random() < 0.5 else r.choice(words))
            else:
                words.append(self.token())
        t = " ".join(words)
        while len(t) > hi and " " in t:
            t = t.rsplit(" ", 1)[0]
        return t[:hi].strip() or self.latin()

    def glued(self, piece: Callable[[str], str], lo: int = 1, hi: int = 80) -> str:
        """Text of lo..hi characters made by appending piece(text so far) until long enough,
        drawn again while it holds a held-out word."""
        want = self.r.randint(lo, hi)
        while True:
            t = ""
            while len(t) < want:
                t += piece(t)
            t = t[:hi].strip()
            if t and not any(a in t.lower() for a in self.avoid_inside):
                return t

    def soup(self, lo: int = 1, hi: int = 80) -> str:
        """Text glued from pieces of 1-4 characters cut out of words of every kind, a space
        between two pieces three times in ten. What comes next in it follows no word the model
        knows, so only copying gets it right: on lexicon texts the language the model has learnt
        pulls a copy towards words it knows (a held-out word began as "candle")."""
        r = self.r

        def piece(t: str) -> str:
            w = self.token()
            i = r.randrange(len(w))
            return (" " if t and r.random() < 0.3 else "") + w[i:i + r.randint(1, 4)]

        return self.glued(piece, lo, hi)

    def script_char(self) -> str:
        """One whole character of one of SCRIPTS, the script drawn first so that small ones
        weigh as much as CJK."""
        return chr(self.r.randint(*self.r.choice(SCRIPTS[self.r.choice(list(SCRIPTS))])))

    def vocab_piece(self, pieces: list[str], script_chars: float = 0.0) -> str:
        """A whole token of the vocabulary (`pieces`) or, `script_chars` of the time, a whole
        character of another script. Byte-level merges split most such characters into tokens
        that are only part of one; vocab_pieces() leaves those out, so without these characters
        they are never written out alone (a held-out CJK word came back as its first character
        and two broken bytes)."""
        if script_chars and self.r.random() < script_chars:  # (no draw when off: older bytes kept)
            return self.script_char()
        return self.r.choice(pieces)

    def vocab_text(self, pieces: list[str], lo: int = 1, hi: int = 80, script_chars: float = 0.0) -> str:
        """Text glued from whole tokens of the model's vocabulary (`pieces`, their decoded
        strings), drawn uniformly. A token the corpus otherwise never asks to be written out
        ("user", "val", "con", "ode" in the first shipped corpus: 0-3 times each in 20,000
        conversations) is copied wrongly (a held-out "user" came back as "me"); here each is
        written out."""
        return self.glued(lambda _: self.vocab_piece(pieces, script_chars), lo, hi)

    def vocab_word(self, pieces: list[str], script_chars: float, capital: float) -> str:
        """A word of 2-12 characters glued from vocabulary pieces without their spaces, for an
        argument value: what a tool call copies is as often a name in another script or an odd
        spelling as it is a word the lexicon makes up. Capitalised `capital` of the time.
        `pieces` are stripped ones without a quote or backslash (JSON would escape them)."""
        while True:
            w = self.glued(lambda _: self.vocab_piece(pieces, script_chars), 2, 12).replace(" ", "")
            w = w[0].upper() + w[1:] if self.r.random() < capital else w
            if self._ok(w):  # glued() checks only held-out words of 4 characters or more
                return w
