"""Helpers for engine tests: run an AsyncEngine scenario and collect request streams."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from reference_server.config import EngineConfig
from reference_server.engine import AsyncEngine, RequestStream
from reference_server.interface import TokenOutput

T = TypeVar("T")


@dataclass
class Result:
    """Everything one request's stream produced, with the (monotonic) arrival time of each output."""

    outputs: list[TokenOutput] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(o.text for o in self.outputs)

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[-1].finish_reason


async def collect(stream: RequestStream) -> Result:
    result = Result()
    async for out in stream:
        result.outputs.append(out)
        result.times.append(time.monotonic())
    return result


def run_engine(config: EngineConfig, scenario: Callable[[AsyncEngine], Awaitable[T]], timeout: float = 60) -> T:
    """Start an engine, run scenario(engine), shut down; the KV pool must be whole at the end."""

    async def main() -> T:
        engine = AsyncEngine(config)
        await engine.start()
        try:
            result = await asyncio.wait_for(scenario(engine), timeout)
            assert engine.kv_blocks_free == engine.kv_blocks_total
            return result
        finally:
            await engine.shutdown()

    return asyncio.run(main())
