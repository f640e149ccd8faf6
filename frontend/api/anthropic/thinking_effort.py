"""The reasoning effort of a /v1/messages request with `thinking: {"type": "disabled"}`
(vLLM 0.32's `--anthropic-disabled-thinking-effort`).

"none" turns thinking off for templates that honor it; models that always think, or whose
template refuses "none", need a low effort instead. The flag names the effort, or "auto"
(the default): this worker renders a one-message chat ("Hi") with effort "none" and with each
of Anthropic's efforts (low, medium, high, xhigh, max), once, at the first such request, and
takes "low" when "none" fails to render or renders the same prompt as one of them, else "none"
(vLLM's probe, the same renders). The answer is logged once.
"""

from __future__ import annotations

import logging
from weakref import WeakKeyDictionary

from vllm_pyfrontend.llm.sampling import SamplingOptions
from vllm_pyfrontend.serving.lowering.chat import ChatRequest, lower_chat_prompt

log = logging.getLogger(__name__)

EFFORTS = ("low", "medium", "high", "xhigh", "max")  # vLLM's AnthropicEffort

# state -> the effort "auto" resolved to in this worker (weak: a ServerState that is gone takes its
# answer along, and a later one at the same address is probed again)
_probed: WeakKeyDictionary = WeakKeyDictionary()


async def disabled_thinking_effort(state) -> str:
    """The effort `thinking: disabled` stands for in this worker."""
    configured = state.config.policy.anthropic_disabled_thinking_effort
    if configured != "auto":
        return configured
    effort = _probed.get(state)
    if effort is None:
        effort = _probed[state] = await _probe(state)
        log.info("Anthropic thinking.type=disabled maps to reasoning_effort=%r", effort)
    return effort


async def _probe(state) -> str:
    none_prompt = await _render(state, "none")
    if none_prompt is None:
        return "low"
    for effort in EFFORTS:
        if await _render(state, effort) == none_prompt:
            return "low"
    return "none"


async def _render(state, effort: str) -> list[int] | None:
    request = ChatRequest(messages=[{"role": "user", "content": "Hi"}], options=SamplingOptions(),
                          reasoning_effort=effort)
    try:
        return (await lower_chat_prompt(state, request)).prompt_ids
    except Exception:  # the template refuses this effort
        log.debug("rendering reasoning_effort=%r failed", effort, exc_info=True)
        return None
