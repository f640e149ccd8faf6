"""Arguments streamed as generated: every format, long arguments, the commit rule,
and the schema / format fixes that streaming made visible.

The delta contract and chunking independence are checked by the harness for
every run (tests/parsers/harness.py); here: that argument text flows *before*
the call's section closes, that it adds up to the non-streaming arguments,
and what happens to a call that was announced and then turns out malformed.
"""

from __future__ import annotations

import random

import pytest

from vllm_pyfrontend.parsers.tool import get_tool_parser
from tests.parsers.corpus import DSML, RENDER, TOOLS
from tests.parsers.harness import collect, random_char_splits, run_chunks, run_whole
from tests.parsers.render_more import MORE
from tests.parsers.cases import tool_names_apertus_to_kimi as names_a_k, xml_more

#: a long argument: code with quotes, backslashes, tags, unicode, newlines
LINE = 'if a < b and s == "x\\\\y": print(f"{a}</p>") # 杭州 😀\n'
CODE = "".join(f"{i}: {LINE}" for i in range(60))
LONG = [("run_code", {"code": CODE})]

#: every format whose arguments stream, with its renderer
STREAMED = {**RENDER, **MORE}
#: formats whose renderers are their case modules
STREAMED.update(
    {
        "dots": names_a_k.dots,
        "hy_v4": names_a_k.hy(""),
        "k2_horizon": names_a_k.k2_horizon,
        "minicpm5": xml_more.minicpm5,
        "minimax_m3": xml_more.minimax_m3,
        # names registered on another name's format (next to that format's registration)
        "glm47": names_a_k.glm47,
        "ling3": RENDER["glm45"],
        "poolside_v1": RENDER["glm45"],
        "llama4_json": RENDER["llama3_json"],
        "qwen3_json": RENDER["hermes"],
        "qwen3_xml": RENDER["qwen3_coder"],
        "step3p5": RENDER["qwen3_coder"],
    }
)
# (gpt-oss, ``openai``, streams token by token: tests/parsers/test_harmony_pipeline.py)
#: formats that strip parameter values (the long argument loses its final newline)
STRIPS = {"dots"}
STRIPPED = [("run_code", {"code": CODE.strip()})]
#: formats that take one call per output
ONE_CALL = {"gigachat3"}


def feed_all(make, chunks):
    p = make()
    deltas = []
    for c in chunks:
        deltas.append(p.feed(c))
    deltas.append(p.finish())
    return collect(deltas)


@pytest.mark.parametrize("fmt", list(STREAMED))
def test_long_argument_streams_before_the_call_closes(fmt: str) -> None:
    text = STREAMED[fmt](LONG)
    make = lambda: get_tool_parser(fmt, None, TOOLS)  # noqa: E731
    chunks = [text[k : k + 4] for k in range(0, len(text), 4)]
    p = make()
    fed = 0
    announced_at = None
    arg_deltas_early = 0
    deltas = []
    for c in chunks:
        d = p.feed(c)
        fed += len(c)
        deltas.append(d)
        if d is None:
            continue
        for item in d.tool_calls:
            if "id" in item and announced_at is None:
                announced_at = fed
            elif item["function"]["arguments"] and fed < len(text) - 40:
                arg_deltas_early += 1
    deltas.append(p.finish())
    result, _ = collect(deltas)
    # the name goes out within the first few hundred characters of a ~4 KB call
    assert announced_at is not None and announced_at < 300, announced_at
    # and the argument flows while the model is still writing it
    assert arg_deltas_early > 100, arg_deltas_early
    # concatenated deltas == the non-streaming arguments, decoded as written
    assert result.key() == run_whole(make, text).key()
    assert result.decoded_calls() == (STRIPPED if fmt in STRIPS else LONG)
    rng = random.Random(fmt)
    for _ in range(10):
        assert run_chunks(make, random_char_splits(text, rng)).key() == result.key()


@pytest.mark.parametrize("fmt", [f for f in STREAMED if f not in ONE_CALL])
def test_parallel_calls_stream_in_order(fmt: str) -> None:
    calls = [("search", {"code": "a" * 300}), ("get_weather", {"city": "Paris", "days": 3})]
    text = STREAMED[fmt](calls)
    make = lambda: get_tool_parser(fmt, None, TOOLS)  # noqa: E731
    result, deltas = feed_all(make, list(text))
    assert result.decoded_calls() == calls
    # the first call's name went out before the second call's text began
    first_ann = next(k for k, d in enumerate(deltas) if any("id" in t for t in d.tool_calls))
    assert first_ann < len(deltas) - 1


