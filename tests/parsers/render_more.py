"""Renderers for the tool-call formats whose arguments stream, beyond corpus.RENDER's
(json_calls.py, xml_calls.py, tagged_params.py, gemma.py, channels.py, kimi.py, minimax.py,
step.py, minicpm.py, muse.py, pythonic.py): calls written the way each model writes them, for
tests/parsers/test_streaming_args.py (their case corpora are in tests/parsers/cases)."""

# ruff: noqa: E701, E704, E731
from __future__ import annotations

import json

def _j(a): return json.dumps(a, ensure_ascii=False)
def _obj(n, a, key="arguments"): return f'{{"name": "{n}", "{key}": {_j(a)}}}'
def _arr(calls, key="arguments"): return "[" + ", ".join(_obj(n, a, key) for n, a in calls) + "]"
MORE: dict = {
    "granite": lambda calls: "<|tool_call|>" + _arr(calls),
    "granite4": lambda calls: "\n".join(f"<tool_call>{_obj(n, a)}</tool_call>" for n, a in calls),
    "granite-20b-fc": lambda calls: "\n".join(f"<function_call> {_obj(n, a)}" for n, a in calls),
    "ernie45": lambda calls: "\n".join(f"<tool_call>\n{_obj(n, a)}\n</tool_call>" for n, a in calls),
    "jamba": lambda calls: f"<tool_calls>{_arr(calls)}</tool_calls>",
    "hunyuan_a13b": lambda calls: f"<tool_calls>{_arr(calls)}</tool_calls>",
    "apertus": lambda calls: "<|tools_prefix|>[" + ", ".join(f'{{"{n}": {_j(a)}}}' for n, a in calls) + "]<|tools_suffix|>",
    "internlm": lambda calls: "".join(f"<|action_start|><|plugin|>\n{_obj(n, a, 'parameters')}<|action_end|>" for n, a in calls),
    "gigachat3": lambda calls: "".join(f"<|function_call|>{_obj(n, a)}" for n, a in calls[:1]),
    "longcat": lambda calls: "\n".join(f"<longcat_tool_call>{_obj(n, a)}</longcat_tool_call>" for n, a in calls),
    "phi4_mini_json": lambda calls: "functools" + _arr(calls),
    "xlam": lambda calls: _arr(calls),
    "plamo3": lambda calls: "<|plamo:begin_tool_requests:plamo|>" + "".join(
        f"<|plamo:begin_tool_request:plamo|><|plamo:begin_tool_name:plamo|>{n}<|plamo:end_tool_name:plamo|>"
        f"<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>{_j(a)}"
        f"<|plamo:end_tool_arguments:plamo|><|plamo:end_tool_request:plamo|>" for n, a in calls) + "<|plamo:end_tool_requests:plamo|>",
}
def _v(v): return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
def _q3(calls, wrap=("<tool_call>", "</tool_call>"), nl=True):
    out = []
    for n, a in calls:
        ps = "".join(f"<parameter={k}>\n{_v(v)}\n</parameter>\n" if nl else f"<parameter={k}>{_v(v)}</parameter>\n" for k, v in a.items())
        out.append(f"{wrap[0]}\n<function={n}>\n{ps}</function>\n{wrap[1]}")
    return "\n".join(out)
MORE.update({
    "seed_oss": lambda calls: _q3(calls, ("<seed:tool_call>", "</seed:tool_call>")),
    "mimo": lambda calls: _q3(calls, nl=False),
    "step3": lambda calls: "<｜tool_calls_begin｜>" + "<｜tool_sep｜>".join(
        f'<｜tool_call_begin｜>function<｜tool_sep｜>{n}\n<steptml:invoke name="{n}">\n'
        + "".join(f'<steptml:parameter name="{k}">{_v(v)}</steptml:parameter>\n' for k, v in a.items())
        + "</steptml:invoke><｜tool_call_end｜>" for n, a in calls) + "<｜tool_calls_end｜>",
    "hy_v3": lambda calls: "<tool_calls>" + "".join(
        f"<tool_call>{n}<tool_sep>\n" + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_v(v)}</arg_value>\n" for k, v in a.items())
        + "</tool_call>" for n, a in calls) + "</tool_calls>",
})
P = "｜DSML｜ "
MORE["deepseek_v41"] = lambda calls: f"<{P}calls>\n" + "".join(
    f'<{P}invoke name="{n}">\n' + "".join(
        f'<{P}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">{_v(v)}</{P}parameter>\n' for k, v in a.items())
    + f"</{P}invoke>\n" for n, a in calls) + f"</{P}calls>"
