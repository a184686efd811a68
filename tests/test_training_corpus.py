"""The training corpus generator keeps the promises training/README.md makes: older recipes
draw the same bytes as when their models were trained, and no recipe can produce the held-out
set's phrasings or words (issue 16's disjointness)."""
from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

import corpus  # noqa: E402
import heldout  # noqa: E402

# md5 of the first 200 conversations `corpus.py --recipe R --seed 1` draws. run2, free-heads and
# soup-colons draw no token of a tokenizer: theirs are the bytes their models were trained on
# (run2: the first shipped weights). The others glue texts from the tokenizer's tokens, so their
# draws depend on it. They are recorded with the shipped tokenizer, the digits-apart one since
# 2026-12-03: the tokenizer of the runs training/README names "digits apart" (the shipped
# weights' composed-colons corpus among them). The runs before those drew from the previous
# shipped tokenizer ("Words apart" from its own), which git holds (`git show
# 44ef5cf:colibri/models/tiny/tokenizer.json`); with it these recipes draw the md5s recorded at
# that commit. The draws, not their rendering: a run's corpus is these conversations rendered
# with its model directory's chat templates (`--templates`), which changed once (tools' names
# last). A change to the generator that moves these breaks that reproducibility.
RECORDED = {"run2": "bc3ddbf497b35f8dfc6ee72a1f04fbd2", "free-heads": "37647ad8ee9d9c2408a06afc7ea12e9e",
            "soup-colons": "9aaad2160d3daf6e78795cd9570cf9df", "vocab-texts": "21a34d33d4b5fcd964b80706a72781b1",
            "copy-values": "fefafa43962fd1c3d9edd65585364ede", "named-overlap": "99e778d85e8d3d41663aa663408e38e5",
            "composed": "72f1534be9b59344c423f09c7b1afc59", "selections": "00fdac1168635638686596986b9cd20a",
            "composed-colons": "d743d5558db36a9cae3b266472b01870", "mostly-composed": "2cf8fe3011280fd2fb93a93a32b2ca58",
            "look-alikes": "af74a5fd53cc5b7b3d60ee0a2bb5351a"}
SHIPPED_TOKENIZER = str(corpus.MODEL_DIR / "tokenizer.json")


def sample_md5(recipe: str, n: int = 200, rendered: bool = False) -> str:
    """md5 of the first n conversations drawn, or (rendered) of the first n corpus lines."""
    g = corpus.Gen(random.Random(1), recipe, SHIPPED_TOKENIZER)
    h = hashlib.md5()
    for _ in range(n):
        row = corpus.example(g.conversation()) if rendered else g.conversation()
        h.update((json.dumps(row, ensure_ascii=False) + "\n").encode())
    return h.hexdigest()


@pytest.mark.parametrize("recipe", sorted(RECORDED))
def test_older_recipes_draw_the_same_bytes(recipe: str) -> None:
    assert sample_md5(recipe) == RECORDED[recipe]


def test_the_shipped_templates_render_the_shipped_models_corpus() -> None:
    """The first 200 lines of the shipped weights' train.jsonl (composed-colons, seed 1, drawn
    with the shipped tokenizer and rendered with colibri/models/tiny's templates) as they were
    when it was trained."""
    assert sample_md5("composed-colons", rendered=True) == "3e404bc1cc1823274f7388538662a04e"


def test_no_recipe_produces_a_heldout_phrasing() -> None:
    heldout.check_phrasings(samples=3000)  # raises SystemExit on a clash


def test_heldout_pools_lose_only_what_training_text_holds() -> None:
    assert heldout.HeldOut().dropped == ["__init__"]


def test_soup_never_glues_a_heldout_word_back_together() -> None:
    g = corpus.Gen(random.Random(3), "soup-colons")
    words = [w.lower() for w in heldout.POOL_WORDS + heldout.POOL_NAMES + heldout.POOL_CITIES if len(w) >= 4]
    soups = [g.lex.soup(1, 80) for _ in range(3000)]
    assert all(1 <= len(s) <= 80 for s in soups)
    assert not [s for s in soups if any(w in s.lower() for w in words)]


def test_colon_phrasings_cover_every_domain_and_stay_out_of_free_heads() -> None:
    import tooldomains

    assert {d[0][0] for d in tooldomains.DOMAINS} == set(tooldomains.COLON_PHRASINGS)
    banned = corpus.tool_words(colons=True)
    assert {"sms", "dm", "ping", "play"} <= banned
    r = random.Random(4)
    g = corpus.Gen(r, "soup-colons")
    heads = [corpus.free_head(r, g.lex, banned) for _ in range(2000)]
    assert not [h for h in heads if banned & {w.lower().strip(",") for w in h.split()}]


def test_composed_requests_fill_with_their_domains_roles_and_vary() -> None:
    """Every COMPOSED pattern of a domain formats with that domain's roles (a slot of another
    domain would be a KeyError mid-corpus), and a domain's requests come in many shapes."""
    import tooldomains

    assert set(tooldomains.COMPOSED) == {d[0][0] for d in tooldomains.DOMAINS}
    r = random.Random(2)
    for keywords, roles, _ in tooldomains.DOMAINS:
        shapes = {tooldomains.composed(r, keywords[0], []) for _ in range(300)}
        for t in shapes:
            t.format(**{role: "X" for role in roles})
            assert set(re.findall(r"\{(\w+)\}", t)) == set(roles), (keywords[0], t)
            assert not re.search(r"[()\[\]|]", t), t  # no pattern syntax left over
        assert len(shapes) >= 20, (keywords[0], len(shapes))


