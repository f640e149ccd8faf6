"""`/v1/files` and `/v1/batches`, as OpenAI serves them, run by the deployment itself.

Files: upload (multipart, `purpose: "batch"`; other purposes are refused: this deployment only
runs batches; `expires_after[anchor]` and `expires_after[seconds]` set when it expires), list,
retrieve, delete and content. Batches: create (`output_expires_after`: when its output and error
files expire), retrieve, list, cancel. Every file and batch records the owner scope of the key
that created it (`tenants`); another owner's id is answered exactly like an unknown one (404).
An expired file is not found either; it goes (record and contents) when a lookup misses it,
before an upload is counted against the bounds, and in the batch runner's periodic sweep.

Each worker runs a `BatchRunner` (serving/batch_runner.py) on the shared store; a line runs
through the endpoint its url's HTTP route calls (`line_caller`: the same lowering, checks and
answer as an online request, in a request scope of its own under the batch owner's tenant and
quota, at the batch priority), so nothing here reimplements a route or goes through HTTP.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from vllm_pyfrontend.api.batches.formatter import list_page, new_batch
from vllm_pyfrontend.api.batches.schemas import CreateBatchRequest, check_create, form_expiry
from vllm_pyfrontend.api.batches.uploads import read_upload
from vllm_pyfrontend.errors import APIError, client_error
from vllm_pyfrontend.metrics.batches import BatchMetrics
from vllm_pyfrontend.serving.batch_runner import BatchRunner, RunnerSettings
from vllm_pyfrontend.serving.bodies import decode_body
from vllm_pyfrontend.serving.responder import Endpoint, JsonAnswer
from vllm_pyfrontend.serving.scope import Caller, status_of
from vllm_pyfrontend.serving.state import STATE
from vllm_pyfrontend.serving.web_app import app_service
from vllm_pyfrontend.store.batches import BatchStore, open_batch_store
from vllm_pyfrontend.store.files import FileContents, FileRecord, FileStore, expire_files, open_file_store
from vllm_pyfrontend.tenants import Tenant, tenant_of

FILES_SUBDIR = "files"  # under the runtime directory when --files-dir is not given
UPLOAD_PURPOSES = ("batch",)


class BatchService:
    """Per worker: the stores, the files' directory, the limits and the runner."""

    def __init__(self, files: FileStore, batches: BatchStore, contents: FileContents, *,
                 max_file_bytes: int, max_total_bytes: int, runner: BatchRunner | None = None):
        self.files = files
        self.batches = batches
        self.contents = contents
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.runner = runner

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.close()
        await self.batches.close()
        await self.files.close()


BATCHES = web.AppKey("batches", BatchService)


def files_dir_of(config) -> str:
    return os.path.abspath(config.policy.files_dir or os.path.join(config.runtime_dir, FILES_SUBDIR))


def add_batch_routes(app: web.Application, endpoints: dict[str, Endpoint]) -> None:
    """The files and batches routes, and the batch runner; `endpoints`: what a line runs, by
    its url (the endpoints the HTTP routes of those urls call)."""
    app.router.add_post("/v1/files", handle_upload)
    app.router.add_get("/v1/files", handle_list_files)
    app.router.add_get("/v1/files/{file_id}", handle_retrieve_file)
    app.router.add_delete("/v1/files/{file_id}", handle_delete_file)
    app.router.add_get("/v1/files/{file_id}/content", handle_file_content)
    app.router.add_post("/v1/batches", handle_create_batch)
    app.router.add_get("/v1/batches", handle_list_batches)
    app.router.add_get("/v1/batches/{batch_id}", handle_retrieve_batch)
    app.router.add_post("/v1/batches/{batch_id}/cancel", handle_cancel_batch)

    async def start(app: web.Application) -> None:
        state = app[STATE]
        cfg, policy = state.config, state.config.policy
        files_dir = files_dir_of(cfg)
        contents = FileContents(files_dir)
        files = open_file_store(policy.response_store, files_dir)
        batches = open_batch_store(policy.response_store, files_dir)
        settings = RunnerSettings(
            max_concurrency=max(1, policy.batch_max_concurrency),
            lease_s=policy.batch_lease_timeout, poll_s=min(0.5, policy.batch_lease_timeout / 4),
            priority=policy.batch_priority, max_lines=policy.batch_max_requests,
            max_body_bytes=cfg.max_request_body_bytes, max_output_bytes=policy.batch_max_output_bytes)
        runner = None
        if policy.batch_max_concurrency > 0:  # 0: this deployment stores files and batches, runs none
            runner = BatchRunner(batches=batches, files=files, contents=contents, call=line_caller(state, endpoints),
                                 settings=settings, draining=lambda: state.draining,
                                 metrics=BatchMetrics(state.metrics.registry),
                                 storage_limit=state.tenants.storage_limit if state.tenants else lambda owner: None)
            runner.start()
        app[BATCHES] = BatchService(files, batches, contents, max_file_bytes=policy.files_max_bytes,
                                    max_total_bytes=policy.files_max_total_bytes, runner=runner)

    app_service(app, BATCHES, start)


