"""A hostile tenant against the real stack: `frontend-supervisor` as a subprocess (tests/stack.py)
with two workers on the simulated engine, a keys file, with and without `--root-path /llm`,
every call through the official `openai` SDK (no retries; the routes it has no method for
through its generic `post`/`get`). The in-process tier has the full route matrix
(tests/tenants/test_hostile_routes.py); here the same guarantees hold across two worker
processes, where an abort, a quota or a stored object must reach the other worker:

- without a key every route but the public ones (`PUBLIC_ROUTES`) is a 401;
- another tenant's abort (its wildcard, the first tenant's ids) ends none of the first
  tenant's streams; an admin key's wildcard ends them;
- a background response holds its tenant's `max_concurrency` slot until its run ends;
- batch lines hold the owner's `max_tokens` (more asked: the line's answer is a 400 in the
  error file) and are charged against its tokens per minute;
- tokens per minute are reserved at admission (prompt + every choice's `max_tokens`);
- beam search and pooling are charged (pooling on a deployment of its own in this process,
  tests/inprocess.py: the simulated engine as a pooling model, `--runner pooling`, which serves
  no generation); /metrics names tenants only to an admin key;
- another tenant's file, batch or stored response is a 404; uploads past a tenant's
  `max_storage_bytes` are a 413.

Timing: the engine steps every `STEP` seconds; a "long" generation is `LONG` tokens (about
2 s), far longer than an abort or a second request takes to arrive, and every wait polls
with a deadline.
"""

from __future__ import annotations

import io
import json
import time

import httpx
import openai
import pytest

from tests.batches.helpers import by_custom_id, entries, jsonl, line, wait
from tests.inprocess import InProcessStack
from tests.reliability.helpers import SERVED, sim_args, wait_all_serving
from tests.stack import Stack
from vllm_pyfrontend.server.middleware import PUBLIC_ROUTES

STEP = 0.01  # seconds per engine step
LONG = 200  # tokens of a generation that must outlive what the test does meanwhile (~2 s)
CHAT_PROMPT = 84  # prompt tokens of one "Hello" user message (the demo model's chat template)