Q = '<|"|>'
def _gv(v):
    if isinstance(v, str): return Q + v + Q
    if isinstance(v, dict): return "{" + ",".join(f"{k}:{_gv(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list): return "[" + ",".join(_gv(x) for x in v) + "]"
    return json.dumps(v)
MORE.update({"gemma4": lambda calls: "".join("<|tool_call>call:" + n + "{" + ",".join(f"{k}:{_gv(v)}" for k, v in a.items()) + "}<tool_call|>" for n, a in calls)})
MORE.update({"muse_glimmer": lambda calls: "<atem:function_calls>\n" + "".join(
    f'<atem:invoke name="{n}">\n' + "".join(f'<atem:parameter name="{k}">{_v(v)}</atem:parameter>\n' for k, v in a.items())
    + "</atem:invoke>\n" for n, a in calls) + "</atem:function_calls>"})
MORE["inkling"] = lambda calls: "".join(
    f'<|message_model|><|content_invoke_tool_json|>{{"name": "{n}", "args": {_j(a)}}}<|end_message|>' for n, a in calls)
MORE["cohere_command3"] = MORE["cohere_command4"] = lambda calls: "<|START_ACTION|>[" + ", ".join(
    f'{{"tool_call_id": "{i}", "tool_name": "{n}", "parameters": {_j(a)}}}' for i, (n, a) in enumerate(calls)
) + "]<|END_ACTION|>"

def _pv(v):
    if isinstance(v, str): return repr(v)
    if isinstance(v, bool): return repr(v)
    if v is None: return "None"
    if isinstance(v, dict): return "{" + ", ".join(f"{k!r}: {_pv(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list): return "[" + ", ".join(_pv(x) for x in v) + "]"
    return repr(v)
def _pc(n, a): return f"{n}(" + ", ".join(f"{k}={_pv(v)}" for k, v in a.items()) + ")"
MORE.update({
    "pythonic": lambda calls: "[" + ", ".join(_pc(n, a) for n, a in calls) + "]",
    "llama4_pythonic": lambda calls: "<|python_start|>[" + ", ".join(_pc(n, a) for n, a in calls) + "]<|python_end|>",
    "olmo3": lambda calls: "<function_calls>\n" + "\n".join(_pc(n, a) for n, a in calls) + "\n</function_calls>",
    "lfm2": lambda calls: "<|tool_call_start|>[" + ", ".join(_pc(n, a) for n, a in calls) + "]<|tool_call_end|>",
})
MORE["functiongemma"] = lambda calls: "".join(
    "<start_function_call>call:" + n + "{" + ",".join(f"{k}:<escape>{_v(v)}<escape>" for k, v in a.items())
    + "}<end_function_call>" for n, a in calls)
O, S, C = "<|open|>", "<|sep|>", "<|close|>"  # kimi_k3
def _t(v): return "string" if isinstance(v, str) else "object"
MORE.update({"kimi_k3": lambda calls: f"{O}tools{S}" + "".join(
    f'{O}call tool="{n}" index="{i}"{S}' + "".join(f'{O}argument key="{k}" type="{_t(v)}"{S}{_v(v)}{C}argument{S}' for k, v in a.items())
    + f"{C}call{S}" for i, (n, a) in enumerate(calls)) + f"{C}tools{S}"})
