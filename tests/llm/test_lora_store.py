"""llm/lora.py: `--lora-modules` parsing and the adapter list the workers share (two stores on
one file stand for two workers)."""

from __future__ import annotations

import pytest

from vllm_pyfrontend.llm.lora import LoRAAdapter, LoRAModuleError, LoRAModulePath, LoRAStore, parse_lora_modules


def test_parse_lora_modules_as_vllm():
    assert parse_lora_modules(["a=/x", '{"name": "b", "path": "/y", "base_model_name": "m"}', ""]) == [
        LoRAModulePath("a", "/x"), LoRAModulePath("b", "/y", "m")]
    with pytest.raises(LoRAModuleError):
        parse_lora_modules(["{not json"])
    with pytest.raises(LoRAModuleError):
        parse_lora_modules(['{"name": "b"}'])  # no path


def test_two_workers_share_adapters_and_ids(tmp_path):
    path = str(tmp_path / "lora.sqlite")
    w0, w1 = LoRAStore(path), LoRAStore(path)
    a = LoRAAdapter("a", w0.id_for("a"), "/a")
    w0.put(a)
    assert w1.get("a") == a and a.wire() == ["a", a.int_id, "/a", None, False, False]
    b_id = w1.id_for("b")
    assert b_id != a.int_id
    w1.put(LoRAAdapter("b", b_id, "/b", "base"))
    assert [x.name for x in w0.all()] == ["a", "b"]
    # An in-place reload keeps its id (and place); an unloaded name gets a new id later.
    assert w1.id_for("a") == a.int_id
    w1.put(LoRAAdapter("a", a.int_id, "/a2", load_inplace=True))
    assert [(x.name, x.path) for x in w0.all()] == [("a", "/a2"), ("b", "/b")]
    assert w0.remove("a") and not w1.remove("a") and w1.get("a") is None
    assert w1.id_for("a") not in (a.int_id, b_id)


def test_claim_once_per_deployment(tmp_path):
    path = str(tmp_path / "lora.sqlite")
    w0, w1 = LoRAStore(path), LoRAStore(path)
    assert w0.claim_once("static") and not w1.claim_once("static") and w1.claimed("static")
    w1.release("static")
    assert w1.claim_once("static")