KEYS = """
- {name: alice, key: key-alice}
- {name: bob, key: key-bob}
- {name: ops, key: key-ops, admin: true}
- {name: single, key: key-single, max_concurrency: 1}
- {name: capped, key: key-capped, max_tokens: 16, tokens_per_minute: %d}
- {name: meter, key: key-meter, tokens_per_minute: 300}
- {name: beam, key: key-beam, tokens_per_minute: 33}
- {name: small, key: key-small, max_storage_bytes: 1000}
""" % (3 * (CHAT_PROMPT + 16) + (CHAT_PROMPT + 16) // 2)  # three capped chat answers fit, a fourth not

POOL_KEYS = """
- {name: pool-a, key: key-pool-a, tokens_per_minute: 4}
- {name: pool-b, key: key-pool-b, tokens_per_minute: 4}
"""

# The SDK sends no Authorization header for a call given this (its way to omit the api key).
NO_KEY = {"Authorization": openai.Omit()}

# Routes that ask for a key (besides every other non-public path); the public ones are
# PUBLIC_ROUTES. /abort_requests is the dev-mode route (VLLM_SERVER_DEV_MODE=1 below).
GUARDED = [
    ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/v1/embeddings"),
    ("POST", "/v1/responses"), ("GET", "/v1/responses/resp_x"), ("POST", "/v1/messages"),
    ("POST", "/v1/files"), ("GET", "/v1/files"), ("GET", "/v1/files/file-x/content"),
    ("POST", "/v1/batches"), ("GET", "/v1/batches"), ("GET", "/v1/models"),
    ("POST", "/invocations"), ("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/pooling"),
    ("POST", "/classify"), ("POST", "/score"), ("POST", "/rerank"), ("POST", "/v1/score"), ("POST", "/v1/rerank"),
    ("POST", "/abort_requests"), ("POST", "/inference/v1/abort_requests"), ("POST", "/inference/v1/generate"),
]
ABORT_ROUTES = ("/inference/v1/abort_requests", "/abort_requests")


class Clients:
    """The SDK clients of one stack, by key: `v1` at <root>/v1, `root` at <root> (the routes
    outside /v1). A key of None: the calls must pass NO_KEY (the SDK insists on one otherwise)."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self._made: dict[tuple[str | None, bool], openai.OpenAI] = {}

    def get(self, key: str | None, root: bool = False) -> openai.OpenAI:
        made = self._made.get((key, root))
        if made is None:
            url = self.base_url + ("" if root else "/v1")
            made = self._made[(key, root)] = openai.OpenAI(base_url=url, api_key=key or "unused", max_retries=0,
                                                           timeout=60)
        return made

    def v1(self, key: str | None) -> openai.OpenAI:
        return self.get(key)

    def root(self, key: str | None) -> openai.OpenAI:
        return self.get(key, root=True)

    def close(self) -> None:
        for c in self._made.values():
            c.close()


def _start(args: list[str], root: str = "", env: dict[str, str] | None = None):
    s = Stack(args, env=env)
    try:
        wait_all_serving(s)
    except BaseException:
        s.stop()
        raise
    s.root = root
    s.clients = Clients(s.base_url + root)
    return s


@pytest.fixture(scope="module", params=["", "/llm"], ids=["no-root-path", "root-path"])
def stack(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(KEYS)
    root = request.param
    args = sim_args("--api-keys-file", str(path), "--enable-scale-out", *(["--root-path", root] if root else []),
                    workers=2, step=STEP)
    s = _start(args, root, env={"VLLM_SERVER_DEV_MODE": "1"})
    yield s
    s.clients.close()
    s.terminate()


@pytest.fixture(scope="module")
def pooling_stack(tmp_path_factory):
    """The simulated engine as a pooling model (`--runner pooling`): pooling needs a deployment
    of its own."""
    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(POOL_KEYS)
    s = InProcessStack(sim_args("--api-keys-file", str(path), "--runner", "pooling", workers=1, step=STEP))
    s.root = ""
    s.clients = Clients(s.base_url)
    yield s
    s.clients.close()
    s.terminate()


# -- helpers ---------------------------------------------------------------------------------------

def _call(stack, method: str, path: str, key: str | None, body=None) -> tuple[int, str]:
    """(status, body text) of `method path` (a path as the app routes it, without the root
    path) through the SDK's generic client; `key` None sends no key."""
    v1 = path.startswith("/v1/")
    client = stack.clients.get(key, root=not v1)
    sub = path[3:] if v1 else path
    options = {"headers": NO_KEY} if key is None else {}
    try:
        if method == "GET":
            r = client.get(sub, cast_to=httpx.Response, options=options)
        else:
            r = client.post(sub, cast_to=httpx.Response, body={} if body is None else body, options=options)
        return r.status_code, r.text
    except openai.APIStatusError as e:
        return e.status_code, e.response.text


def _chat(client: openai.OpenAI, **kw):
    kw.setdefault("messages", [{"role": "user", "content": "Hello"}])
    return client.chat.completions.create(model=SERVED, **kw)


def _rate_limited(e: openai.RateLimitError, kind: str) -> str:
    assert e.status_code == 429, e
    assert e.body["code"] == "rate_limit_exceeded" and e.body["type"] == kind, e.body
    return e.body["message"]


def _poll(pred, timeout: float, what: str, stack):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}\n{stack.logs()}"
        time.sleep(0.1)


def _streams(stack, key: str):
    """A long streaming chat completion and a long streaming /inference/v1/generate of `key`'s,
    each read to its first event: (chat iterator, its first chunk, generate iterator, its first event)."""
    chat = iter(_chat(stack.clients.v1(key), max_tokens=LONG, stream=True, stream_options={"include_usage": True},
                      extra_body={"ignore_eos": True}))
    gen = iter(stack.clients.root(key).post(
        "/inference/v1/generate", cast_to=object, stream=True, stream_cls=openai.Stream[object],
        body={"model": SERVED, "token_ids": [1, 2, 3], "stream": True,
              "sampling_params": {"max_tokens": LONG, "ignore_eos": True}}))
    return chat, next(chat), gen, next(gen)


def _chat_end(first, rest) -> tuple[list[str], int]:
    """A streamed chat completion's finish reasons and completion tokens (its usage chunk)."""
    chunks = [first, *rest]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage is not None]
    return finish, usage[-1].completion_tokens if usage else -1