# -- running a line through its endpoint ------------------------------------------------------------
def line_caller(state, endpoints: dict[str, Endpoint]):
    """call(url, body, tenant): the line's endpoint (the same one its HTTP route calls), in a
    request scope of its own under the batch owner's tenant and quota; its answer's body
    object, or its error in OpenAI's shape (a 429 or 503 sends the line back for later)."""
    async def call(url: str, body: bytes, tenant: Tenant) -> tuple[int, Any, str | None]:
        endpoint = endpoints.get(url)
        if endpoint is None:
            return 404, APIError(404, f"Not found: {url}").body(), None
        quota = state.tenants.quota(tenant.name) if state.tenants is not None else None
        try:
            scope = state.scopes.open(Caller(tenant=tenant, quota=quota, path=url), "batch")
        except APIError as e:
            return e.status, e.body(), None
        error: BaseException | None = None
        try:
            answer = await endpoint(state, scope, body)
        except BaseException as e:
            error = e
            answer = client_error(e)
            if answer is None:
                raise
            return answer.status, answer.body(), None
        finally:
            scope.end(error, status_of(error))
        if not isinstance(answer, JsonAnswer):
            return 500, APIError(500, "The endpoint did not answer with a whole body.").body(), None
        return answer.status, answer.body, None

    return call


# -- helpers ---------------------------------------------------------------------------------------
def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(body), status=status, content_type="application/json")


def _service(request: web.Request) -> BatchService:
    return request.app[BATCHES]


def _limit(request: web.Request, default: int, most: int) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise APIError(400, "`limit` must be an integer.", "limit") from None
    if not 1 <= value <= most:
        raise APIError(400, f"`limit` must be between 1 and {most}.", "limit")
    return value


def _file_not_found(file_id: str) -> APIError:
    return APIError(404, f"No such File object: {file_id}", "file_id")


def _batch_not_found(batch_id: str) -> APIError:
    return APIError(404, f"No batch found with id '{batch_id}'.", "batch_id")


# -- /v1/files ---------------------------------------------------------------------------------------
async def handle_upload(request: web.Request) -> web.Response:
    service = _service(request)
    tenant = tenant_of(request)
    owner = tenant.owner
    own_limit = tenant.limits.max_storage_bytes if tenant.limits is not None else None
    file_id = "file-" + secrets.token_hex(12)
    temp = service.contents.temp_path(file_id)
    published = False
    try:
        upload = await read_upload(request, temp, max_file_bytes=service.max_file_bytes)
        purpose = upload.fields.get("purpose")
        if purpose is None:
            raise APIError(400, "Missing required field `purpose`.", "purpose")
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(400, f"Unsupported purpose `{purpose}`: this server accepts files for "
                                f"{', '.join(UPLOAD_PURPOSES)} only.", "purpose")
        if upload.filename is None:
            raise APIError(400, "Missing required field `file`.", "file")
        expires_s = form_expiry(upload.fields)
        now = time.time()
        rec = FileRecord(file_id, owner, purpose, upload.filename, upload.size, now,
                         None if expires_s is None else int(now) + expires_s)
        await expire_files(service.files, service.contents, now=now)  # (expired files count toward no bound)
        service.contents.publish(temp, file_id)
        published = True
        if not await service.files.add(rec, service.max_total_bytes, own_limit):
            limit = f"{service.max_total_bytes} bytes"
            if own_limit is not None:
                limit = f"this API key's limit of {own_limit} bytes (max_storage_bytes) or the deployment's {limit}"
            raise APIError(413, f"The files stored here would exceed {limit}; delete some files first.", "file")
        return _json(rec.to_object())
    except BaseException:
        if published:
            service.contents.remove(file_id)
        else:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass
        raise


