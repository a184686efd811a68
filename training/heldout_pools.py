"""The held-out set's own words, names, phrasings and tools (heldout.py): data only, so that the
training generator (corpus.py) can refuse them without importing the evaluation that imports it.
None of it may appear in the modules heldout.TRAINING_MODULES lists."""
from __future__ import annotations

# Pools written for this set: words of several languages and scripts, names, identifiers.
POOL_WORDS = (
    "Fenster Schrank Gabel Löffel Brücke Straße Kerze Wolke zapato ventana cuchara manzana "
    "bosque tortuga słońce jabłko rzeka książka çiçek köprü ağaç kalem ψωμί θάλασσα ουρανός "
    "молоко окно дерево книга 桜 山道 電車 바다 하늘 나무 sapin écureuil pamplemousse gâteau "
    "vinho janela cidade saudade kettle pebble lantern harbor meadow thimble walnut violet "
    "marble copper velvet canyon prairie glacier orchard lagoon falcon otter badger heron"
).split()
POOL_NAMES = ["Ingrid", "Tomasz", "Aiyana", "Oluwaseun", "Björn", "Chiara", "Dmitri", "Leilani", "Matías", "Ngozi",
              "Søren", "Yusuf", "Zofia", "Anahí", "Kenji", "Priya", "Rafael", "Émile", "Greta", "Hamid"]
POOL_CITIES = ["Rome", "Lisbon", "Kraków", "Tbilisi", "Nairobi", "Oaxaca", "Tromsø", "Ljubljana", "Valparaíso",
               "Hobart", "Izmir", "Bergen", "Cusco", "Aarhus", "Gdańsk", "Porto", "Sapporo", "Quito"]
POOL_IDENTS = ["snake_case_name", "parseHttpHeader", "MAX_RETRY_COUNT", "user-agent", "__init__", "x86_64",
               "fetchUserById", "tmp_dir_2", "onClickHandler", "utf8_decode", "CamelCaseThing", "is_valid"]
PUNCT = [",", ".", "!", "?", ";", ":", "-", "(", ")", "'", "\"", "/", "&", "%", "#"]

REPEAT_PHRASES = ["Please say back, word for word: {t}", "Copy this text verbatim: {t}",
                  "Echo the following and nothing else: {t}", "Type back exactly what follows: {t}",
                  "Return this string unchanged: {t}", "Write out precisely: {t}"]

#: tool name -> (parameters, phrasings with {slots}); each argument value is a span of the prompt
TOOLS: dict[str, tuple[dict[str, str], list[str]]] = {
    "convert_units": ({"value": "number", "from_unit": "string", "to_unit": "string"},
                      ["Convert {value} {from_unit} to {to_unit}.", "How many {to_unit} is {value} {from_unit}?"]),
    "book_table": ({"restaurant": "string", "people": "integer"},
                   ["Reserve a table at {restaurant} for {people}.", "Book {restaurant} for {people} people."]),
    "check_forecast": ({"place": "string"},
                       ["Will it rain in {place} tomorrow?", "What is the forecast for {place}?"]),
    "send_sms": ({"recipient": "string", "body": "string"},
                 ["Text {recipient}: {body}", "Send an SMS to {recipient} saying {body}"]),
    "play_track": ({"artist": "string"}, ["Play something by {artist}.", "Put on a song from {artist}."]),
}
UNITS = [("km", "miles"), ("kg", "pounds"), ("liters", "gallons"), ("celsius", "fahrenheit"), ("meters", "feet")]