def test_composed_requests_never_hold_a_forbidden_run() -> None:
    """The generator redraws a request that holds a forbidden phrasing's
    words in a row, whatever the case, punctuation or words around it; unguarded it would
    produce them (so the guard is what keeps the held-out phrasings out)."""
    import tooldomains

    held = [tooldomains.loose(p) for _, ps in heldout.TOOLS.values() for p in ps]
    assert tooldomains.loose("Please, send an SMS to {recipient} saying {body}!") == \
        ["please", "send", "an", "sms", "to", "{}", "saying", "{}"]
    r = random.Random(1)
    keys = list(tooldomains.COMPOSED)
    unguarded = [tooldomains.composed(r, keys[i % len(keys)], []) for i in range(5000)]
    assert [t for t in unguarded if any(tooldomains.contains(tooldomains.loose(t), w) for w in held)]
    guarded = [tooldomains.composed(r, keys[i % len(keys)], held) for i in range(5000)]
    assert not [t for t in guarded if any(tooldomains.contains(tooldomains.loose(t), w) for w in held)]


def test_heldout_names_what_a_tool_answer_got_wrong() -> None:
    """heldout.miss_kind sorts each tool answer into one outcome, the first that applies."""
    item = heldout.HeldOut(seed=3).tool()
    right = {"name": item["name"], "arguments": json.dumps(item["args"])}
    other = next(t["function"]["name"] for t in item["tools"] if t["function"]["name"] != item["name"])  # seed 3: two

    def kind(**fn: str) -> str:
        return heldout.miss_kind(item, [{"function": right | fn}])

    assert heldout.miss_kind(item, []) == "no call"
    assert kind() == "exact"
    assert kind(name="not_offered_at_all") == "tool not offered"
    assert kind(name=other) == "wrong offered tool"
    assert kind(arguments="{not json") == "arguments not JSON"
    assert kind(arguments=json.dumps(item["args"] | {"minutes": "tomorrow"})) == "other keys"
    first = next(iter(item["args"]))
    assert kind(arguments=json.dumps(item["args"] | {first: "zz"})) == f"value of {first}"


def test_selections_open_with_calls_to_the_other_offered_tools() -> None:
    """The selections recipe: a domain call among several offered tools comes after one or two
    finished calls (call, result, report) to other tools of the same offered list."""
    g = corpus.Gen(random.Random(5), "selections", SHIPPED_TOKENIZER)
    seen = 0
    for _ in range(1500):
        conv = g.conversation()
        earlier = [m for m in conv["messages"] if m.get("tool_calls")]
        if not earlier or not conv.get("calls"):
            continue
        seen += 1
        offered = {t["function"]["name"] for t in conv["tools"]}
        final = conv["calls"][0]["function"]["name"]
        names = [m["tool_calls"][0]["function"]["name"] for m in earlier]
        assert set(names) <= offered - {final} and len(set(names)) == len(names) <= 2
        i = conv["messages"].index(earlier[0])
        assert conv["messages"][i + 1]["role"] == "tool" and conv["messages"][i + 2]["role"] == "assistant"
    assert seen > 50


def test_picking_probe_offers_the_right_tool_with_the_verbs_its_case_says() -> None:
    """training/picking.py: every request offers its right tool and one other, each first in half
    of them; "same verb" tools share their verb, "different verbs" ones never do."""
    import picking

    items = picking.requests(4)
    assert len(items) == 4 * 2 * len(picking.tooldomains.VERBS)
    firsts = 0
    for it in items:
        names = [t["function"]["name"] for t in it["tools"]]
        assert it["name"] in names and len(set(names)) == 2 and "{" not in it["prompt"]
        verbs = {n.split("_")[0] for n in names}
        assert (len(verbs) == 1) == (it["case"] == "same verb")
        firsts += names[0] == it["name"]
    assert firsts == len(items) // 2


def test_no_heldout_word_is_a_token_of_the_shipped_tokenizer() -> None:
    heldout.check_tokens(Path(SHIPPED_TOKENIZER))  # raises SystemExit on a clash


def test_a_heldout_word_learnt_whole_is_refused(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "ĠSapporo": 1, "kettle": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(SystemExit, match=r"\['Sapporo', 'kettle'\]"):
        heldout.check_tokens(tmp_path / "tokenizer.json")


def _types(tool: dict) -> tuple[str, ...]:
    return tuple(sorted(p["type"] for p in tool["function"]["parameters"]["properties"].values()))


def look_alike_share(recipe: str) -> float:
    """Of the calls made with two or more tools offered (domain, fixed and generic tools alike),
    the share whose other offered tools all take the called tool's argument types."""
    g = corpus.Gen(random.Random(3), recipe, SHIPPED_TOKENIZER)
    alike = seen = 0
    for _ in range(3000):
        conv = g.conversation()
        if not conv.get("calls") or len(conv.get("tools", [])) < 2:
            continue
        by_name = {t["function"]["name"]: t for t in conv["tools"]}
        called = by_name.get(conv["calls"][0]["function"]["name"])
        if called is None:
            continue
        seen += 1
        alike += all(_types(t) == _types(called) for t in conv["tools"])
    assert seen > 300
    return alike / seen


def test_look_alikes_offer_tools_that_take_the_same_argument_types() -> None:
    """The look-alikes recipe: in half of the domain calls every other offered tool takes the same
    argument types (weather beside the clock, music or web search), against a few in the recipe
    it extends, where the others are drawn from any domain. (Calls to the fixed and generic
    tools, about a third, are counted too and rarely alike, so the share is 0.36 and 0.09.)"""
    assert look_alike_share("look-alikes") > 0.3
    assert look_alike_share("composed-colons") < 0.15
