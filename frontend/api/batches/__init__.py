"""OpenAI's Files and Batch APIs (`/v1/files`, `/v1/batches`): see routes.py; the batches are
run by every worker's `serving/batch_runner.py`."""

from vllm_pyfrontend.api.batches.routes import add_batch_routes

__all__ = ["add_batch_routes"]
