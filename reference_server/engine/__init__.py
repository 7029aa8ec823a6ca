"""The serving engine: scheduler, KV blocks, model runner, sampler and metrics behind AsyncEngine."""

from reference_server.engine.async_engine import AsyncEngine, RequestStream

__all__ = ["AsyncEngine", "RequestStream"]
