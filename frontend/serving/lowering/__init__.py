"""Lowering a generation request, once for every API style.

Each style (OpenAI chat and text completions, Anthropic Messages, Responses, the render routes,
SageMaker's /invocations) turns its own request shape into one typed request, and one lowering
takes it the rest of the way: checks that are the same for every style, the tool plan, the
prompt (chat template and tokenizer, truncation, media), sampling options, structured outputs,
the engine sampling map of every choice and the `RequestRun` that answers it. A new option is
threaded through one place, and the render routes run the same steps as generation up to the
sampling maps, so a request render accepts is one generation accepts, lowered the same way.

- `options.py`: OpenAI's sampling fields -> `llm` `SamplingOptions` (chat and completions).
- `chat.py`: `ChatRequest` and its lowering (chat completions, Messages, Responses, render).
- `completion.py`: `CompletionLowering` (text completions and their render).
"""