# ----------------------------------------------------------- commit rule
def test_announced_call_is_completed_when_the_output_is_cut() -> None:
    """The deliberate choice: a call goes out (id, name, arguments) once its
    arguments have begun, and cannot be taken back. Output cut there (max
    tokens) or malformed after that point completes the call, its arguments
    closed into valid JSON; text after the point where the body stopped being
    valid is content. Decided on the text alone: streamed or whole, the same."""
    make = lambda: get_tool_parser("hermes", None, TOOLS)  # noqa: E731
    cut = '<tool_call>\n{"name": "run_code", "arguments": {"code": "print(\\"hi'
    r = run_whole(make, cut)
    assert (r.content, r.decoded_calls()) == ("", [("run_code", {"code": 'print("hi'})])
    assert r.calls[0][1] == '{"code": "print(\\"hi"}'
    streamed, deltas = feed_all(make, list(cut))
    assert streamed.key() == r.key()
    # the partial escape at the cut is never sent
    cut2 = cut + "\\"
    assert run_whole(make, cut2).key() == r.key()

    broken = '<tool_call>\n{"name": "f", "arguments": {"a": 1, "b": [2, }}\n</tool_call> tail'
    r = run_whole(make, broken)
    assert r.decoded_calls() == [("f", {"a": 1, "b": [2]})]
    assert r.content == "}}\n</tool_call> tail"
    for k in range(1, len(broken)):
        assert run_chunks(make, [broken[:k], broken[k:]]).key() == r.key()

    # before the arguments begin nothing was announced: the text comes back whole
    for early in ('<tool_call>\n{"name": "f", "argu', '<tool_call>{"name": "f", "arguments": [1]}</tool_call>'):
        assert run_whole(make, early).key() == (early, "", [])


def test_xml_cut_inside_a_parameter() -> None:
    make = lambda: get_tool_parser("qwen3_coder", None, TOOLS)  # noqa: E731
    text = "<tool_call>\n<function=run_code>\n<parameter=days>\n3\n</parameter>\n<parameter=code>\nprint(1)\n"
    r = run_whole(make, text)
    assert r.decoded_calls() == [("run_code", {"days": 3, "code": "print(1)"})]
    assert r.calls[0][1] == '{"days": 3, "code": "print(1)"}'
    # a typed (non-string) parameter is sent only when complete
    text = "<tool_call>\n<function=run_code>\n<parameter=days>\n3"
    assert run_whole(make, text).decoded_calls() == [("run_code", {})]


def test_long_argument_is_not_reparsed_per_token() -> None:
    """Cost: the partial body is parsed again only when it has grown by a
    fraction of its length, and not at all while the model writes one string
    value. Counted, not timed: parses of a 40 KB argument fed 3 characters
    at a time stay few."""
    from vllm_pyfrontend.parsers import combinators

    code = CODE * 10
    calls = {"n": 0}
    real = combinators.probe

    def counting(*a, **k):
        calls["n"] += 1
        return real(*a, **k)

    for fmt in ("hermes", "qwen3_coder", "deepseek_v4", "kimi_k2", "jamba", "apertus", "step3", "gemma4",
                "muse_glimmer", "pythonic", "cohere_command3", "dots", "hy_v4", "k2_horizon", "minicpm5",
                "minimax_m3"):
        text = STREAMED[fmt]([("run_code", {"code": code})])
        chunks = [text[k : k + 3] for k in range(0, len(text), 3)]
        calls["n"] = 0
        import vllm_pyfrontend.parsers.tool.base as base

        base.probe = counting
        try:
            r, _ = feed_all(lambda: get_tool_parser(fmt, None, TOOLS), chunks)
        finally:
            base.probe = real
        assert r.decoded_calls() == [("run_code", {"code": code.strip() if fmt in STRIPS else code})]
        assert calls["n"] < 40, (fmt, calls["n"])


