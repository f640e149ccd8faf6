"""The keys file (`--api-keys-file`): what a valid file holds, every way a file is refused (with
the entry and field named), the command line's check at start, and the snapshot the workers read."""

from __future__ import annotations

import hashlib
import json

import pytest

from vllm_pyfrontend.supervisor.cli import parse_args
from vllm_pyfrontend.tenants.keys_file import (
    KeysFileError, Limits, load_keys_file, parse_entries, publish, read_snapshot,
)


def _write(tmp_path, text: str, name: str = "keys.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_yaml_and_json_entries(tmp_path):
    yaml_path = _write(tmp_path, """
- name: acme
  key: sk-acme
  requests_per_second: 10
  tokens_per_minute: 1000
  max_concurrency: 4
  max_tokens: 256
- name: free
  key_sha256: %s
""" % hashlib.sha256(b"sk-free").hexdigest())
    entries = load_keys_file(yaml_path)
    assert [e.name for e in entries] == ["acme", "free"]
    assert entries[0].digest == hashlib.sha256(b"sk-acme").digest()
    assert entries[0].limits == Limits(10, 1000, 4, 256)
    assert entries[1].digest == hashlib.sha256(b"sk-free").digest() and not entries[1].limits.any
    json_path = _write(tmp_path, json.dumps([{"name": "acme", "key": "sk-acme", "max_tokens": 256.0}]), "keys.json")
    (e,) = load_keys_file(json_path)
    assert e.limits == Limits(max_tokens=256) and isinstance(e.limits.max_tokens, int)
    assert load_keys_file(_write(tmp_path, "", "empty.yaml")) == []


@pytest.mark.parametrize("data, message", [
    ({"name": "a", "key": "k"}, "expected a list"),
    (["a"], "entry 1: expected a mapping"),
    ([{"name": "a", "key": "k", "rate": 3}], "entry 1 (a)"),
    ([{"name": "a", "key": "k", "rate": 3}], "unknown field(s) rate"),
    ([{"key": "k"}], "`name` must be"),
    ([{"name": "a b", "key": "k"}], "`name` must be"),
    ([{"name": "a", "key": "k"}, {"name": "a", "key": "k2"}], "entry 2 (a): duplicate name (also entry 1)"),
    ([{"name": "a", "key": "k"}, {"name": "b", "key": "k"}], "entry 2 (b): duplicate key (also entry 1)"),
    ([{"name": "a", "key": "k"}, {"name": "b", "key_sha256": hashlib.sha256(b"k").hexdigest()}],
     "entry 2 (b): duplicate key"),
    ([{"name": "a", "key": "k", "key_sha256": "0" * 64}], "either `key` or `key_sha256`, not both"),
    ([{"name": "a"}], "missing `key`"),
    ([{"name": "a", "key": "  "}], "`key` must be a non-empty string"),
    ([{"name": "a", "key_sha256": "abc"}], "64 hexadecimal digits"),
    ([{"name": "a", "key": "k", "requests_per_second": 0}],
     "`requests_per_second` must be a whole number of at least 1"),
    ([{"name": "a", "key": "k", "max_tokens": 2.5}], "`max_tokens` must be a whole number"),
    ([{"name": "a", "key": "k", "max_concurrency": True}], "`max_concurrency` must be a whole number"),
    ([{"name": "a", "key": "k", "tokens_per_minute": "100"}], "`tokens_per_minute` must be a whole number"),
    ([{"name": "a", "key": "k", "admin": "yes"}], "`admin` must be true or false"),
])
def test_refused_entries_name_what_is_wrong(data, message):
    with pytest.raises(KeysFileError) as e:
        parse_entries(data, "keys.yaml")
    assert message in str(e.value)


def test_unreadable_and_unparsable_files(tmp_path):
    with pytest.raises(KeysFileError, match="cannot read the keys file"):
        load_keys_file(str(tmp_path / "missing.yaml"))
    with pytest.raises(KeysFileError, match="not valid YAML or JSON"):
        load_keys_file(_write(tmp_path, "- name: a\n  key: [unclosed\n"))


def test_a_key_names_one_tenant(tmp_path):
    path = _write(tmp_path, "- {name: a, key: shared}\n")
    with pytest.raises(KeysFileError, match="the key of `a` is also an --api-key key"):
        load_keys_file(path, ["shared"])


def test_snapshot_round_trip_keeps_no_key(tmp_path):
    entries = parse_entries([{"name": "a", "key": "secret-key", "max_tokens": 5}, {"name": "b", "key": "k2"},
                             {"name": "c", "key": "k3", "admin": True}])
    assert [e.admin for e in entries] == [False, False, True]
    publish(str(tmp_path), entries, 7)
    text = (tmp_path / "tenant-keys.json").read_text()
    assert "secret-key" not in text
    assert oct((tmp_path / "tenant-keys.json").stat().st_mode & 0o777) == "0o600"
    assert read_snapshot(str(tmp_path)) == (7, entries)


def test_command_line_checks_the_file_at_start(tmp_path, capsys):
    bad = _write(tmp_path, "- {name: a, key: k, key_sha256: %s}\n" % ("0" * 64))
    with pytest.raises(SystemExit):
        parse_args(["--engine", "sim", "--api-keys-file", bad, "demo:deepseek-v4"])
    assert "--api-keys-file" in capsys.readouterr().err
    good = _write(tmp_path, "- {name: a, key: k, max_tokens: 3}\n", "good.yaml")
    opts = parse_args(["--engine", "sim", "--api-keys-file", good, "--api-key", "anon", "demo:deepseek-v4"])
    assert opts.policy.api_keys_file == good and opts.api_keys == ["anon"]
