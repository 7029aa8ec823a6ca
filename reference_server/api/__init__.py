"""The OpenAI-compatible HTTP API of the reference server (aiohttp)."""

from reference_server.api.app import build_app

__all__ = ["build_app"]