# ------------------------------------------------ schema typing (XML formats)
SCHEMA_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": {
                    # what Pydantic emits for Optional[dict] / Optional[int]
                    "opt_obj": {"anyOf": [{"type": "object"}, {"type": "null"}], "default": None},
                    "opt_int": {"oneOf": [{"type": "integer"}, {"type": "null"}]},
                    "int_or_str": {"type": ["integer", "string"]},
                    "level": {"enum": [1, 2, 3]},
                    "tags": {"items": {"type": "string"}},
                    "point": {"properties": {"x": {"type": "number"}}},
                    "flag": {"type": "boolean"},
                    "off": {"type": "boolean"},
                    "ratio": {"type": "number"},
                    "text": {"type": "string"},
                },
            },
        },
    }
]

SCHEMA_PARAMS = {
    "opt_obj": ('{"k": [1, 2]}', {"k": [1, 2]}),
    "opt_int": ("null", None),
    "int_or_str": ("7", 7),
    "level": ("2", 2),
    "tags": ('["a", "b"]', ["a", "b"]),
    "point": ('{"x": 1.5}', {"x": 1.5}),
    "flag": ("1", True),
    "off": ("False", False),
    "ratio": ("NaN", "NaN"),  # not JSON: stays text
    "text": ("007", "007"),
}


def _qwen3_params(params: dict[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function=f>\n{body}</function>\n</tool_call>"


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm45", "minimax_m2"])
def test_xml_values_follow_the_schema(fmt: str) -> None:
    raw = {k: v for k, (v, _) in SCHEMA_PARAMS.items()}
    if fmt == "qwen3_coder":
        text = _qwen3_params(raw)
    elif fmt == "glm45":
        args = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in raw.items())
        text = f"<tool_call>f\n{args}</tool_call>"
    else:
        params = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in raw.items())
        text = f'<minimax:tool_call>\n<invoke name="f">\n{params}</invoke>\n</minimax:tool_call>'
    r = run_whole(lambda: get_tool_parser(fmt, None, SCHEMA_TOOLS), text)
    assert r.decoded_calls() == [("f", {k: want for k, (_, want) in SCHEMA_PARAMS.items()})]
    assert run_chunks(lambda: get_tool_parser(fmt, None, SCHEMA_TOOLS), list(text)).key() == r.key()


def test_xml_schema_typing_against_vllm(hf) -> None:
    """vLLM's qwen3_coder agrees on anyOf / oneOf / type lists / enum / boolean
    1; it does not infer ``array`` from ``items`` or ``object`` from
    ``properties`` (those stay strings there): a deliberate difference."""
    from tests.parsers.vllm_ref import vllm_tool_calls

    raw = {k: v for k, (v, _) in SCHEMA_PARAMS.items()}
    _, v_calls = vllm_tool_calls("qwen3_coder", hf, SCHEMA_TOOLS, _qwen3_params(raw))
    ours = {k: want for k, (_, want) in SCHEMA_PARAMS.items()}
    (name, theirs), = v_calls
    differ = {k for k in ours if theirs.get(k) != ours[k]}
    assert differ == {"tags", "point"}, (theirs, ours)
    assert theirs["tags"] == raw["tags"] and theirs["point"] == raw["point"]


# -------------------------------------------------------- format fixes
def test_dsml_misspelled_close_does_not_swallow_the_next_parameter(hf) -> None:
    from tests.parsers.vllm_ref import vllm_tool_calls

    text = (
        f"<{DSML}tool_calls>\n<{DSML}invoke name=\"get_weather\">\n"
        f'<{DSML}parameter name="city" string="true">Paris</{DSML}paramter>\n'
        f'<{DSML}parameter name="days" string="false">3</{DSML}parameter>\n'
        f"</{DSML}invoke>\n</{DSML}tool_calls>"
    )
    make = lambda: get_tool_parser("deepseek_v4", None, TOOLS)  # noqa: E731
    r = run_whole(make, text)
    assert r.decoded_calls() == [("get_weather", {"city": "Paris", "days": 3})]
    for k in range(1, len(text)):
        assert run_chunks(make, [text[:k], text[k:]]).key() == r.key()
    # vLLM also ends the value at the next parameter, but keeps the misspelt
    # tag in it: a deliberate difference
    _, v_calls = vllm_tool_calls("deepseek_v4", hf, TOOLS, text)
    assert v_calls[0][1]["days"] == 3 and v_calls[0][1]["city"].startswith("Paris</")


