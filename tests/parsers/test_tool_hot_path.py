"""What the tool-call hot path's shortcuts must keep: `partial_tail` as its definition says,
results equal and hashable by value, and one DSML format shared by concurrent streams."""

from __future__ import annotations

import json
import random

from tests.sample_size import sample_size
from vllm_pyfrontend.parsers.combinators import Fail, Ok, partial_tail
from vllm_pyfrontend.parsers.pipeline import make_assistant_stream
from vllm_pyfrontend.parsers.tool import get_tool_parser

DSML = "｜DSML｜"
# Mutated DSML parameter heads checked against their grammar (about 136 checks each; the first
# 800 of the seeded full run in CI, still over the 100,000 checks the test asks for).
HEAD_MUTATIONS = sample_size(3000, 800)


def _partial_tail_by_definition(buffer: str, markers: list[str]) -> int:
    """The start of the longest suffix that is a proper prefix of some marker."""
    for i in range(len(buffer) + 1):
        suffix = buffer[i:]
        if suffix and any(len(suffix) < len(m) and m.startswith(suffix) for m in markers):
            return i
    return len(buffer)


def test_partial_tail_matches_its_definition() -> None:
    rng = random.Random(7)
    alphabet = f"<</{DSML}ab>x \n"
    markers = [f"</{DSML}tool_calls>", f"<{DSML}", "<a", "<", "ab<ab", "aaa", "", f"</{DSML}parameter>"]
    for _ in range(20000):
        buf = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        ms = rng.sample(markers, rng.randint(0, 4))
        assert partial_tail(buf, ms) == _partial_tail_by_definition(buf, ms), (buf, ms)


def test_results_compare_and_hash_by_value() -> None:
    assert Ok(3, "x") == Ok(3, "x") and Ok(3, "x") != Ok(3, "y") and Fail(2) == Fail(2)
    assert len({Ok(1, "a"), Ok(1, "a"), Fail(1), Fail(1)}) == 2


def _call(name: str, city: str) -> str:
    return (f"<{DSML}tool_calls>\n<{DSML}invoke name=\"{name}\">\n"
            f"<{DSML}parameter name=\"location\" string=\"true\">{city}</{DSML}parameter>\n"
            f"<{DSML}parameter name=\"days\" string=\"false\">3</{DSML}parameter>\n"
            f"</{DSML}invoke>\n</{DSML}tool_calls>")


def test_dsml_format_is_shared_and_streams_stay_independent() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    assert get_tool_parser("deepseek_v4", None, tools).fmt is get_tool_parser("deepseek_v4", None, []).fmt
    texts = {"a": "Sure. " + _call("get_weather", "Paris"), "b": _call("get_time", "東京 and more")}
    streams = {k: make_assistant_stream(None, "deepseek_v4", None, tools=tools) for k in texts}
    calls: dict[str, dict[int, dict]] = {k: {} for k in texts}
    content = {k: "" for k in texts}
    pos = {k: 0 for k in texts}
    rng = random.Random(3)

    def take(k: str, delta) -> None:
        if delta is None:
            return
        content[k] += delta.content or ""
        for item in delta.tool_calls:
            cur = calls[k].setdefault(item["index"], {"name": "", "arguments": ""})
            fn = item.get("function") or {}
            cur["name"] += fn.get("name") or ""
            cur["arguments"] += fn.get("arguments") or ""

    while any(pos[k] < len(texts[k]) for k in texts):  # the two streams' chunks interleaved
        for k in texts:
            n = rng.randint(1, 5)
            piece, pos[k] = texts[k][pos[k] : pos[k] + n], pos[k] + n
            if piece:
                take(k, streams[k].feed(piece))
    for k in texts:
        take(k, streams[k].finish())
    assert content == {"a": "Sure.", "b": ""}
    assert [(c["name"], json.loads(c["arguments"])) for c in calls["a"].values()] == [
        ("get_weather", {"location": "Paris", "days": 3})]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls["b"].values()] == [
        ("get_time", {"location": "東京 and more", "days": 3})]


def test_dsml_parameter_head_parses_as_its_grammar() -> None:
    """The hand-written DSML parameter head (`DsmlParamHead`) answers as its combinator
    grammar does on every prefix, mutation and position: the same Ok (end, name, string
    attribute), NEED, or failure at the same position, with and without eof."""
    from vllm_pyfrontend.parsers.tool.deepseek import DsmlParamHead, dsml_param_head_grammar

    for prefix in (DSML, "｜DSML｜ "):  # DeepSeek V4's and V4.1's (spaced) tags
        _check_head(DsmlParamHead(prefix), dsml_param_head_grammar(prefix), prefix)


def _check_head(fast, spec, prefix: str) -> None:
    heads = [
        f'<{prefix}parameter name="city" string="true">',
        f'<{prefix}parameter name="days" string="false">3',
        f'<{prefix}parameter  name="x">v',
        f'<{prefix}parameter\nname="a b" string="true">',
        f'<{prefix}parameter name="ok"string="true">',
        f'<{prefix}parameter name="k" strin="true">',
        f'<{prefix}parameter name="k" string="true"  >',
        f'<{prefix}parameter name="k" string="tr',
        f'<{prefix}parameter name="<bad>">',
        f'<{prefix}parameter name="">',
        f'<{prefix}parameter name="k" \n>',
        f'<{prefix}parameter name="k" x>',
        f"<{prefix}param",
        f'<{prefix}parametername="k">',
    ]
    texts = _mutations(heads, f' "=<>/\nastringuex{prefix}', HEAD_MUTATIONS, 5)
    checked = _same_answers(fast, spec, texts, probed=False)
    assert checked > 100000


