"""MediaError: what a client did wrong with a media item, as an HTTP status and a message."""

from __future__ import annotations


class MediaError(Exception):
    """A media item that cannot be used, with the status the server answers.

    Statuses (vLLM answers most of these with 400 or 422, some with 500):
    - 400: bad input: a malformed URL or data URL, invalid base64, a corrupt or truncated file,
      an upstream HTTP error, a redirect loop, a fetch that did not finish in time (vLLM's
      fetch time-outs; a 408/504 would blame the wrong party), more items than the limit;
    - 403: a refused destination: a private/loopback/link-local/reserved address, a domain not
      in --allowed-media-domains, a file:// URL without or outside --allowed-local-media-path;
    - 413: too large: more bytes than the size limit, more pixels than the image limit
      (a decompression bomb);
    - 415: not a supported media type: bytes that no allowed decoder recognizes;
    - 500: the server cannot decode this modality (a decoding package is missing).
    """

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def __repr__(self) -> str:
        return f"MediaError({self.status}, {self.message!r})"

    def __reduce__(self):  # picklable (a process pool sends it back)
        return (MediaError, (self.status, self.message, self.param))