def test_kimi_name_is_the_last_dotted_segment(hf) -> None:
    from tests.parsers.vllm_ref import vllm_tool_calls

    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.api.search:0"
        '<|tool_call_argument_begin|>{"city": "x"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    r = run_whole(lambda: get_tool_parser("kimi_k2", None, TOOLS), text)
    assert [(n, i) for n, _, i in r.calls] == [("search", "functions.api.search:0")]
    # vLLM strips only the "functions." prefix: a deliberate difference
    _, v_calls = vllm_tool_calls("kimi_k2", hf, TOOLS, text)
    assert v_calls[0][0] == "api.search"


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    ],
    ids=["xml", "json"],
)
def test_qwen3_xml_accepts_both_bodies(text: str, hf) -> None:
    from tests.parsers.vllm_ref import vllm_tool_calls

    make = lambda: get_tool_parser("qwen3_xml", None, TOOLS)  # noqa: E731
    r = run_whole(make, text)
    assert (r.content, r.decoded_calls()) == ("", [("get_weather", {"city": "Paris"})])
    for k in range(1, len(text)):
        assert run_chunks(make, [text[:k], text[k:]]).key() == r.key()
    # vLLM's Python qwen3_xml: the XML body only (the JSON one is no call there,
    # and its text is dropped): a deliberate difference
    _, v_calls = vllm_tool_calls("qwen3_xml", hf, TOOLS, text)
    assert v_calls == (r.decoded_calls() if "<function=" in text else [])


def test_json_arguments_are_sent_as_written() -> None:
    """Deltas of JSON-format arguments are the model's own text, never
    re-serialised; keys, numbers and literals go out whole."""
    text = '<tool_call>{"name": "f", "arguments": {"a":1,  "b":"\\u00e9x", "c": [true, null]}}</tool_call>'
    make = lambda: get_tool_parser("hermes", None, TOOLS)  # noqa: E731
    r, deltas = feed_all(make, list(text))
    args = [t["function"]["arguments"] for d in deltas for t in d.tool_calls if "id" not in t]
    assert "".join(args) == '{"a":1,  "b":"\\u00e9x", "c": [true, null]}'
    # no delta splits a key, a number, a literal or an escape
    joined = ""
    for a in args:
        joined += a
        assert not joined.endswith(('"b', "tr", "\\u00", "\\"))


@pytest.mark.parametrize(
    "fmt, text",
    [
        ("qwen3_coder", "<tool_call><function=get_weather><parameter=city>X</parameter></tool_call>"),
        (
            "deepseek_v4",
            f'<{DSML}tool_calls><{DSML}invoke name="get_weather"><{DSML}parameter name="city" string="true">X'
            f"</{DSML}parameter></{DSML}tool_calls>",
        ),
        ("hy_v3", "<tool_calls><tool_call>get_weather<tool_sep><arg_key>city</arg_key><arg_value>X</arg_value></tool_calls>"),
        ("gemma4", '<|tool_call>call:get_weather{city:<|"|>X<|"|><tool_call|>'),
    ],
)
def test_call_without_its_end_after_complete_parameters(fmt: str, text: str) -> None:
    """The parameters are complete, the call's own end is missing: the call was
    announced while its parameters streamed, so it is completed with them
    (valid JSON), whatever the split; it once kept the unclosed '{"city": "X"'
    when a chunk ended right after the parameter."""
    make = lambda: get_tool_parser(fmt, None, TOOLS)  # noqa: E731
    r = run_whole(make, text)
    assert r.decoded_calls() == [("get_weather", {"city": "X"})]
    for k in range(1, len(text)):
        assert run_chunks(make, [text[:k], text[k:]]).key() == r.key(), k


def test_json_or_text_values_stream_once_they_cannot_be_json() -> None:
    """muse_glimmer's values are JSON where they parse, else text: an open value
    streams only once its beginning rules JSON out."""
    from vllm_pyfrontend.parsers.tool.xml_calls import JsonOrTextTyping

    streams = JsonOrTextTyping().streams
    for raw in ("Paris", "0: a line of code", '"a" and more', '{"a": 1} trailing', "tru e"):
        assert streams("f", "k", None, raw), raw
    for raw in ("", "  ", "123", '"open string', '{"a": 1}', "true", "NaN", "Infinity", "-Inf", "-"):
        assert not streams("f", "k", None, raw), raw