def _generate_end(first, rest) -> tuple[list[str], int]:
    """A streamed /inference/v1/generate's finish reasons and the token ids it answered."""
    events = [first, *rest]
    choices = [c for e in events for c in e.get("choices") or []]
    return [c["finish_reason"] for c in choices if c.get("finish_reason")], sum(len(c.get("token_ids") or [])
                                                                                for c in choices)


# -- 1. routes -------------------------------------------------------------------------------------

def test_without_a_key_every_route_but_the_public_ones_is_401(stack):
    assert not {p for _, p in GUARDED} & PUBLIC_ROUTES
    for method, path in GUARDED:
        for key in (None, "key-wrong"):
            status, text = _call(stack, method, path, key)
            assert status == 401, (stack.root, method, path, key, status, text[:300])
    # The SDK's own methods get the same 401.
    nokey = stack.clients.v1(None)
    for send in (lambda: _chat(nokey, max_tokens=2, extra_headers=NO_KEY),
                 lambda: nokey.completions.create(model=SERVED, prompt="Hi", max_tokens=2, extra_headers=NO_KEY),
                 lambda: nokey.embeddings.create(model=SERVED, input="Hi", extra_headers=NO_KEY),
                 lambda: nokey.responses.create(model=SERVED, input="Hi", extra_headers=NO_KEY),
                 lambda: nokey.files.list(extra_headers=NO_KEY),
                 lambda: nokey.batches.list(extra_headers=NO_KEY)):
        with pytest.raises(openai.AuthenticationError):
            send()
    # The public routes answer without a key.
    for path in sorted(PUBLIC_ROUTES):
        status, text = _call(stack, "GET", path, None)
        assert status == 200, (stack.root, path, status, text[:300])
    # With a key the guarded routes answer (the 401 is the key's, not a missing route's).
    assert _call(stack, "POST", "/tokenize", "key-bob", {"model": SERVED, "prompt": "Hello"})[0] == 200
    assert _call(stack, "POST", "/invocations", "key-bob", {"model": SERVED, "prompt": "Hello", "max_tokens": 2})[0] == 200
    assert _call(stack, "GET", "/v1/models", "key-bob")[0] == 200


# -- 2. aborts -------------------------------------------------------------------------------------

def test_another_tenants_abort_ends_none_of_a_tenants_streams_but_an_admins_wildcard_does(stack):
    chat, chat_first, gen, gen_first = _streams(stack, "key-alice")
    chat_id, gen_id = chat_first.id, gen_first["request_id"]
    for path in ABORT_ROUTES:
        for ids in (["*"], [gen_id], [chat_id], [gen_id, chat_id, "*"]):
            status, text = _call(stack, "POST", path, "key-bob", {"request_ids": ids})
            assert status == 200, (path, ids, status, text)
    status, text = _call(stack, "POST", "/abort_requests", "key-bob", {"request_ids": []})  # dev mode: "all"
    assert status == 200, text
    aborted = time.monotonic()
    chat_finish, chat_tokens = _chat_end(chat_first, chat)
    gen_finish, gen_tokens = _generate_end(gen_first, gen)
    ran_on = time.monotonic() - aborted
    assert (chat_finish, chat_tokens) == (["length"], LONG), (chat_finish, chat_tokens)
    assert (gen_finish, gen_tokens) == (["length"], LONG), (gen_finish, gen_tokens)
    # (the streams were still running well after the aborts arrived: they had every chance to act)
    assert ran_on > 0.5, ran_on

    # An admin key's wildcard ends every tenant's requests, whichever worker runs them.
    chat, chat_first, gen, gen_first = _streams(stack, "key-alice")
    status, text = _call(stack, "POST", "/inference/v1/abort_requests", "key-ops", {"request_ids": ["*"]})
    assert status == 200, text
    chat_finish, chat_tokens = _chat_end(chat_first, chat)
    gen_finish, gen_tokens = _generate_end(gen_first, gen)
    assert chat_finish == ["abort"] and chat_tokens < LONG, (chat_finish, chat_tokens)
    assert gen_finish == ["abort"] and gen_tokens < LONG, (gen_finish, gen_tokens)


# -- 3. background responses -----------------------------------------------------------------------

