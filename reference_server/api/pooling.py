"""/v1/embeddings and /v1/rerank: answers from the engine's pooled hidden states.

An embedding is the mean of a prompt's final hidden states, L2-normalised (the engine computes it
between steps). A rerank score is the cosine of the query's and the document's embeddings: with
unit vectors, their dot product, in [-1, 1]; a document equal to the query scores 1.
"""

from __future__ import annotations

import base64
import struct
import uuid
from typing import Any

from reference_server.api.errors import APIError
from reference_server.api.requests import EmbeddingRequest, RerankRequest
from reference_server.interface import Engine, EngineDead, QueueFull, StepFailed


async def pooled(engine: Engine, prompts: list[list[int]]) -> list[list[float]]:
    """The prompts' embeddings, the engine's failures turned into API errors."""
    try:
        return await engine.pool(prompts)
    except QueueFull:
        raise APIError(429, "The server's waiting queue is full; retry later.", code="queue_full") from None
    except EngineDead:
        raise APIError(503, "The engine has stopped.", code="engine_dead") from None
    except StepFailed:
        raise APIError(500, "The engine failed while pooling this request.", code="engine_error") from None
    except ValueError as e:  # a prompt beyond the context window
        raise APIError(400, str(e)) from None


async def embeddings(engine: Engine, request: EmbeddingRequest, model_name: str) -> dict[str, Any]:
    """The OpenAI embeddings response, each vector as JSON numbers or, with encoding_format
    base64, as OpenAI and vLLM send it: the float32 values' little-endian bytes in base64."""
    vectors = await pooled(engine, request.inputs)
    tokens = sum(len(p) for p in request.inputs)
    encoded: list[list[float] | str] = [_base64(v) if request.encoding == "base64" else v for v in vectors]
    return {
        "object": "list",
        "id": "embd-" + uuid.uuid4().hex,
        "model": model_name,
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(encoded)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _base64(vector: list[float]) -> str:
    """A vector as little-endian float32 bytes in base64 (what the openai SDK decodes by default)."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


async def rerank(engine: Engine, request: RerankRequest, model_name: str) -> dict[str, Any]:
    """The rerank response (vLLM's, Cohere's and Jina's shape): the top_n documents, best first."""
    query, *documents = await pooled(engine, [request.query, *request.documents])
    scores = [sum(q * d for q, d in zip(query, doc, strict=True)) for doc in documents]
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: request.top_n]
    tokens = len(request.query) + sum(len(d) for d in request.documents)
    return {
        "id": "rerank-" + uuid.uuid4().hex,
        "model": model_name,
        "results": [{"index": i, "document": {"text": request.texts[i]}, "relevance_score": scores[i]} for i in order],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
