"""More XML-style formats: ling3, poolside_v1 (GLM), step3p5, seed_oss, mimo (Qwen3-Coder kin),
step3, minicpm5, minimax_m3, muse_glimmer."""

from __future__ import annotations

import html
import json
from typing import Any

from tests.parsers.cases import Calls, ToolCase
from tests.parsers.cases._builder import standard, xml_value
from tests.parsers.corpus import glm45, qwen3_coder


def _strings(calls: Calls) -> Calls:
    return [(n, {k: xml_value(v) for k, v in a.items()}) for n, a in calls]


def seed_oss(calls: Calls) -> str:
    return qwen3_coder(calls).replace("<tool_call>", "<seed:tool_call>").replace("</tool_call>", "</seed:tool_call>")


def mimo(calls: Calls) -> str:
    blocks = []
    for n, a in calls:
        params = "".join(f"<parameter={k}>{xml_value(v)}</parameter>\n" for k, v in a.items())
        blocks.append(f"<tool_call>\n<function={n}>\n{params}</function>\n</tool_call>")
    return "\n".join(blocks)


def step3(calls: Calls) -> str:
    inner = "".join(
        '<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="%s">%s</steptml:invoke><｜tool_call_end｜>'
        % (n, "".join(f'<steptml:parameter name="{k}">{xml_value(v)}</steptml:parameter>' for k, v in a.items()))
        for n, a in calls
    )
    return f"<｜tool_calls_begin｜>{inner}<｜tool_calls_end｜>"


def minicpm5(calls: Calls) -> str:
    return "\n".join(
        f'<function name="{n}">'
        + "".join(f'<param name="{k}">{html.escape(xml_value(v), quote=False)}</param>' for k, v in a.items())
        + "</function>"
        for n, a in calls
    )


NS = "]<]minimax[>["


def _m3_elem(k: str, v: Any) -> str:
    if isinstance(v, dict):
        return f"{NS}<{k}>" + "".join(_m3_elem(kk, vv) for kk, vv in v.items()) + f"{NS}</{k}>"
    if isinstance(v, list):
        return f"{NS}<{k}>" + "".join(_m3_elem("item", x) for x in v) + f"{NS}</{k}>"
    return f"{NS}<{k}>{xml_value(v)}{NS}</{k}>"


def minimax_m3(calls: Calls) -> str:
    out = [f"{NS}<tool_call>"]
    for n, a in calls:
        out.append(f'{NS}<invoke name="{n}">')
        out.extend(_m3_elem(k, v) for k, v in a.items())
        out.append(f"{NS}</invoke>")
    out.append(f"{NS}</tool_call>")
    return "\n".join(out)


def muse(calls: Calls) -> str:
    out = ["<atem:function_calls>"]
    for n, a in calls:
        out.append(f'<atem:invoke name="{n}">')
        out.extend(f'<atem:parameter name="{k}">{json.dumps(v, ensure_ascii=False)}</atem:parameter>'
                   for k, v in a.items())
        out.append("</atem:invoke>")
    out.append("</atem:function_calls>")
    return "\n".join(out)


M3_NESTED: Calls = [("run_code", {"nested": {"a": "x", "d": {"e": "-1.5"}}, "flags": [1, 2],
                                  "code": 'print("a")\n\tif x < 3: return {"k": [1]}'})]
M3_EXPECT: Calls = [("run_code", {"nested": {"a": "x", "d": {"e": "-1.5"}}, "flags": ["1", "2"],
                                  "code": 'print("a")\n\tif x < 3: return {"k": [1]}'})]