def test_a_background_response_holds_the_tenants_concurrency_slot_until_its_run_ends(stack):
    single = stack.clients.v1("key-single")
    r = single.responses.create(model=SERVED, input="Hello", max_output_tokens=LONG, background=True,
                                extra_body={"ignore_eos": True})
    assert r.status in ("queued", "in_progress"), r
    with pytest.raises(openai.RateLimitError) as e:
        _chat(single, max_tokens=2)
    assert "Concurrency limit" in _rate_limited(e.value, "requests")
    with pytest.raises(openai.RateLimitError):
        single.responses.create(model=SERVED, input="Hello", max_output_tokens=2, background=True)
    # Both refusals came while the first response was still running.
    assert single.responses.retrieve(r.id).status in ("queued", "in_progress")
    done = _poll(lambda: (x := single.responses.retrieve(r.id)).status not in ("queued", "in_progress") and x,
                 30, "the background response", stack)
    assert done.status == "incomplete" and done.usage.output_tokens == LONG, done

    def served():
        try:
            return _chat(single, max_tokens=2).usage.completion_tokens == 2
        except openai.RateLimitError:
            return False

    _poll(served, 10, "the slot given back", stack)


# -- 4. batch lines --------------------------------------------------------------------------------

def test_batch_lines_hold_the_owners_max_tokens_and_are_charged(stack):
    capped = stack.clients.v1("key-capped")
    body = {"model": SERVED, "messages": [{"role": "user", "content": "Hello"}], "ignore_eos": True}
    lines = [line(f"asked-{i}", "/v1/chat/completions", {**body, "max_tokens": 120}) for i in range(2)]
    lines += [line(f"unset-{i}", "/v1/chat/completions", body) for i in range(3)]
    f = capped.files.create(file=("input.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    b = capped.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    b = wait(capped, b.id, timeout=60)
    assert b.status == "completed", b
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (5, 3, 2), b
    # Lines asking past the tenant's max_tokens are answered with a 400 naming the limit (as
    # online; README: "more is a 400 naming the limit"); lines that ask nothing are capped.
    errors = by_custom_id(entries(capped, b.error_file_id))
    assert set(errors) == {"asked-0", "asked-1"}, errors
    for e in errors.values():
        assert e["response"]["status_code"] == 400, e
        err = e["response"]["body"]["error"]
        assert err["param"] == "max_tokens" and "limit of 16" in err["message"], err
    out = by_custom_id(entries(capped, b.output_file_id))
    assert set(out) == {"unset-0", "unset-1", "unset-2"}, out
    for o in out.values():
        usage = o["response"]["body"]["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (CHAT_PROMPT, 16), usage
    # The three answers (3 x 100 tokens) were charged: a fourth request's 100 do not fit in 350.
    with pytest.raises(openai.RateLimitError) as e:
        _chat(capped)
    assert "tokens per min" in _rate_limited(e.value, "tokens")


# -- 5. tokens per minute at admission -------------------------------------------------------------

def test_tokens_per_minute_are_reserved_at_admission(stack):
    meter = stack.clients.v1("key-meter")
    # 20 prompts x 8 choices x 16 tokens = 2,560 tokens at most: past 300 before anything runs.
    with pytest.raises(openai.RateLimitError) as e:
        meter.completions.create(model=SERVED, prompt=[f"Prompt number {i}" for i in range(20)], n=8, max_tokens=16,
                                 extra_body={"ignore_eos": True})
    assert "tokens per min" in _rate_limited(e.value, "tokens")
    # Nothing ran, nothing was charged: a small request fits.
    r = meter.completions.create(model=SERVED, prompt="Hello", max_tokens=4, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 4


# -- 6. beam search, pooling, metrics --------------------------------------------------------------

def test_beam_search_is_charged(stack):
    beam = stack.clients.v1("key-beam")
    r = beam.completions.create(model=SERVED, prompt="Hello", n=2, max_tokens=16,
                                extra_body={"use_beam_search": True, "ignore_eos": True})
    assert [c.finish_reason for c in r.choices] == ["length", "length"]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (1, 32), r.usage  # the tenant's 33 exactly
    # The 33 were charged: the minute's tokens are spent, the next request is refused at admission.
    with pytest.raises(openai.RateLimitError) as e:
        beam.completions.create(model=SERVED, prompt="Hello", max_tokens=16)
    assert "tokens per min" in _rate_limited(e.value, "tokens")


def test_pooling_is_charged(pooling_stack):
    # /v1/embeddings: four one-token inputs, the tenant's 4 tokens; charged, the minute's tokens
    # are spent and the next request is refused at admission.
    a = pooling_stack.clients.v1("key-pool-a")
    r = a.embeddings.create(model=SERVED, input=["Hello"] * 4)
    assert len(r.data) == 4 and r.usage.prompt_tokens == 4, r.usage
    with pytest.raises(openai.RateLimitError) as e:
        a.embeddings.create(model=SERVED, input=["Hello"] * 4)
    assert "tokens per min" in _rate_limited(e.value, "tokens")
    # /pooling: the same.
    b = pooling_stack.clients.root("key-pool-b")
    out = b.post("/pooling", cast_to=object, body={"model": SERVED, "input": ["Hello"] * 4})
    assert len(out["data"]) == 4 and out["usage"]["prompt_tokens"] == 4, out["usage"]
    with pytest.raises(openai.RateLimitError) as e:
        b.post("/pooling", cast_to=object, body={"model": SERVED, "input": ["Hello"] * 4})
    assert "tokens per min" in _rate_limited(e.value, "tokens")


def test_metrics_name_tenants_only_to_an_admin_key(stack):
    r = stack.clients.v1("key-alice").completions.create(model=SERVED, prompt="Hello", max_tokens=2)
    assert r.usage.completion_tokens == 2

    def scrape(key):
        status, text = _call(stack, "GET", "/metrics", key)
        assert status == 200, (key, status)
        return text

    def admin_sees_alice():
        text = scrape("key-ops")
        return text if 'tenant="alice"' in text else None

    text = _poll(admin_sees_alice, 10, "the per-tenant series on the admin key's /metrics", stack)
    assert "vllm_frontend_tenant_requests_total" in text
    for key in (None, "key-bob", "key-wrong"):
        text = scrape(key)
        assert "vllm_frontend_tenant_" not in text and "alice" not in text, key
        assert "vllm:num_requests_running" in text  # the rest stays


# -- stored objects --------------------------------------------------------------------------------

def test_another_tenant_gets_404_for_a_tenants_file_batch_and_response(stack):
    alice, bob = stack.clients.v1("key-alice"), stack.clients.v1("key-bob")
    body = {"model": SERVED, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2}
    f = alice.files.create(file=("input.jsonl", io.BytesIO(jsonl([line("a", "/v1/chat/completions", body)]))),
                           purpose="batch")
    b = alice.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    resp = alice.responses.create(model=SERVED, input="Hello", max_output_tokens=2, store=True)
    for attempt in (lambda: bob.files.retrieve(f.id), lambda: bob.files.content(f.id), lambda: bob.files.delete(f.id),
                    lambda: bob.batches.retrieve(b.id), lambda: bob.batches.cancel(b.id),
                    lambda: bob.responses.retrieve(resp.id)):
        with pytest.raises(openai.NotFoundError):
            attempt()
    # Still alice's, untouched.
    assert alice.files.retrieve(f.id).id == f.id
    assert json.loads(alice.files.content(f.id).text.splitlines()[0])["custom_id"] == "a"
    assert wait(alice, b.id, timeout=60).status == "completed"
    assert alice.responses.retrieve(resp.id).id == resp.id


def test_a_tenant_past_its_max_storage_bytes_gets_413(stack):
    small, other = stack.clients.v1("key-small"), stack.clients.v1("key-alice")
    first = small.files.create(file=("a.jsonl", io.BytesIO(b"x" * 800)), purpose="batch")
    with pytest.raises(openai.APIStatusError) as e:
        small.files.create(file=("b.jsonl", io.BytesIO(b"x" * 800)), purpose="batch")
    assert e.value.status_code == 413 and "max_storage_bytes" in e.value.message, e.value
    other.files.create(file=("c.jsonl", io.BytesIO(b"x" * 800)), purpose="batch")  # another tenant: not held
    small.files.delete(first.id)
    small.files.create(file=("b.jsonl", io.BytesIO(b"x" * 800)), purpose="batch")  # room again
