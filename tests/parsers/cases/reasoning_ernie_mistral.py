"""Own cases for two reasoning formats: ERNIE 4.5's ``<response>`` answer
wrapper (families.ERNIE45, ``Family.answer_wrapper``) and Mistral's ``[THINK]`` block after answer
text (families.MISTRAL, ``ThinkStyle.reopen``). The harness runs each under every split, so markers
split across chunks are covered by every case here.
"""

from __future__ import annotations

from tests.parsers.cases import ReasoningCase

R = ReasoningCase

REASONING_CASES: list[ReasoningCase] = [
    # ernie45
    R("ernie45", "gap_wrapper_without_end", "abc</think>\n\n<response>\ndef", "abc", "\ndef"),
    R("ernie45", "gap_newline_runs_without_wrapper", "abc</think>\n\ndef\n\n", "abc", "\n\ndef\n\n"),
    R("ernie45", "gap_wrapper_after_answer_text", "abc</think>x<response>def</response>", "abc",
      "x<response>def</response>"),
    R("ernie45", "gap_lone_response_end_is_text", "abc</think>def</response>x", "abc", "def</response>x"),
    R("ernie45", "gap_newline_runs_around_wrapper", "<think>r</think>\n<response>a\n\nb</response>\n\n", "r",
      "a\n\nb"),
    R("ernie45", "gap_unicode_wrapper", "推理\n</think>\n\n<response>答案 😀</response>\n", "推理\n", "答案 😀"),
    R("ernie45", "gap_start_marker_inside_wrapper_is_text", "r</think><response>use <response> tags</response>",
      "r", "use <response> tags"),
    R("ernie45", "gap_second_response_end_is_text", "r</think><response>a</response>b</response>", "r",
      "ab</response>"),
    # mistral
    R("mistral", "gap_two_think_blocks", "a[THINK]r1[/THINK]b[THINK]r2[/THINK]c", "r1r2", "abc"),
    R("mistral", "gap_think_open_after_text", "pre[THINK]reason", "reason", "pre"),
    R("mistral", "gap_newlines_around_block", "pre\n[THINK]r\n[/THINK]\npost", "r", "pre\n\npost"),
    R("mistral", "gap_block_first_then_block", "[THINK]r[/THINK]b[THINK]r2[/THINK]c", "rr2", "bc"),
]

_WRAPPER = ("a <response> opens the answer wrapper only at the start of the answer (after the newline run "
            "following </think>), and it is dropped as it streams; vLLM's Python parser keeps the text as "
            "written unless a <response> and a later </response> are both present, then keeps only the text "
            "between the first <response> and the last </response> (as a stream cannot know)")
DIFFERENCES: dict[str, str] = {
    "reasoning:ernie45:gap_wrapper_without_end": _WRAPPER,
    "reasoning:ernie45:gap_wrapper_after_answer_text": _WRAPPER,
    "reasoning:ernie45:gap_second_response_end_is_text": _WRAPPER,
}
