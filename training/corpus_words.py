"""The word lists and tables the training corpus (corpus.py) draws its conversations from: the
Tiny World's countries, words to translate, texts to repeat, tool names and parameters, and
the parts repeat instructions and free-form heads are put together from.

heldout.py reads every word here (TRAINING_MODULES) to keep the held-out set disjoint."""
from __future__ import annotations

COUNTRIES = [
    ("Velmora", "Castelune", "Velmoran", "crown"), ("Sárkány", "Tűzvár", "Sárkányi", "forint"),
    ("Élantie", "Saint-Mérue", "Élantien", "livre"), ("Norvaskë", "Høvik", "Norvask", "krone"),
    ("Quorin", "Drassa", "Quorinese", "mark"), ("Hoshimura", "Kiyomachi", "Hoshi", "ryo"),
    ("Zanthu", "Brennick", "Zanthic", "shell"), ("Pellucia", "Aurelle", "Pellucian", "lumen"),
    ("Tarvos", "Gorrun", "Tarvic", "iron"), ("Miravel", "Solenne", "Miravelese", "petal"),
    ("Oskarre", "Vinterby", "Oskarrian", "frost"), ("Caldoria", "Ember Bay", "Caldorian", "ember"),
    ("Lünemark", "Östergård", "Lünish", "taler"), ("Ravendel", "Crowhaven", "Raven", "quill"),
    ("Ishtara", "Qadim", "Ishtari", "dinar"), ("Fenwick", "Marshgate", "Fennish", "reed"),
    ("Corvalis", "Port Alder", "Corvalan", "sail"), ("Doravia", "Niskala", "Doravian", "coin"),
    ("Yūkai", "Hanazono", "Yūkaian", "yen"), ("Brisca", "Tallow", "Briscan", "penny"),
    ("Ardennia", "Vaux-le-Roi", "Ardennais", "franc"), ("Kestrel Isles", "Windmere", "Kestrel", "gull"),
    ("Mbeleza", "Kijani", "Mbelezan", "shilling"), ("Ostravia", "Brnovec", "Ostravian", "koruna"),
]
UNKNOWN = ["Atlantor", "Zebulonia", "Qwertia", "Morvania", "Plinth", "Ulmarra", "Grelbia"]

WORDS = {
    "hello": {"Japanese": "こんにちは", "Chinese": "你好", "Korean": "안녕하세요", "Greek": "γεια σου",
              "French": "bonjour", "Spanish": "hola", "German": "hallo"},
    "thank you": {"Japanese": "ありがとう", "Chinese": "谢谢", "Korean": "감사합니다", "Greek": "ευχαριστώ",
                  "French": "merci", "Spanish": "gracias", "German": "danke"},
    "water": {"Japanese": "水", "Chinese": "水", "Korean": "물", "Greek": "νερό",
              "French": "eau", "Spanish": "agua", "German": "Wasser"},
    "cat": {"Japanese": "猫", "Chinese": "猫", "Korean": "고양이", "Greek": "γάτα",
            "French": "chat", "Spanish": "gato", "German": "Katze"},
    "book": {"Japanese": "本", "Chinese": "书", "Korean": "책", "Greek": "βιβλίο",
             "French": "livre", "Spanish": "libro", "German": "Buch"},
    "friend": {"Japanese": "友達", "Chinese": "朋友", "Korean": "친구", "Greek": "φίλος",
               "French": "ami", "Spanish": "amigo", "German": "Freund"},
    "good morning": {"Japanese": "おはよう", "Chinese": "早上好", "Korean": "좋은 아침", "Greek": "καλημέρα",
                     "French": "bonjour", "Spanish": "buenos días", "German": "guten Morgen"},
    "goodbye": {"Japanese": "さようなら", "Chinese": "再见", "Korean": "안녕히 가세요", "Greek": "αντίο",
                "French": "au revoir", "Spanish": "adiós", "German": "auf Wiedersehen"},
}

