"""The OpenAI Responses API (`/v1/responses`): its own request schema, input lowering, formatter
and routes, over the chat layer's assistant events and `frontend/llm`'s lowering."""

from vllm_pyfrontend.api.responses.routes import add_responses_routes

__all__ = ["add_responses_routes"]