async def handle_list_files(request: web.Request) -> web.Response:
    order = request.query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise APIError(400, "`order` must be `asc` or `desc`.", "order")
    records, more = await _service(request).files.list(
        tenant_of(request).owner, purpose=request.query.get("purpose"), after=request.query.get("after"),
        limit=_limit(request, 10000, 10000), order=order)
    return _json(list_page([r.to_object() for r in records], more))


async def _drop_if_expired(service: BatchService, file_id: str) -> None:
    """A file that was not found may have expired: then it goes now (record and contents)."""
    await expire_files(service.files, service.contents, file_ids=[file_id])


async def _file(request: web.Request) -> FileRecord:
    service = _service(request)
    file_id = request.match_info["file_id"]
    rec = await service.files.get(file_id, tenant_of(request).owner)
    if rec is None:
        await _drop_if_expired(service, file_id)
        raise _file_not_found(file_id)
    return rec


async def handle_retrieve_file(request: web.Request) -> web.Response:
    return _json((await _file(request)).to_object())


async def handle_delete_file(request: web.Request) -> web.Response:
    service = _service(request)
    file_id = request.match_info["file_id"]
    if not await service.files.delete(file_id, tenant_of(request).owner):
        await _drop_if_expired(service, file_id)
        raise _file_not_found(file_id)
    await asyncio.to_thread(service.contents.remove, file_id)
    return _json({"id": file_id, "object": "file", "deleted": True})


async def handle_file_content(request: web.Request) -> web.StreamResponse:
    rec = await _file(request)
    path = _service(request).contents.path(rec.id)
    if not os.path.exists(path):
        raise _file_not_found(rec.id)
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


# -- /v1/batches -------------------------------------------------------------------------------------
async def handle_create_batch(request: web.Request) -> web.Response:
    state = request.app[STATE]
    service = _service(request)
    tenant = tenant_of(request)
    req: CreateBatchRequest = decode_body(await state.read_body(request), CreateBatchRequest)
    window_s, output_expires_s = check_create(req)
    rec = await service.files.get(req.input_file_id, tenant.owner)
    if rec is None:
        await _drop_if_expired(service, req.input_file_id)
        raise APIError(404, f"No such File object: {req.input_file_id}", "input_file_id")
    if rec.purpose != "batch":
        raise APIError(400, f"The file `{req.input_file_id}` has purpose `{rec.purpose}`, not `batch`.",
                       "input_file_id")
    batch = new_batch("batch_" + secrets.token_hex(16), req, created_at=int(time.time()), window_s=window_s)
    await service.batches.create(batch, tenant.owner, tenant.name, output_expires_s=output_expires_s)
    if service.runner is not None:
        service.runner.wake()
    return _json(batch)


async def handle_retrieve_batch(request: web.Request) -> web.Response:
    return await _owned_batch(request, _service(request).batches.get)


async def _owned_batch(request: web.Request, act: Callable[[str, str], Awaitable[Any]]) -> web.Response:
    """`act(batch_id, owner)` on the path's batch (get or cancel): the batch, or a 404."""
    batch_id = request.match_info["batch_id"]
    obj = await act(batch_id, tenant_of(request).owner)
    if obj is None:
        raise _batch_not_found(batch_id)
    return _json(obj)


async def handle_list_batches(request: web.Request) -> web.Response:
    data, more = await _service(request).batches.list(
        tenant_of(request).owner, after=request.query.get("after"), limit=_limit(request, 20, 100))
    return _json(list_page(data, more))


async def handle_cancel_batch(request: web.Request) -> web.Response:
    return await _owned_batch(request, _service(request).batches.cancel)