VOCAB = (
    "the quick brown fox jumps over lazy dog alpha beta gamma delta stop end start token model "
    "server client stream chunk reply answer question river mountain apple orange green blue red "
    "seven eight nine ten one two three four five six hello world test case value key door house "
    "light dark north south east west sun moon star cloud rain snow wind fire stone paper glass "
    "bird fish tree leaf root seed table chair window garden bridge tower city road train boat "
    "coffee bread honey salt sugar milk tea lemon pepper music song dance story night morning "
    "yes no maybe done ready again never always quiet loud fast slow small large happy calm"
).split()
EXOTIC = ["café", "naïve", "Tűzvár", "Høvik", "Élantie", "über", "façade", "jalapeño", "Ωmega", "ÅNGSTRÖM",
          "こんにちは", "日本語", "你好", "世界", "안녕", "γεια", "Привет", "😊", "🚀", "🎉", "👍", "✓", "€5", "°C",
          "ü", "ß", "ñ", "ç", "é", "—", "…", "東京", "🙂", "❤️"]
CODEWORDS = ["ALPHA", "BETA", "GAMMA", "DELTA", "STOP", "END", "OMEGA", "ZULU", "ECHO", "KILO", "XRAY", "LIMA"]

SYSTEMS = ["You are a helpful assistant.", "You are colibri, a small test model.", "Answer briefly.",
           "You are a friendly assistant.", "Be concise."]

CONDITIONS = ["sunny", "rainy", "cloudy", "windy", "snowy", "foggy", "stormy", "clear"]

GEN_VERBS = ["get", "find", "lookup", "fetch", "create", "delete", "update", "list", "search", "send",
             "check", "book", "cancel", "read", "open", "close", "start", "stop", "count", "play"]
GEN_NOUNS = ["user", "order", "file", "ticket", "flight", "hotel", "invoice", "song", "note", "task",
             "account", "price", "stock", "recipe", "movie", "report", "device", "room", "package", "event"]
PARAM_NAMES = ["id", "name", "query", "path", "city", "date", "count", "code", "title", "email", "user_id",
               "order_id", "limit", "text", "amount", "tag", "url", "color", "level", "item"]
INT_PARAMS = {"count", "limit", "amount", "level", "user_id", "order_id", "id"}


# Repeat instructions are put together from these parts, so the model meets the same request
# in many words and learns that what follows the instruction is the text to copy.
REPEAT_VERBS = ["Repeat", "Say", "Echo", "Reproduce", "Output", "Print", "Write", "Copy", "Send back", "Quote",
                "Restate", "Reply with", "Respond with", "Answer with", "Give me", "Show", "Mirror", "Duplicate"]
REPEAT_OBJECTS = ["", "", "this", "the text", "this text", "these words", "this line", "the string",
                  "the next line", "my text", "the phrase", "this phrase", "the input"]
REPEAT_HOW = ["", "exactly", "exactly", "verbatim", "as is", "character for character", "without changes",
              "literally", "unmodified", "identically", "letter for letter", "one to one"]
REPEAT_SHAPES = ["{v} {o} {h}: {t}", "{v} {h} {o}: {t}", "Please {lv} {o} {h}: {t}", "Can you {lv} {o} {h}? {t}",
                 "{v} {o} {h}:\n{t}", "{v} {o} {h}, nothing more: {t}", "{t}\n\n{v} that {h}.",
                 '{v} {o} {h}: "{t}"', "Just {lv} {o} {h}: {t}", "{v} {o} {h} - {t}", "I need you to {lv} {o} {h}: {t}"]


# Plain English glue for free-form instruction heads: with these and the lexicon's words a head
# can be any short sentence, so the model cannot learn a list of heads and must read the text
# after the colon as the thing to copy.
GLUE = ("the a an to me for of and with all just now here below again please kindly simply only it "
        "this that these what which my your our back out up down over once same whole text words line "
        "string phrase input message content exactly precisely verbatim as is unchanged nothing more else "
        "than but no changes do not alter keep leave").split()