TOOL_CASES = [
    *standard("ling3", glm45, broken="<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call> tail"),
    *standard("poolside_v1", glm45,
              broken="<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call> tail"),
    *standard("step3p5", qwen3_coder, broken="<tool_call>\n<func=f>\n</function>\n</tool_call> tail"),
    *standard("seed_oss", seed_oss, broken="<seed:tool_call>\n<func=f>\n</function>\n</seed:tool_call> tail"),
    *standard("mimo", mimo, broken="<tool_call>\n<func=f>\n</function>\n</tool_call> tail"),
    ToolCase("mimo", "value_kept_verbatim", "<tool_call>\n<function=search>\n<parameter=city>\n Paris \n</parameter>\n"
             "</function>\n</tool_call>", "", [("search", {"city": "\n Paris \n"})]),
    *standard("step3", step3,
              broken='<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke nam="f">'
                     '</steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜> tail'),
    ToolCase("step3", "string_whitespace_kept_others_typed",
             '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">'
             '<steptml:parameter name="city"> Paris </steptml:parameter><steptml:parameter name="days"> 3 '
             '</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>', "",
             [("get_weather", {"city": " Paris ", "days": 3})]),
    *standard("minicpm5", minicpm5, broken='<function name="f"><param>1</param></function> tail'),
    ToolCase("minicpm5", "cdata_value",
             '<function name="run_code"><param name="code"><![CDATA[if a < b && c: pass]]></param></function>', "",
             [("run_code", {"code": "if a < b && c: pass"})]),
    *standard("minimax_m3", minimax_m3, nested=M3_NESTED, expect=lambda c: M3_EXPECT if c == M3_NESTED else c,
              broken=f'{NS}<tool_call>\n{NS}<invoke name="f">\n{NS}<a>1{NS}</b>\n{NS}</invoke>\n{NS}</tool_call> tail'),
    ToolCase("minimax_m3", "repeated_element_is_list",
             f'{NS}<tool_call>{NS}<invoke name="search">{NS}<city>a{NS}</city>{NS}<city>b{NS}</city>'
             f'{NS}</invoke>{NS}</tool_call>', "", [("search", {"city": ["a", "b"]})]),
    *standard("muse_glimmer", muse,
              broken='<atem:function_calls>\n<atem:invoke>\n</atem:invoke>\n</atem:function_calls> tail'),
]

_AFTER = "we keep text after the calls as content; vLLM drops it"
_TRUNC = "a call cut off by the end of output comes back as content; vLLM emits the parameters it saw"
_BROKEN = "a malformed call block comes back as content; vLLM drops it"
_MUSE = ("vLLM returns unframed ATEM markup (no <|start|>assistant to=…<|message|> channel header) as content "
         "as well as the calls; we give the calls only (channel framing is not parsed here)")
_STEP3_WS = ("string values keep their whitespace (it is data for exact-match edit tools: vLLM's newer "
             "step3 tests, TestStep3ParameterWhitespace); the installed vLLM strips every value")
DIFFERENCES: dict[str, str] = {
    **{f"tool:{p}:text_before_after": _AFTER for p in ("ling3", "poolside_v1", "step3p5", "seed_oss", "mimo",
                                                       "minimax_m3")},
    # ling3 / step3p5 / seed_oss: a truncated call is completed (tool/base.py's commit rule: its name
    # went out while streaming), as vLLM does: see committed_calls.py
    **{f"tool:{p}:malformed_truncated": _TRUNC for p in ("mimo", "minimax_m3")},
    **{f"tool:{p}:malformed_broken": _BROKEN for p in ("ling3", "step3p5", "seed_oss", "mimo", "minimax_m3")},
    "tool:step3:nested_escaped": "object parameters are typed by the schema here; vLLM's step3 casts only "
                                 "scalars and leaves the object as its JSON text (and its [^<]* value pattern "
                                 "cannot hold '<')",
    "tool:step3:string_whitespace_kept_others_typed": _STEP3_WS,
    "tool:step3:text_before_after": "content keeps the model's text, the whitespace next to the call block is "
                                    "framing; vLLM joins the parts before and after as they are",
    "tool:minicpm5:text_before_after": "we keep text around the calls as content; vLLM returns no content "
                                       "when there are calls",
    **{f"tool:muse_glimmer:{c}": _MUSE for c in ("single", "parallel", "nested_escaped", "empty_args", "unicode",
                                                 "text_before_after")},
}

EXTRA_TOKENS = ["<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>",
                "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>", "<｜tool_call_begin｜>", "<｜tool_call_end｜>",
                "<｜tool_sep｜>", "<|im_start|>", "<|im_end|>", "<seed:bos>", "<seed:eos>"]  # fmt: skip
