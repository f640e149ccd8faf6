"""POST /tokenize and POST /detokenize with vLLM's request and response shapes."""

from __future__ import annotations

import msgspec
from aiohttp import web

from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.api.openai.schemas import DetokenizeRequest, TokenizeRequest
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.chat.messages import normalize_messages
from vllm_pyfrontend.serving.state import STATE

_json = msgspec.json.encode


async def handle_tokenize(request: web.Request) -> web.Response:
    state = request.app[STATE]
    req: TokenizeRequest = decode_body(await state.read_body(request), TokenizeRequest)
    state.check_model(req.model)
    if (req.prompt is None) == (req.messages is None):
        raise APIError(400, "Give exactly one of `prompt` or `messages`.", "prompt")
    if req.prompt is not None:
        add_special = True if req.add_special_tokens is None else req.add_special_tokens
        ids = state.tokenizer.encode(req.prompt, add_special_tokens=add_special)
    else:
        ids = state.render_and_tokenize(
            normalize_messages(req.messages),
            tools=req.tools,
            add_generation_prompt=req.add_generation_prompt,
            continue_final_message=req.continue_final_message,
            chat_template_kwargs=req.chat_template_kwargs,
        )
        if req.add_special_tokens:
            ids = state.tokenizer.with_special_tokens(ids)
    body = {
        "count": len(ids),
        "max_model_len": state.max_model_len,
        "tokens": ids,
        "token_strs": [state.tokenizer.id_to_token(i) or "" for i in ids] if req.return_token_strs else None,
    }
    return web.Response(body=_json(body), content_type="application/json")


async def handle_detokenize(request: web.Request) -> web.Response:
    state = request.app[STATE]
    req: DetokenizeRequest = decode_body(await state.read_body(request), DetokenizeRequest)
    state.check_model(req.model)
    vocab = state.tokenizer.vocab_size
    bad = [t for t in req.tokens if t < 0 or t >= vocab]
    if bad:
        raise APIError(400, f"Token ids {bad[:5]} are out of vocabulary range (0..{vocab - 1}).", "tokens")
    text = state.tokenizer.decode(req.tokens, skip_special_tokens=False)
    return web.Response(body=_json({"prompt": text}), content_type="application/json")
