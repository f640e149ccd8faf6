"""Client-chosen strings cannot forge log lines, against the whole stack (supervisor, 2 workers,
the simulated engine, --enable-log-requests): a Responses `request_id` with a newline, a carriage
return and a terminal escape (it names the request in the engine's log of a request it cannot
run), a URL path and header values holding line breaks. Every line the supervisor prints starts
with its speaker's prefix, the client's text shows only escaped, and no raw control or
line-breaking character a client sent reaches the log. Also the escaping itself, and LoRA names
and paths with a NUL byte: 400s before anything reaches the engine."""

from __future__ import annotations

import json
import logging

import httpx
import openai
import pytest

from vllm_pyfrontend.server.log_lines import LogLineFormatter, escape_line, log_text
from tests.reliability.helpers import SERVED, sim_args
from tests.stack import Stack

FORGED = "[supervisor] 00:00:00 ERROR forged by a client"
PREFIXES = ("[supervisor] ", "[engine] ", "[worker 0] ", "[worker 1] ")


@pytest.fixture(scope="module")
def stack():
    s = Stack(sim_args("--enable-log-requests"), ready_timeout=120, env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"})
    yield s
    s.terminate()


def test_client_strings_are_escaped_in_every_log_line(stack):
    client = openai.OpenAI(base_url=stack.base_url + "/v1", api_key="x", max_retries=0, timeout=60)
    rid = f"r\n{FORGED}\r{FORGED}\x1b[2K\u2028{FORGED}"
    try:  # a script the simulated engine cannot run: it logs the request by its id
        client.responses.create(model=SERVED, input="hi", max_output_tokens=4,
                                extra_body={"request_id": rid, "vllm_xargs": {"sim_token_ids": ["x"]}})
    except openai.APIError:
        pass
    with httpx.Client(base_url=stack.base_url, timeout=30) as c:
        for _ in range(2):  # whichever worker
            r = c.get("/v1/models%0A" + FORGED.replace(" ", "%20") + "%0D%1B%5B2K",
                      headers={"User-Agent": f"ua\u2028{FORGED}\u0085".encode()})
            assert r.status_code in (400, 404)
    stack.wait_for(lambda: "Unexpected error pre-processing request" in stack.logs(), 30, "the engine's log line")
    stack.wait_for(lambda: stack.logs().count('"event":"request"') >= 3, 30, "the request log lines")
    lines = stack.logs().splitlines()
    for line in lines:
        assert line.startswith(PREFIXES) or not line.strip(), line
        assert not line.startswith(FORGED), line
        for raw in ("\x1b", "\r", "\u2028", "\u0085", "\x7f"):
            assert raw not in line, line
    assert any("forged by a client" in line for line in lines)  # there, but escaped inside a line


def test_lora_names_and_paths_with_a_nul_byte_are_400(stack):
    with httpx.Client(base_url=stack.base_url, timeout=30) as c:
        for body in ({"lora_name": "a", "lora_path": "/tmp/adapter\x00/../x"}, {"lora_name": "a\x00", "lora_path": "/tmp/a"}):
            r = c.post("/v1/load_lora_adapter", json=body)
            assert r.status_code == 400, r.text
            assert "NUL byte" in r.json()["error"]["message"]


def test_log_text_and_the_formatter():
    assert log_text("plain é 日本") == "plain é 日本"
    assert log_text("a\nb\rc\td\x1be\x7ff\x85g\u2028h\u202ei\\n") == "a\\nb\\rc\\td\\u001be\\u007ff\\u0085g\\u2028h\\u202ei\\n"
    assert log_text("x" * 20, limit=5) == "xxxxx... (15 more characters)"
    # JSON stays JSON
    line = log_text(json.dumps({"k": "a\u2028b\x85"}, ensure_ascii=False))
    assert json.loads(line) == {"k": "a\u2028b\x85"} and "\u2028" not in line
    assert escape_line("a\tb\x1b[0m\r é\u2028".encode()) == "a\tb\\u001b[0m\\r é\\u2028".encode()
    assert escape_line(b"clean \xff bytes") == b"clean \xff bytes"  # untouched unless it must be
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "loaded %s", ("a\nb",), None)
    assert LogLineFormatter("%(levelname)s %(message)s").format(record) == "INFO loaded a\\nb"
