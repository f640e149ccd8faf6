"""The ``hf`` tool-call and reasoning parsers: a checkpoint's own ``response_template``.

A checkpoint may ship, in ``tokenizer_config.json``, a declarative description of how its
output splits into message fields (Hugging Face's chat response parsing; vLLM 0.32 serves it
as ``--tool-call-parser hf`` / ``--reasoning-parser hf``)::

    "response_template": {
      "start_anchor": "<|im_start|>assistant\\n",
      "fields": {
        "thinking":   {"open": "<think>", "close": "</think>"},
        "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "repeats": true,
                       "content": "json",
                       "transform": {"type": "function",
                                     "function": {"name": "{content.name}",
                                                  "arguments": "{content.arguments}"}}},
        "content":    {}
      }
    }

The language (version 1):

- ``start_anchor`` (a literal or a list of literals) / ``start_anchor_pattern`` (a regex):
  the prompt is cut after its last match, and what the template already wrote of the
  assistant message (an opening ``<think>``) is parsed before the output;
- ``fields``: per field an opening delimiter (``open``: literal(s), ``open_pattern``: regex
  whose named groups are *captures*) and a closing one (``close`` / ``close_pattern``); at
  most one field has no opener: it takes every text outside the other fields (the
  *implicit* field). The earliest delimiter wins (the longest on a tie, an opener before a
  closer); a delimiter that the next text could still complete or extend is held.
- ``content``: how the text of a field becomes its value: ``text`` (stripped unless
  ``content_args.strip`` is false), ``int``, ``float``, ``bool``, ``json`` (with dialect
  knobs ``unquoted_keys``, ``string_delims``, ``allow_non_json``), ``xml-inline`` (a
  ``tag_pattern`` with groups ``key``/``value``, an optional ``value_parser``,
  ``merge_duplicates``) and ``kv-lines``;
- ``transform``: a JSON shape whose whole-string ``{placeholders}`` name the parsed value
  (``{content}``, ``{content.key}``) or a capture; ``transform_each`` applies it per list
  element; ``repeats`` collects a list, ``join`` concatenates strings; ``optional`` (default
  true) and ``defaults``.

Serving routes three fields: ``thinking`` (reasoning), ``content`` and ``tool_calls``; a
template with any other field (or a ``thinking``/``content`` field that is not plain text)
is refused at startup, as is ``hf`` without a template or combined with another parser
(vLLM's rules, its messages). Tool-call arguments are cast by the request's tool schemas
(``"5"`` for an integer parameter is 5), and the arguments text is vLLM's: the JSON of the
cast object.

Streaming: reasoning and content go out as they are generated (a possible delimiter is
held). A tool region whose calls are JSON with the name and the arguments object placed by
the transform (the common case: ``{"name": ..., "arguments": {...}}``, or a name captured
by the opener and the arguments as the whole body) is announced as soon as its name is
known and its arguments object has begun; each argument is then written as it completes
(cast by the schema), and a long string argument streams as it arrives when the schema
cannot cast it to anything else. The deltas concatenate to the same text as the whole
parse. Other tool regions (XML-ish ``xml-inline`` bodies, lists of calls, dialect JSON)
come out whole when they close, as in vLLM.

Deliberate differences from vLLM (pinned in tests/parsers/cases/response_template.py):
a tool region that does not parse is given back as content (vLLM drops it), and a call
already announced when its region turns out malformed (or the output ends inside it) is
completed, its arguments closed into valid JSON.

The modules, one job each: template.py (load, check, serve), values.py (a field's value
from its text), casting.py (schema casts of call arguments), scanner.py (the regions as
they stream), json_walker.py (streamed JSON call arguments), stream.py (the stream, the
``hf`` parsers and their registration).
"""

from __future__ import annotations

from vllm_pyfrontend.parsers.response_template.template import (
    HF,
    TemplateError,
    check_hf_model_dir,
    check_hf_selection,
    load_template,
    serving_template,
    template_of,
)
from vllm_pyfrontend.parsers.response_template.stream import (
    ResponseTemplatePipeline,
    ResponseTemplateStream,
    is_response_template,
    make_response_template_pipeline,
    reasoning_stream,
    tool_stream,
)

__all__ = [
    "HF",
    "ResponseTemplatePipeline",
    "ResponseTemplateStream",
    "TemplateError",
    "check_hf_model_dir",
    "check_hf_selection",
    "is_response_template",
    "load_template",
    "make_response_template_pipeline",
    "reasoning_stream",
    "serving_template",
    "template_of",
    "tool_stream",
]
