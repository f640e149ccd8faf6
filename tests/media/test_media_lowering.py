"""Images in the non-chat API styles, lowered to chat `image_url` parts: the Responses API's
`input_image` parts and the Anthropic Messages API's `image` blocks (base64 and url sources),
as vLLM lowers them; refused with a clear 400 for a model that takes no images."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.api.anthropic.lowering import lower_request
from vllm_pyfrontend.api.anthropic.protocol import MessagesRequest
from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.api.responses.lowering import build_messages

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg=="
DATA_URL = f"data:image/png;base64,{PNG_B64}"
HTTP_URL = "https://images.example.com/cat.jpg"


def _image_url(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


# -- Responses: input_image ------------------------------------------------------------------------

def test_responses_input_image_becomes_image_url_parts():
    items = [{"role": "user", "content": [
        {"type": "input_text", "text": "What is in these?"},
        {"type": "input_image", "image_url": HTTP_URL, "detail": "auto"},
        {"type": "input_image", "image_url": DATA_URL},
    ]}]
    messages = build_messages("Be brief.", items, None, allow_media=True)
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is in these?"},
                                     _image_url(HTTP_URL), _image_url(DATA_URL)]},
    ]
    # text-only messages keep today's form (one string), images or not allowed
    plain = [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]
    assert build_messages(None, plain, None, allow_media=True) == [{"role": "user", "content": "a\nb"}]


def test_responses_input_image_refused_for_a_text_only_model_or_without_a_url():
    items = [{"role": "user", "content": [{"type": "input_image", "image_url": HTTP_URL}]}]
    with pytest.raises(APIError) as e:
        build_messages(None, items, None)
    assert e.value.status == 400 and "'input_image' is not supported by this text-only model" in e.value.message
    for part, words in (({"type": "input_image", "file_id": "file-123"}, "file_id"),
                        ({"type": "input_image"}, "image_url")):
        with pytest.raises(APIError) as e:
            build_messages(None, [{"role": "user", "content": [part]}], None, allow_media=True)
        assert e.value.status == 400 and words in e.value.message
    # an assistant message takes no images
    with pytest.raises(APIError):
        build_messages(None, [{"role": "assistant", "content": [{"type": "input_image", "image_url": HTTP_URL}]}],
                       None, allow_media=True)


# -- Anthropic: image blocks -----------------------------------------------------------------------

def _anthropic(body: dict[str, Any], allow_media: bool = True):
    req = msgspec.convert({"model": "m", "max_tokens": 64, **body}, MessagesRequest)
    return lower_request(req, allow_media=allow_media).messages


def _theirs(body: dict[str, Any]) -> list[dict[str, Any]]:
    from vllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages

    req = AnthropicMessagesRequest.model_validate({"model": "m", "max_tokens": 64, **body})
    chat = AnthropicServingMessages.to_chat_completion_request(req)
    return [{k: v for k, v in dict(m).items() if v is not None} for m in chat.messages]


IMAGE_BODIES = [
    {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Compare"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "image", "source": {"type": "url", "url": HTTP_URL}},
        {"type": "text", "text": "please."}]}]},
    {"system": "You see images.", "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": HTTP_URL}}]}]},
    {"messages": [
        {"role": "user", "content": "Screenshot it."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "done"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}]}]}]},
]


@pytest.mark.parametrize("body", IMAGE_BODIES)
def test_anthropic_image_blocks_lower_as_vllms(body):
    pytest.importorskip("vllm")
    ours = _anthropic(body)
    theirs = _theirs(body)
    assert [m["role"] for m in ours] == [m["role"] for m in theirs]
    for o, t in zip(ours, theirs):
        if isinstance(t.get("content"), list) and o["role"] != "tool":
            assert o["content"] == [dict(p) for p in t["content"]]
        if o["role"] == "tool":
            assert o["content"] == t["content"] and o["tool_call_id"] == t["tool_call_id"]
    first_user = next(m for m in ours if m["role"] == "user" and isinstance(m["content"], list))
    assert any(p["type"] == "image_url" for p in first_user["content"])


def test_anthropic_image_blocks_refused_for_a_text_only_model_and_bad_sources():
    body = IMAGE_BODIES[0]
    with pytest.raises(InvalidRequestError) as e:
        _anthropic(body, allow_media=False)
    assert "messages[0].content[1]: image blocks are not supported by this text-only model" in str(e.value)
    with pytest.raises(InvalidRequestError) as e:
        _anthropic(IMAGE_BODIES[2], allow_media=False)
    assert "images are not supported by this text-only model" in str(e.value)
    for source, words in (({"type": "file", "file_id": "f"}, "'file' is not supported"),
                          ({"type": "url"}, "`url`"),
                          ({"type": "base64", "media_type": "image/png"}, "`data`"),
                          ({"type": "base64", "media_type": "text/plain", "data": "eA=="}, "image type")):
        with pytest.raises(InvalidRequestError) as e:
            _anthropic({"messages": [{"role": "user", "content": [{"type": "image", "source": source}]}]})
        assert words in str(e.value), str(e.value)
    # documents stay refused
    with pytest.raises(InvalidRequestError):
        _anthropic({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]})
