"""mm_features on the wire: what frontend/multimodal/encode.py sends decodes, with vLLM's own
MsgpackDecoder (the engine's), into the same MultiModalFeatureSpec list vLLM's frontend
sends; tensors above the zero-copy threshold travel as extra frames. Plus the processor
cache decision (vLLM's `_get_cache_type` for N frontend workers). No engine."""

from __future__ import annotations

import time

import pytest

from vllm_pyfrontend.engine.types import EngineRequest
from vllm_pyfrontend.engine.wire import LAYOUT_0_32, encode_add
from vllm_pyfrontend.multimodal.encode import FeatureEncoder
from vllm_pyfrontend.multimodal.model import sender_cache_mode

torch = pytest.importorskip("torch")


def _item():
    from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItem

    pixel = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8).to(torch.bfloat16)
    mask = torch.ones(2, 8, 8, dtype=torch.bool)
    num = torch.tensor(2)
    flat = MultiModalFieldConfig.flat("image", [slice(0, torch.tensor(2))])
    batched = MultiModalFieldConfig.batched("image", keep_on_cpu=True)
    elems = {
        "pixel_values": flat.build_elems("pixel_values", pixel)[0],
        "pixel_attention_mask": flat.build_elems("pixel_attention_mask", mask)[0],
        "num_patches": batched.build_elems("num_patches", num.unsqueeze(0))[0],
    }
    return MultiModalKwargsItem(elems)


def test_features_decode_with_vllms_decoder_into_the_same_specs():
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    item = _item()
    is_embed = torch.tensor([False, True, True, False])
    enc = FeatureEncoder()
    features = [
        enc.feature(data=item, modality="image", identifier="h1", offset=3, length=4, is_embed=is_embed, mm_hash="h1"),
        enc.feature(data=None, modality="image", identifier="h2", offset=9, length=4, is_embed=None, mm_hash="h2"),
    ]
    req = EngineRequest(request_id="r1", prompt_token_ids=[1, 2, 3, 5, 5, 5, 5, 6, 7, 5, 5, 5, 5],
                        sampling_params={"max_tokens": 4, "temperature": 0.0}, arrival_time=time.time())
    req.mm_features, req.aux_frames = features, enc.aux
    assert enc.aux, "the pixel values (above 256 bytes) travel out of band"
    frames = [encode_add(req, LAYOUT_0_32), *[bytes(a) for a in enc.aux]]
    got = MsgpackDecoder(EngineCoreRequest).decode(frames)

    want = [
        MultiModalFeatureSpec(data=item, modality="image", identifier="h1",
                              mm_position=PlaceholderRange(3, 4, is_embed), mm_hash="h1"),
        MultiModalFeatureSpec(data=None, modality="image", identifier="h2",
                              mm_position=PlaceholderRange(9, 4), mm_hash="h2"),
    ]
    # vLLM's own frontend encoding of the same specs decodes the same way.
    vllm_frames = MsgpackEncoder().encode(want)
    ref = MsgpackDecoder(list[MultiModalFeatureSpec]).decode(vllm_frames)
    assert len(vllm_frames) == len(frames)
    for g, w, r in zip(got.mm_features, want, ref):
        for spec in (g, r):
            assert (spec.modality, spec.identifier, spec.mm_hash) == (w.modality, w.identifier, w.mm_hash)
            assert (spec.mm_position.offset, spec.mm_position.length) == (w.mm_position.offset, w.mm_position.length)
            if w.mm_position.is_embed is None:
                assert spec.mm_position.is_embed is None
            else:
                assert torch.equal(spec.mm_position.is_embed, w.mm_position.is_embed)
            if w.data is None:
                assert spec.data is None
                continue
            assert set(spec.data) == set(w.data)
            for key, elem in w.data.items():
                assert torch.equal(spec.data[key].data, elem.data), key
                assert spec.data[key].field == elem.field, key


@pytest.mark.parametrize(("gb", "kind", "workers", "engines", "mode"), [
    (4, "lru", 1, 1, "lru"),               # one sender, one engine: the mirror holds (hash only)
    (4, "lru", 2, 1, "processor_only"),     # several workers share the engine's one LRU
    (4, "lru", 1, 2, "processor_only"),     # DP engines: vLLM's engines run processor-only
    (4, "shm", 1, 1, "processor_only"),
    (0, "lru", 1, 1, None),
])
def test_sender_cache_mode(gb, kind, workers, engines, mode):
    assert sender_cache_mode(gb, kind, num_workers=workers, num_engines=engines) == mode
