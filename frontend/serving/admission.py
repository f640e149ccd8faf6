"""Admission control: `--max-num-queued-reqs` / `--max-num-queued-tokens`, with vLLM's meaning.

vLLM 0.32 declares both in `SchedulerConfig` but enforces them in the API server
(`AsyncLLM.check_admission`):

- `max_num_queued_reqs`: the bound on unfinished requests (waiting *or* running in the engine)
  across every API server of the deployment; a request with n choices takes n slots and is
  refused when `current + n > max`.
- `max_num_queued_tokens`: the bound on the prompt tokens of requests still in prefill (no
  output yet); a request is refused when `current >= max`.

Counting across workers is vLLM's own scheme (`v1/engine/admission_control.py`
`SharedAdmissionStats`): each worker writes its own counts into its own cache-line slot of one
shared file (`<runtime_dir>/admission`, mmap'ed), and a check sums the slots. Nothing is
locked, a check costs `2 * workers` reads, and the bound is deployment-wide whatever the
number of workers, so sizing it needs no knowledge of `--workers`. The sum is approximate
(two workers may admit at the same instant), as vLLM's is. A restarted worker zeroes its slot.

Past a bound a new request gets a 503 (vLLM's message, OpenAI's error shape) with a
`Retry-After` header before any tokenization (`check`), or after it once the prompt size and n
are known (`admit`); rejections count in `vllm:admission_rejections{reason}`. Admitted requests
are never touched. Built only when a bound is set: without the flags nothing here runs.
"""

from __future__ import annotations

import struct


from vllm_pyfrontend.errors import APIError
from vllm_pyfrontend.serving.worker_slots import map_slots

FILE_NAME = "admission"
_SLOT = 64  # bytes per worker (one cache line), as vLLM's SharedAdmissionStats
_PAIR = struct.Struct("<qq")  # (unfinished engine requests, prompt tokens in prefill)
RETRY_AFTER_S = 1

# vLLM's messages (vllm/exceptions.py QueueOverflowError, MaxQueuedTokensError).
_MESSAGES = {
    "max_num_queued_reqs": "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance.",
    "max_num_queued_tokens": "The engine has reached its prefill token backlog limit. "
    "Please try again later or on a different instance.",
}
REASONS = tuple(_MESSAGES)


class OverloadedError(APIError):
    def __init__(self, reason: str):
        super().__init__(503, _MESSAGES[reason])
        self.reason = reason

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_S)}


class Admission:
    """This worker's slot in the shared counts, and the checks against the bounds."""

    def __init__(self, runtime_dir: str, worker_index: int, num_workers: int,
                 max_reqs: int | None, max_tokens: int | None, on_reject=None):
        self.max_reqs = max_reqs
        self.max_tokens = max_tokens
        self.num_workers = num_workers
        self._on_reject = on_reject  # callable(reason), the Prometheus counter
        self._map = map_slots(runtime_dir, FILE_NAME, max(num_workers, worker_index + 1), _SLOT)
        self._offset = worker_index * _SLOT
        self.reqs = 0  # this worker's unfinished engine requests
        self.tokens = 0  # this worker's prompt tokens in prefill
        self._prefill: dict[str, int] = {}  # request id -> prompt tokens, until its first output
        self._publish()

    def _publish(self) -> None:
        _PAIR.pack_into(self._map, self._offset, self.reqs, self.tokens)

    def totals(self) -> tuple[int, int]:
        """(requests, prompt tokens) summed over the deployment's workers."""
        reqs = tokens = 0
        for w in range(self.num_workers):
            r, t = _PAIR.unpack_from(self._map, w * _SLOT)
            reqs += r
            tokens += t
        return reqs, tokens

    def overloaded(self) -> str | None:
        """The bound reached now (no new request fits), or None."""
        reqs, tokens = self.totals()
        if self.max_reqs is not None and reqs >= self.max_reqs:
            return "max_num_queued_reqs"
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return "max_num_queued_tokens"
        return None

    def _reject(self, reason: str) -> OverloadedError:
        if self._on_reject is not None:
            self._on_reject(reason)
        return OverloadedError(reason)

    def check(self) -> None:
        """Fast refusal before any work: a bound is already reached."""
        reason = self.overloaded()
        if reason is not None:
            raise self._reject(reason)

    def admit(self, n: int) -> None:
        """vLLM's check for a request of n engine requests (raises OverloadedError)."""
        reqs, tokens = self.totals()
        if self.max_reqs is not None and reqs + n > self.max_reqs:
            raise self._reject("max_num_queued_reqs")
        if self.max_tokens is not None and tokens >= self.max_tokens:
            raise self._reject("max_num_queued_tokens")

    # -- counting (the engine requests of admitted requests) -----------------------------------
    def track(self, gen) -> None:
        """An engine request was sent (a `Generation`): unfinished and in prefill until its
        first output; it calls `on_output` / `on_end` through its `admission` slot."""
        self._prefill[gen.request_id] = gen.num_prompt_tokens
        gen.admission = self
        self.reqs += 1
        self.tokens += gen.num_prompt_tokens
        self._publish()

    def on_output(self, gen) -> None:
        tokens = self._prefill.pop(gen.request_id, None)
        if tokens is not None:
            self.tokens -= tokens
            self._publish()

    def on_end(self, gen) -> None:
        gen.admission = None
        self.tokens -= self._prefill.pop(gen.request_id, 0)
        self.reqs -= 1
        self._publish()
