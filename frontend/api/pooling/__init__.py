"""Pooling routes (embeddings, classification, scoring, reranking): see routes.py."""

from vllm_pyfrontend.api.pooling.routes import add_pooling_routes

__all__ = ["add_pooling_routes"]
