"""The serving engine: EngineCore (scheduler, KV blocks, model runner, sampler, metrics), stepped
synchronously, and AsyncEngine, its asyncio bridge for the HTTP API."""

from reference_server.engine.async_engine import AsyncEngine, RequestStream
from reference_server.engine.core import EngineCore

__all__ = ["AsyncEngine", "EngineCore", "RequestStream"]