# ------------------------------------------------- nested values (objects, lists)
#: formats whose object / list values stream inside the value (not only strings)
NESTED_STREAMED = ["gemma4", "pythonic", "llama4_pythonic", "olmo3", "lfm2"]
NESTED_LONG = [("run_code", {"days": 2, "nested": {"k": [1, "x", {"code": CODE}], "n": None, "t": [True, 2.5]}})]


@pytest.mark.parametrize("fmt", NESTED_STREAMED)
def test_nested_value_streams_before_the_call_closes(fmt: str) -> None:
    """A long string deep inside an object / list argument flows as it is
    written; the deltas add up to the non-streaming arguments under any split."""
    text = STREAMED[fmt](NESTED_LONG)
    make = lambda: get_tool_parser(fmt, None, TOOLS)  # noqa: E731
    chunks = [text[k : k + 4] for k in range(0, len(text), 4)]
    p = make()
    fed = 0
    early = 0
    deltas = []
    for c in chunks:
        d = p.feed(c)
        fed += len(c)
        deltas.append(d)
        if d is not None:
            early += sum(1 for t in d.tool_calls if "id" not in t and t["function"]["arguments"] and fed < len(text) - 40)
    deltas.append(p.finish())
    result, _ = collect(deltas)
    assert early > 100, early
    assert result.key() == run_whole(make, text).key()
    assert result.decoded_calls() == NESTED_LONG
    rng = random.Random(fmt)
    for _ in range(10):
        assert run_chunks(make, random_char_splits(text, rng)).key() == result.key()


@pytest.mark.parametrize("fmt", ["pythonic", "gemma4"])
def test_nested_values_cut_at_safe_points(fmt: str) -> None:
    """Output cut inside a nested value: the call is completed with what of the
    value was certain (whole items and members, string text), valid JSON."""
    make = lambda: get_tool_parser(fmt, None, TOOLS)  # noqa: E731
    full = STREAMED[fmt]([("run_code", {"nested": {"a": [1, 22, "abc"], "b": {"c": "defg"}}})])
    for k in range(len(full) // 3, len(full)):
        r = run_whole(make, full[:k])
        if not r.calls:  # cut before the arguments began: the text, whole
            assert r.content == full[:k]
            continue
        (name, args), = r.decoded_calls()
        assert name == "run_code" and set(args) <= {"nested"}
        assert run_chunks(make, list(full[:k])).key() == r.key()


@pytest.mark.parametrize("fmt", ["hy_v3", "hy_v4"])
def test_call_end_missing_before_the_section_end(fmt: str) -> None:
    """The call's own end is missing and the section's end follows (``</tool_call``
    reads as the start of ``</tool_calls>``): the section ends at its marker, the
    announced call is completed, and no piece of the marker becomes content."""
    sep = "<tool_sep>" if fmt == "hy_v3" else ""
    text = f"<tool_calls><tool_call>get_weather{sep}<arg_key>city</arg_key><arg_value>X</arg_value></tool_calls> after"
    make = lambda: get_tool_parser(fmt, None, TOOLS)  # noqa: E731
    r = run_whole(make, text)
    assert (r.content, r.decoded_calls()) == (" after", [("get_weather", {"city": "X"})])
    for k in range(1, len(text)):
        assert run_chunks(make, [text[:k], text[k:]]).key() == r.key(), k


# ------------------------------------------------ DSML typed parameters
@pytest.mark.parametrize("fmt, prefix, wrapper", [("deepseek_v4", "｜DSML｜", "tool_calls"),
                                                  ("deepseek_v41", "｜DSML｜ ", "calls")])
def test_dsml_non_string_parameter_nan_stays_text(fmt: str, prefix: str, wrapper: str) -> None:
    """``string="false"`` values are JSON where they parse; NaN is not JSON, so it stays text
    and the arguments stay valid JSON (the spaced V4.1 dialect types values as V4 does)."""
    p = prefix
    params = "".join(f'<{p}parameter name="{k}" string="false">{v}</{p}parameter>\n'
                     for k, v in (("x", "NaN"), ("y", "2"), ("z", "-Infinity")))
    text = f'<{p}{wrapper}>\n<{p}invoke name="f">\n{params}</{p}invoke>\n</{p}{wrapper}>'
    r = run_whole(lambda: get_tool_parser(fmt, None, TOOLS), text)
    assert r.calls[0][1] == '{"x": "NaN", "y": 2, "z": "-Infinity"}'
