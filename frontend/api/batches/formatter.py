"""OpenAI's Batch object and list pages."""

from __future__ import annotations

from typing import Any


def new_batch(batch_id: str, req, *, created_at: int, window_s: int) -> dict[str, Any]:
    """A batch as created: `validating`, every later timestamp unset."""
    return {
        "id": batch_id, "object": "batch", "endpoint": req.endpoint, "model": None, "errors": None,
        "input_file_id": req.input_file_id, "completion_window": req.completion_window,
        "status": "validating", "output_file_id": None, "error_file_id": None,
        "created_at": created_at, "in_progress_at": None, "expires_at": created_at + window_s,
        "finalizing_at": None, "completed_at": None, "failed_at": None, "expired_at": None,
        "cancelling_at": None, "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "metadata": req.metadata, "usage": None,
    }


def list_page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A cursor page (`after` = `last_id` for the next one), as OpenAI's list routes answer."""
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": has_more}
