"""Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`) over the chat pipeline."""

from vllm_pyfrontend.api.anthropic.routes import add_anthropic_routes

__all__ = ["add_anthropic_routes"]
