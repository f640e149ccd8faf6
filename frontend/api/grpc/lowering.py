"""A `GenerateRequest` lowered to prompt ids and one engine sampling map per choice.

The values follow vLLM's gRPC servicer (smg-grpc-servicer's `VllmEngineServicer`, which
`vllm serve --grpc` runs): proto3 zeros mean "unset" where vLLM reads them so (top_p 0 and
repetition_penalty 0 are 1.0, n 0 is 1), temperature defaults to 1.0, an unset max_tokens is
the room left in the context, and the model's generation_config.json contributes only its EOS
ids (vLLM's engine-side `update_from_generation_config`), not its sampling defaults (those are
the OpenAI server's, and the gateway sends its own values).

Everything is checked before anything reaches the engine: a field this proto version does not
know, token ids outside the vocabulary and values out of range are `InvalidRequestError`s,
which the servicer answers with INVALID_ARGUMENT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from vllm_pyfrontend.errors import InvalidRequestError
from vllm_pyfrontend.llm.prompt import check_prompt_ids, truncate_prompt
from vllm_pyfrontend.llm.sampling import (
    GenerationDefaults,
    ModelLimits,
    SamplingOptions,
    check_n,
    lower_choices,
)
from vllm_pyfrontend.llm.structured import lower_structured_outputs


@dataclass(slots=True)
class Lowered:
    prompt_ids: list[int]
    samplings: list[dict[str, Any]]  # one per choice
    opts: SamplingOptions
    logprobs: int | None


def engine_limits(limits: ModelLimits) -> ModelLimits:
    """The worker's limits without generation_config's sampling defaults (EOS ids kept)."""
    return ModelLimits(limits.max_model_len, limits.eos_token_id,
                       GenerationDefaults(sampling={}, eos_token_ids=list(limits.defaults.eos_token_ids)),
                       limits.vocab_size)


def check_known_fields(msg: Message, path: str = "") -> None:
    """Refuse fields this proto does not define, anywhere in the message (vLLM ignores them;
    a gateway speaking a newer proto would otherwise get silently different behaviour)."""
    unknown = unknown_fields.UnknownFieldSet(msg)
    if len(unknown):
        numbers = sorted({f.field_number for f in unknown})
        where = path or msg.DESCRIPTOR.name
        raise InvalidRequestError(f"Unknown field number(s) {numbers} in {where}.", where)
    for field, value in msg.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        name = f"{path}.{field.name}" if path else field.name
        if field.message_type.GetOptions().map_entry:
            continue
        if field.is_repeated:
            for i, item in enumerate(value):
                check_known_fields(item, f"{name}[{i}]")
        else:
            check_known_fields(value, name)


# Request fields this frontend does not serve (vLLM's servicer does): refused, never ignored.
_UNSUPPORTED = {
    "mm_inputs": "multimodal inputs are not supported by this frontend",
    "extra_mm_inputs": "multimodal inputs are not supported by this frontend",
    "media_refs": "media references are not supported by this frontend",
    "kv_transfer_params": "the typed kv_transfer_params (Mooncake) are not supported; use kv_transfer_params_json",
}


def lower_generate(request: Any, limits: ModelLimits, encode) -> Lowered:
    """`request`: a `GenerateRequest`; `limits`: `engine_limits(...)`; `encode(text)`: the
    tokenizer, for a text prompt."""
    check_known_fields(request)
    for name, why in _UNSUPPORTED.items():
        if request.HasField(name) if name != "extra_mm_inputs" else len(request.extra_mm_inputs):
            raise InvalidRequestError(f"{name}: {why}.", name)
    kind = request.WhichOneof("input")
    if kind == "tokenized":
        ids = check_prompt_ids(list(request.tokenized.input_ids), limits.vocab_size, "tokenized.input_ids")
    elif kind == "text":
        ids = encode(request.text)
        if not ids:
            raise InvalidRequestError("The prompt is empty after tokenization.", "text")
    else:
        raise InvalidRequestError("GenerateRequest needs an input: tokenized or text.", "input")

    sp = request.sampling_params
    if sp.HasField("prompt_logprobs"):
        raise InvalidRequestError("prompt_logprobs is not supported by this frontend.",
                                  "sampling_params.prompt_logprobs")
    if sp.HasField("truncate_prompt_tokens"):
        t = sp.truncate_prompt_tokens
        if t < -1 or t == 0:
            raise InvalidRequestError(f"truncate_prompt_tokens must be -1 or >= 1, got {t}.",
                                      "sampling_params.truncate_prompt_tokens")
        ids = truncate_prompt(ids, t, limits.max_model_len)
    if sp.HasField("max_tokens") and sp.max_tokens < 1:
        raise InvalidRequestError(f"max_tokens must be at least 1, got {sp.max_tokens}.",
                                  "sampling_params.max_tokens")

    extra: dict[str, Any] | None = None
    if request.HasField("kv_transfer_params_json"):
        import json

        try:
            kv = json.loads(request.kv_transfer_params_json)
        except ValueError:
            raise InvalidRequestError("kv_transfer_params_json is not JSON.", "kv_transfer_params_json") from None
        if not isinstance(kv, dict):
            raise InvalidRequestError("kv_transfer_params_json must be a JSON object.", "kv_transfer_params_json")
        extra = {"kv_transfer_params": kv}

    temperature = sp.temperature if sp.HasField("temperature") else 1.0
    logprobs = sp.logprobs if sp.HasField("logprobs") else None
    opts = SamplingOptions(
        max_tokens=sp.max_tokens if sp.HasField("max_tokens") else None,
        temperature=temperature,
        top_p=sp.top_p if sp.top_p != 0.0 else 1.0,
        top_k=sp.top_k,
        min_p=sp.min_p,
        seed=sp.seed if sp.HasField("seed") else None,
        presence_penalty=sp.presence_penalty,
        frequency_penalty=sp.frequency_penalty,
        repetition_penalty=sp.repetition_penalty if sp.repetition_penalty != 0.0 else 1.0,
        min_tokens=sp.min_tokens,
        stop=[s for s in sp.stop if s],
        stop_token_ids=list(sp.stop_token_ids),
        ignore_eos=sp.ignore_eos,
        include_stop_str_in_output=sp.include_stop_str_in_output,
        skip_special_tokens=sp.skip_special_tokens,
        spaces_between_special_tokens=sp.spaces_between_special_tokens,
        logprobs=logprobs,
        logit_bias=dict(sp.logit_bias) or None,
        extra_args=extra,
    )
    n = check_n(sp.n or 1, temperature < 1e-5)
    structured = _structured(sp)
    samplings = lower_choices(limits, opts, len(ids), n, logprobs=logprobs, structured=structured)
    return Lowered(ids, samplings, opts, logprobs)


def _structured(sp: Any) -> dict[str, Any] | None:
    kind = sp.WhichOneof("constraint")
    if kind is None:
        return None
    if kind == "choice":
        so: dict[str, Any] = {"choice": list(sp.choice.choices)}
    elif kind == "json_schema":
        so = {"json": sp.json_schema}
    elif kind == "json_object":
        if not sp.json_object:
            return None
        so = {"json_object": True}
    else:  # regex, grammar, structural_tag: the same names in vLLM's StructuredOutputsParams
        so = {kind: getattr(sp, kind)}
    try:
        return lower_structured_outputs(so, None)
    except InvalidRequestError as e:
        raise InvalidRequestError(e.message, f"sampling_params.{kind}") from None
