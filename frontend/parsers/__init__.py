"""Reasoning and tool-call parsing of model output (streaming).

Layout:
- ``combinators.py``: three-way (Ok / NEED / Fail) parser combinators over a
  growing buffer, ``scan_json`` (a JSON value's raw slice) and ``safe_text``
  (the longest prefix that cannot be part of a marker); ``json_scan.py``
  holds the validating JSON scanner under ``scan_json``.
- ``special.py``: tells real marker tokens from lookalike text using the
  step's token ids.
- ``tool/``: the section engine (``base.py``), the formats, one module per format
  family (its ``__init__`` says which holds which), and the registry by vLLM names
  (``registry.py``, ``get_tool_parser``).
- ``reasoning/``: ``<think>`` styles, reasoning families and their registry
  (``get_reasoning_parser``).
- ``harmony.py`` (gpt-oss) and ``response_template/`` (``hf``, the checkpoint's own
  template): parsers for both flags that are not section grammars.
- ``auto.py``: ``auto`` picks a parser from the chat template / model_type.
- ``catalog.py``: every registered name, listed from the registries (README table,
  ``--help``).
- ``pipeline.py``: ``make_assistant_stream`` composes both for one choice; its
  docstring is the contract for the chat pipeline.

Every parser is an incremental transformer ``feed(text, token_ids=None) ->
AssistantDelta | None`` / ``finish() -> AssistantDelta | None`` whose
accumulated result does not depend on how the output was chunked.
"""
