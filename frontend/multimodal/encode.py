"""vLLM's processed multimodal items -> the `mm_features` of an EngineCoreRequest on the wire.

vLLM's frontend encodes `list[MultiModalFeatureSpec]` with its `MsgpackEncoder`
(vllm/v1/serial_utils.py): each spec (a dataclass) is a map of its fields; `data` (a
`MultiModalKwargsItem`) is a map key -> `{"data": nested tensors, "field": [factory, kwargs]}`;
a tensor is `[dtype, shape, data]` where `data` is the raw bytes inline (msgpack ext 3) below
`VLLM_MSGPACK_ZERO_COPY_THRESHOLD` bytes, else the index of an extra ZMQ frame (frame 0 is
the message itself) that carries the bytes out of band; a slice is `[start, stop, step]`.
The engine decodes this with the same `MsgpackDecoder`, so the value built here is plain
msgpack (ormsgpack) plus the list of out-of-band buffers, sent as frames after the payload.

Runs in the multimodal pool (torch is imported there, never on a text-only worker).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ormsgpack

from vllm_pyfrontend import environment

_EXT_RAW_VIEW = 3

# vLLM's MMF_CLASS_TO_FACTORY: field class name -> MultiModalFieldConfig factory.
_FIELD_FACTORIES = {
    "MultiModalFlatField": "flat",
    "MultiModalSharedField": "shared",
    "MultiModalBatchedField": "batched",
}


class FeatureEncoder:
    """Encodes one request's features; `aux` collects the out-of-band buffers. Tensors below
    `threshold` bytes travel inline (default: vLLM's VLLM_MSGPACK_ZERO_COPY_THRESHOLD)."""

    def __init__(self, threshold: int | None = None):
        self.threshold = environment.msgpack_zero_copy_threshold() if threshold is None else threshold
        self.aux: list[Any] = []

    def tensor(self, t: Any) -> list[Any]:
        import torch

        raw = t.flatten().cpu().contiguous().view(torch.uint8).numpy()
        dtype = str(t.dtype).removeprefix("torch.")
        if raw.nbytes < self.threshold:
            data: Any = ormsgpack.Ext(_EXT_RAW_VIEW, raw.tobytes())
        else:
            self.aux.append(raw.data)
            data = len(self.aux)  # frame 0 is the payload
        return [dtype, list(t.shape), data]

    def ndarray(self, a: Any) -> list[Any]:
        import numpy as np

        a = np.ascontiguousarray(a)
        if not a.shape or a.nbytes < self.threshold:
            data: Any = ormsgpack.Ext(_EXT_RAW_VIEW, a.tobytes())
        else:
            self.aux.append(a.data)
            data = len(self.aux)
        return [a.dtype.str, list(a.shape), data]

    def value(self, v: Any) -> Any:
        """Any value vLLM's enc_hook would see inside a feature."""
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, float)):
            return v
        mod = type(v).__module__
        if mod.startswith("torch") and hasattr(v, "dtype") and hasattr(v, "shape"):
            return self.tensor(v)
        if mod.startswith("numpy"):
            if hasattr(v, "shape") and getattr(v, "ndim", 0) > 0:
                return self.ndarray(v)
            return v.item()
        if isinstance(v, slice):
            return [None if x is None else int(x) for x in (v.start, v.stop, v.step)]
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items()}
        if dataclasses.is_dataclass(v):
            return {f.name: self.value(getattr(v, f.name)) for f in dataclasses.fields(v)}
        raise TypeError(f"cannot encode {type(v).__name__} for the engine")

    def item(self, item: Any) -> dict[str, Any] | None:
        """A MultiModalKwargsItem (a mapping key -> MultiModalFieldElem), or None (cached)."""
        if item is None:
            return None
        out = {}
        for key, elem in item.items():
            field = elem.field
            name = _FIELD_FACTORIES.get(type(field).__name__)
            if name is None:
                raise TypeError(f"unsupported multimodal field type {type(field).__name__}")
            kwargs = {f.name: self.value(getattr(field, f.name)) for f in dataclasses.fields(field)}
            out[key] = {"data": None if elem.data is None else self.value(elem.data), "field": [name, kwargs]}
        return out

    def feature(self, *, data: Any, modality: str, identifier: str, offset: int, length: int,
                is_embed: Any, mm_hash: str | None) -> dict[str, Any]:
        """One MultiModalFeatureSpec, its fields in the dataclass's order."""
        return {
            "data": self.item(data),
            "modality": modality,
            "identifier": identifier,
            "mm_position": {"offset": int(offset), "length": int(length),
                            "is_embed": None if is_embed is None else self.value(is_embed)},
            "mm_hash": mm_hash,
        }
