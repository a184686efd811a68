"""The corpus recipes (corpus.py --recipe): what each changes from the first shipped weights'
corpus, as the share of conversations each feature reaches (training/README names each run)."""
from __future__ import annotations

#: Corpus recipes: what each changes from the first shipped weights' corpus (run2).
RECIPES = {
    "run2": {"free_heads": 0.0, "repeated_words": 0.0},  # the first shipped weights' (and the tokenizer's) corpus
    # training/README "Free-form instructions": 30% of repeat instructions with a free head, one
    # word in ten of a lexicon text one already used in it; held-out heads refused to the colon.
    "free-heads": {"free_heads": 0.3, "repeated_words": 0.1},
    # training/README "Soup and colons": free heads, plus 30% of lexicon repeat texts glued from
    # word pieces (Lexicon.soup), 30% of domain requests shaped "words: text"
    # (tooldomains.COLON_PHRASINGS, whose heads free heads also avoid), and 8% of conversations a
    # repeat request beside domain tools, messaging among them half the time.
    "soup-colons": {"free_heads": 0.3, "repeated_words": 0.1, "soup": 0.3, "colons": 0.3, "repeat_with_tools": 0.08},
    # training/README "Every token written out": free heads, plus 40% of lexicon repeat texts
    # glued from whole tokens of a given tokenizer (--tokenizer), the one the model then trains on.
    "vocab-texts": {"free_heads": 0.3, "repeated_words": 0.1, "vocab_texts": 0.4},
    # The second and third shipped weights' corpus (training/README "Copied values"): vocab-texts,
    # plus whole characters of other scripts as 20% of the pieces, 35% of names, places and words
    # in tool arguments glued from the same pieces, and 25% of domain requests inside an opener or
    # closer (tooldomains.wrap).
    "copy-values": {"free_heads": 0.3, "repeated_words": 0.1, "vocab_texts": 0.4, "script_chars": 0.2,
                    "vocab_values": 0.35, "wrappers": 0.25},
    # training/README "Wider, in bf16" (not shipped; it lost tool choice): copy-values, plus 30% of
    # domain targets renamed after a keyword of their domain that the request's phrasing uses
    # (tooldomains.ToolTasks.renamed), and 10% of repeat texts ending (a third of those also
    # starting) in a quote or bracket, which `verb: "text"` instructions teach to be a delimiter.
    "named-overlap": {"free_heads": 0.3, "repeated_words": 0.1, "vocab_texts": 0.4, "script_chars": 0.2,
                      "vocab_values": 0.35, "wrappers": 0.25, "named": 0.3, "edge_quotes": 0.1},
    # training/README "Composed requests": copy-values, plus half of the domain requests composed
    # from a domain's own words in many sentence shapes (tooldomains.COMPOSED) instead of drawn
    # from its few listed phrasings.
    "composed": {"free_heads": 0.3, "repeated_words": 0.1, "vocab_texts": 0.4, "script_chars": 0.2,
                 "vocab_values": 0.35, "wrappers": 0.25, "composed": 0.5},
    # The shipped weights' corpus, drawn with the digits-apart tokenizer (training/README "Composed,
    # with colons" and "Composed-colons with digits apart"): composed, plus soup-colons' "words:
    # text" requests (30% of the listed phrasings drawn, so about 15% of requests) and repeat
    # requests beside domain tools (8% of conversations), for messages shaped like a repeat
    # instruction.
    "composed-colons": {"free_heads": 0.3, "repeated_words": 0.1, "vocab_texts": 0.4, "script_chars": 0.2,
                        "vocab_values": 0.35, "wrappers": 0.25, "composed": 0.5, "colons": 0.3,
                        "repeat_with_tools": 0.08},
    # training/README "Mostly composed": composed-colons with 80% of domain requests composed
    # instead of half; the colon phrasings keep their share of requests (75% of the 20% listed).
    "mostly-composed": {"free_heads": 0.3, "repeated_words": 0.1, "vocab_texts": 0.4, "script_chars": 0.2,
                        "vocab_values": 0.35, "wrappers": 0.25, "composed": 0.8, "colons": 0.75,
                        "repeat_with_tools": 0.08},
    # training/README "Picking the tool": copy-values, plus every domain tool conversation that calls
    # one of two or more offered tools opening with one or two finished calls to the others
    # (Gen.earlier_calls).
    "selections": {"free_heads": 0.3, "repeated_words": 0.1, "vocab_texts": 0.4, "script_chars": 0.2,
                   "vocab_values": 0.35, "wrappers": 0.25, "selections": 1.0},
    # The shipped weights' last fine-tune (training/README "Look-alike tools"): composed-colons,
    # with half of the domain requests offered beside tools of other domains that take the same
    # argument types (tooldomains.LOOK_ALIKES: weather beside the clock, music and web search),
    # so that the request's words and the tools' names choose the tool, not the values' shape.
    "look-alikes": {"free_heads": 0.3, "repeated_words": 0.1, "vocab_texts": 0.4, "script_chars": 0.2,
                    "vocab_values": 0.35, "wrappers": 0.25, "composed": 0.5, "colons": 0.3,
                    "repeat_with_tools": 0.08, "look_alikes": 0.5},
}
FEATURES_OFF = {"soup": 0.0, "colons": 0.0, "repeat_with_tools": 0.0, "vocab_texts": 0.0,  # the older recipes'
                "script_chars": 0.0, "vocab_values": 0.0, "wrappers": 0.0, "named": 0.0, "edge_quotes": 0.0,
                "composed": 0.0, "selections": 0.0, "look_alikes": 0.0}
#: The closing marks the "named-overlap" recipe puts at the edges of repeat texts.
EDGE_QUOTES = ['"', "'", "”", "’", "»", ")", "]", "」"]
