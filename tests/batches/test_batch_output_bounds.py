"""A batch's output is bounded (the in-process tier, the simulated engine, the `openai` SDK):
past `--batch-max-output-bytes`, or past what is left of its owner's `max_storage_bytes`, an
answer goes to the error file as an `output_too_large` entry with its custom_id, the output file
stays under the cap, and the input is validated line by line (a file of many blank lines and one
request runs)."""

from __future__ import annotations

import pytest

from tests.batches.helpers import by_custom_id, client, entries, line, submit, wait
from tests.inprocess import InProcessStack
from tests.reliability.helpers import MODEL, SERVED

CAP = 3000
OWNER_LIMIT = 4500  # the `small` key's max_storage_bytes: less its input file (~2.4 KB), under CAP


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    files_dir = tmp_path_factory.mktemp("files")
    with InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002",
                         "--served-model-name", SERVED, "--files-dir", str(files_dir),
                         "--batch-max-output-bytes", str(CAP), MODEL]) as s:
        yield s


def test_answers_past_the_output_cap_go_to_the_error_file(stack):
    c = client(stack.base_url)
    bodies = {f"q-{i}": {"model": SERVED, "prompt": f"Question {i}", "max_tokens": 16,
                         "vllm_xargs": {"sim_text": f"Answer {i} " * 8}} for i in range(12)}
    batch = submit(c, "/v1/completions", [line(k, "/v1/completions", v) for k, v in bodies.items()])
    done = wait(c, batch.id)
    assert done.status == "completed", done
    out = by_custom_id(entries(c, done.output_file_id))
    err = by_custom_id(entries(c, done.error_file_id))
    assert set(out) | set(err) == set(bodies) and not set(out) & set(err)
    assert out and err  # some fit, some not
    assert len(c.files.content(done.output_file_id).content) <= CAP
    assert c.files.retrieve(done.output_file_id).bytes <= CAP
    for e in err.values():
        assert e["error"]["code"] == "output_too_large" and "--batch-max-output-bytes" in e["error"]["message"]
    # The first lines, in order, are the ones that fit.
    fitted = sorted(int(k.split("-")[1]) for k in out)
    assert fitted == list(range(len(fitted)))


def test_an_input_of_many_blank_lines_is_read_line_by_line(stack):
    c = client(stack.base_url)
    body = {"model": SERVED, "prompt": "hi", "max_tokens": 2}
    lines = ["" for _ in range(20000)] + [line("only", "/v1/completions", body)]
    done = wait(c, submit(c, "/v1/completions", lines).id)
    assert done.status == "completed" and done.request_counts.total == 1, done


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    files_dir = tmp_path_factory.mktemp("files")
    keys = tmp_path_factory.mktemp("keys") / "keys.yaml"
    keys.write_text(f"- {{name: small, key: key-small, max_storage_bytes: {OWNER_LIMIT}}}\n")
    with InProcessStack(["--engine", "sim", "--workers", "1", "--sim-step-time", "0.002",
                         "--served-model-name", SERVED, "--files-dir", str(files_dir), "--api-keys-file", str(keys),
                         "--batch-max-output-bytes", str(CAP), MODEL]) as s:
        yield s


def test_a_batch_output_fits_in_what_is_left_of_its_owners_storage(keyed):
    c = client(keyed.base_url, "key-small")
    bodies = {f"q-{i}": {"model": SERVED, "prompt": f"Q{i}", "max_tokens": 16,
                         "vllm_xargs": {"sim_text": f"Answer {i} " * 8}} for i in range(12)}
    batch = submit(c, "/v1/completions", [line(k, "/v1/completions", v) for k, v in bodies.items()])
    done = wait(c, batch.id)
    assert done.status == "completed", done
    out = by_custom_id(entries(c, done.output_file_id))
    err = by_custom_id(entries(c, done.error_file_id))
    assert set(out) | set(err) == set(bodies) and out and err
    room = OWNER_LIMIT - c.files.retrieve(batch.input_file_id).bytes
    assert room < CAP
    assert c.files.retrieve(done.output_file_id).bytes <= room
    for e in err.values():
        assert e["error"]["code"] == "output_too_large" and "max_storage_bytes" in e["error"]["message"]
