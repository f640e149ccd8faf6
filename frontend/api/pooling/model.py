"""What the pooling routes know about the served model: its tasks (from the engine) and the
facts vLLM's API server reads from the model config (labels, Matryoshka dimensions, whether a
cross-encoder separates the pair with the tokenizer's pair template)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from vllm_pyfrontend.model_config import read_json_object

log = logging.getLogger(__name__)

# vLLM's `ModelConfig.get_pooling_task` order: the one pooling task the API serves.
_POOLING_PRIORITY = ("embed&token_classify", "embed", "classify", "token_embed", "token_classify", "plugin")
POOLING_TASKS = frozenset(_POOLING_PRIORITY)
# vLLM's SCORE_TYPE_MAP.
SCORE_TYPES = {"embed": "bi-encoder", "classify": "cross-encoder", "token_embed": "late-interaction"}


@dataclass(frozen=True)
class PoolingModel:
    supported_tasks: tuple[str, ...] = ("generate",)
    pooling_task: str | None = None
    id2label: dict[int, str] = field(default_factory=dict)
    num_labels: int = 0
    hidden_size: int | None = None
    matryoshka: bool = False
    matryoshka_dimensions: tuple[int, ...] | None = None
    use_sep_token: bool = True
    # The tokenizer hands the model token type ids (BERT-style cross-encoders).
    token_type_ids: bool = False
    # `--pooler-config`'s use_activation (None: the pooler's default, on).
    use_activation: bool | None = None

    @classmethod
    def load(cls, model_dir: str, supported_tasks: tuple[str, ...],
             pooler_config: dict[str, Any] | None = None,
             hf_overrides: dict[str, Any] | None = None) -> "PoolingModel":
        """From the model's config.json (with the engine's `--hf-overrides` over it, as vLLM
        reads the config) and tokenizer_config.json."""
        pooler_config = pooler_config or {}
        pooler_task = pooler_config.get("task")
        use_activation = pooler_config.get("use_activation")
        config = read_json_object(model_dir, "config.json")
        if hf_overrides:
            config = {**config, **hf_overrides}
        num_labels, id2label = classifier_labels(config)
        mds = config.get("matryoshka_dimensions")
        size = config.get("embedding_size") or config.get("hidden_size")
        use_sep = config.get("use_pad_token")
        if use_sep is None:
            # vLLM's LLM-as-reranker conversion (`method`) joins the pair without a separator
            # unless the config asks for one.
            use_sep = config.get("use_sep_token", config.get("method") is None)
        tok_config = read_json_object(model_dir, "tokenizer_config.json")
        names = tok_config.get("model_input_names")
        if isinstance(names, list):
            type_ids = "token_type_ids" in names
        else:  # transformers' class defaults: BERT's tokenizers return them
            type_ids = str(tok_config.get("tokenizer_class") or "").startswith("Bert")
        return cls(
            use_activation=use_activation if isinstance(use_activation, bool) else None,
            token_type_ids=type_ids,
            supported_tasks=tuple(supported_tasks),
            pooling_task=pooling_task_of(supported_tasks, config.get("architectures") or [],
                                         pooler_task if isinstance(pooler_task, str) else None),
            id2label=id2label,
            num_labels=num_labels,
            hidden_size=size if isinstance(size, int) else None,
            matryoshka=bool(mds) or bool(config.get("is_matryoshka")),
            matryoshka_dimensions=tuple(mds) if isinstance(mds, list) and mds else None,
            use_sep_token=bool(use_sep),
        )

    @property
    def score_type(self) -> str | None:
        """The scoring route's kind, or None where vLLM turns scoring off (a classifier with
        other than one label, a model without a pooling task)."""
        task = self.pooling_task
        if task == "classify" and self.num_labels != 1:
            return None
        return SCORE_TYPES.get(task or "")


def classifier_labels(config: dict[str, Any]) -> tuple[int, dict[int, str]]:
    """(num_labels, id2label) as vLLM's model config has them: Hugging Face's rules (the labels
    of `id2label`, else `num_labels` labels, else two; unnamed labels are `LABEL_<i>`), and
    vLLM's LLM-as-classifier conversion (`method` + `classifier_from_token`: one label for
    `from_2_way_softmax`, else one per token)."""
    id2label: dict[int, str] = {}
    raw = config.get("id2label")
    if isinstance(raw, dict):
        for k, v in raw.items():
            try:
                id2label[int(k)] = str(v)
            except ValueError:
                pass
    num_labels = config.get("num_labels")
    if id2label:
        num_labels = len(id2label)
    elif not isinstance(num_labels, int) or num_labels < 0:
        num_labels = 2  # transformers' PretrainedConfig default
    tokens = config.get("classifier_from_token")
    if config.get("method") is not None and isinstance(tokens, list):
        num_labels = 1 if config.get("method") == "from_2_way_softmax" else len(tokens)
    if len(id2label) != num_labels:  # transformers regenerates the names for a new count
        id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
    return num_labels, id2label


def pooling_task_of(supported: tuple[str, ...], architectures: list[str], pooler_task: str | None) -> str | None:
    """vLLM's `ModelConfig.get_pooling_task`: the pooler config's task, a token classifier's
    own task, else the first supported task in priority order."""
    pooling = [t for t in supported if t in POOLING_TASKS]
    if not pooling:
        return None
    if pooler_task is not None:
        return pooler_task if pooler_task in supported else None
    if "token_classify" in supported and any("ForTokenClassification" in a for a in architectures):
        return "token_classify"
    for task in _POOLING_PRIORITY:
        if task in supported:
            return task
    return None


# vLLM's FALLBACK_SUPPORTED_TASKS: what an engine that cannot say is taken to do.
FALLBACK_TASKS = ("generate",)


async def engine_tasks(engine: Any, timeout: float = 60.0) -> tuple[str, ...]:
    """The engine's tasks, asked as vLLM's API server asks them (the `get_supported_tasks`
    utility call); an engine that does not answer it (the simulated one) generates."""
    from vllm_pyfrontend.engine.client import UtilityError

    try:
        tasks = await engine.call_utility("get_supported_tasks", timeout=timeout)
    except (UtilityError, TimeoutError) as e:
        log.info("engine did not report its tasks (%s): assuming %s", e, FALLBACK_TASKS)
        return FALLBACK_TASKS
    if not isinstance(tasks, (list, tuple)) or not all(isinstance(t, str) for t in tasks):
        log.warning("engine reported tasks as %r: assuming %s", tasks, FALLBACK_TASKS)
        return FALLBACK_TASKS
    return tuple(tasks)