def _mutations(samples: list[str], alphabet: str, count: int, seed: int) -> list[str]:
    """The samples and ``count`` copies with one to three characters deleted, inserted or
    replaced."""
    rng = random.Random(seed)
    texts = list(samples)
    for _ in range(count):
        cut = list(rng.choice(samples))
        for _ in range(rng.randint(1, 3)):
            k = rng.randrange(len(cut) + 1)
            op = rng.random()
            if op < 0.4 and cut:
                del cut[min(k, len(cut) - 1)]
            elif op < 0.8:
                cut.insert(k, rng.choice(alphabet))
            elif cut:
                cut[min(k, len(cut) - 1)] = rng.choice(alphabet)
        texts.append("".join(cut))
    return texts


def _seen(v):
    """A probe event's value as data (argument prefixes and their tails hold no equality)."""
    from vllm_pyfrontend.parsers.tool.streaming import ArgsPrefix, ParsedArgs, XmlStringTail

    if isinstance(v, ArgsPrefix):
        return ("prefix", v.text, v.closers, _seen(v.tail))
    if isinstance(v, XmlStringTail):
        return ("tail", id(v.param), v.pending, v.at_start)
    if isinstance(v, ParsedArgs):
        return ("parsed", list(v), v.args_text)
    return v


def _same_answers(fast, spec, texts: list[str], lead: str = "xy", probed: bool = True) -> int:
    """``fast`` answers as ``spec`` on every prefix of every text, at two positions, with and
    without eof, and (``probed``) under a probe (the same events then too). Returns the checks."""
    from vllm_pyfrontend.parsers.combinators import probe

    checked = 0
    for text in texts:
        for stop in range(len(text) + 1):
            s = lead + text[:stop]
            for pos in (len(lead), 0):
                for eof in (False, True):
                    assert fast.parse(s, pos, eof) == spec.parse(s, pos, eof), (s, pos, eof)
                    checked += 1
                    if not probed:
                        continue
                    (rf, ef), (rs, es) = probe(fast, s, pos, eof), probe(spec, s, pos, eof)
                    assert rf == rs, (s, pos, eof)
                    assert [(k, a, b, _seen(v)) for k, a, b, v in ef] == \
                        [(k, a, b, _seen(v)) for k, a, b, v in es], (s, pos, eof)
    return checked


def test_ws_list_parses_as_its_grammar() -> None:
    """`ws_list` (tool sections' calls, XML calls' parameters) answers as the combinators it
    stands for, events included: whitespace around and between items, a minimum count, an
    item that fails after reporting (its events rolled back) or needs more text."""
    from vllm_pyfrontend.parsers.combinators import fmap, lit, seq, tag, take_until, ws_list, ws_list_grammar

    item = tag("call", fmap(seq(lit("<"), tag("name", take_until(">", " ")), lit(">")),
                            lambda v: v[1] if v[1] != "bad" else int("x")))
    samples = ["<a> <b>\n<c>  ", " <a>", "\n\n<a><b> x", "<bad> <a>", "<a b> <c>", "  ", "<a> <bad>"]
    texts = _mutations(samples, "<> ab\nx", 600, 11)
    checked = 0
    for minimum in (0, 1, 2):
        for outer in (True, False):
            checked += _same_answers(ws_list(item, minimum, outer), ws_list_grammar(item, minimum, outer), texts)
    assert checked > 100000


def test_dsml_invoke_parses_as_its_grammar() -> None:
    """The hand-written DSML call (`DsmlInvoke`) answers as its combinator grammar on every
    prefix and mutation of calls: results, NEED, failure positions, and under a probe the
    same name, arguments and call events (DeepSeek V4's DSML and V4.1's spaced DSML)."""
    from vllm_pyfrontend.parsers.tool.deepseek import DsmlInvoke, dsml_invoke_grammar

    for name in ("deepseek_v4", "deepseek_v41"):
        fmt = get_tool_parser(name, None, []).fmt
        parts = fmt._invoke_parts()
        p = parts[2]  # the tag prefix
        samples = [
            f'<{p}invoke name="get_weather">\n<{p}parameter name="city" string="true">Paris</{p}parameter>\n'
            f'<{p}parameter name="days" string="false">3</{p}parameter>\n</{p}invoke>',
            f'<{p}invoke name="f"><{p}parameter name="q" string="true">{"long text " * 4}</{p}parameter></{p}invoke>',
            f'<{p}invoke name="g">\n</{p}invoke>',
            f'<{p}invoke name="bad name"></{p}invoke>',
            f'<{p}invoke name="h"><{p}parameter name="a" string="false">{{"x": [1, 2]}}</{p}parameter>'
            f'<{p}parameter name="a" string="true">again</{p}parameter></{p}invoke>',
            f'<{p}invoke name="k"><{p}parameter name="v" string="true">unclosed<{p}parameter name="w">1</{p}invoke>',
        ]
        texts = _mutations(samples, f' "=<>/\n{p}ainvoke', 150, 13)
        fast, spec = DsmlInvoke(*parts), dsml_invoke_grammar(*parts)
        assert _same_answers(fast, spec, texts) > 50000
