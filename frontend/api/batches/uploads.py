"""Reading a `/v1/files` upload (multipart/form-data) within hard bounds.

The file part is streamed to disk in chunks and refused (413) once it passes the size limit;
the other fields are small; at most `MAX_PARTS` parts are read. The body never goes through
aiohttp's in-memory `post()`, so `--max-request-body-bytes` does not bound a file upload: the
per-file limit does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from aiohttp import BodyPartReader, web

from vllm_pyfrontend.errors import APIError

MAX_PARTS = 8
MAX_FIELD_BYTES = 1024
CHUNK = 1 << 16


@dataclass
class Upload:
    fields: dict[str, str]
    filename: str | None
    size: int  # bytes written to the temporary path (0 and no filename: no file part)


async def read_upload(request: web.Request, temp_path: str, *, max_file_bytes: int) -> Upload:
    """Read the form: text fields into `fields`, the part named `file` into `temp_path`. The
    caller removes `temp_path` on any failure."""
    if not request.content_type.startswith("multipart/"):
        raise APIError(400, "Expected a multipart/form-data body with `file` and `purpose`.")
    try:
        reader = await request.multipart()
    except Exception as e:  # noqa: BLE001 - a malformed multipart head is the client's
        raise APIError(400, f"Invalid multipart body: {e}") from None
    fields: dict[str, str] = {}
    filename: str | None = None
    size = 0
    parts = 0
    while True:
        try:
            part = await reader.next()
        except ValueError as e:
            raise APIError(400, f"Invalid multipart body: {e}") from None
        if part is None:
            break
        parts += 1
        if parts > MAX_PARTS:
            raise APIError(400, f"Too many form fields (at most {MAX_PARTS}).")
        if not isinstance(part, BodyPartReader):
            raise APIError(400, "Nested multipart bodies are not supported.")
        name = part.name or ""
        if name == "file":
            if filename is not None:
                raise APIError(400, "Only one `file` part is allowed.", "file")
            filename = os.path.basename(part.filename or "upload.jsonl")[:255] or "upload.jsonl"
            with open(temp_path, "wb") as f:
                while chunk := await part.read_chunk(CHUNK):
                    size += len(chunk)
                    if size > max_file_bytes:
                        raise APIError(413, f"The file exceeds the limit of {max_file_bytes} bytes.", "file")
                    f.write(chunk)
        else:
            data = bytearray()
            while chunk := await part.read_chunk(CHUNK):
                data += chunk
                if len(data) > MAX_FIELD_BYTES:
                    raise APIError(400, f"The form field `{name}` is too long.", name)
            fields[name] = data.decode("utf-8", "replace")
    return Upload(fields, filename, size)
