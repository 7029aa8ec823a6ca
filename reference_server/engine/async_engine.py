"""The engine the HTTP API talks to: a thin asyncio bridge over the synchronous EngineCore.

One background thread owns the core and steps it; the event loop hands it new requests and aborts
through an inbox, and gets each step's outputs back in one `loop.call_soon_threadsafe`, so the
event loop never waits for the model.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from reference_server.config import EngineConfig
from reference_server.engine.core import EngineCore, RequestOutput
from reference_server.engine.runner import EngineFault
from reference_server.engine.sequence import Sequence
from reference_server.interface import EngineDead, QueueFull, SamplingParams, StepFailed, TokenOutput
from reference_server.tokenizer import ByteTokenizer

log = logging.getLogger("reference_server.engine")
IDLE_WAIT = 0.5  # seconds the loop sleeps with nothing to do (woken at once by new work)
STATIC_POLL = 0.005  # static batching: how often to re-check whether a batch is due


class RequestStream:
    """Async iterator of one request's TokenOutputs; the last one carries finish_reason."""

    def __init__(self, request_id: str, engine: AsyncEngine) -> None:
        self.request_id = request_id
        self._engine = engine
        self._queue: asyncio.Queue[TokenOutput | Exception] = asyncio.Queue()
        self.finished = False

    def _put(self, item: TokenOutput | Exception) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> TokenOutput:
        if self.finished:
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, Exception):
            self.finished = True
            raise item
        if item.finish_reason is not None:
            self.finished = True
        return item

    def abort(self) -> None:
        """Stop generating (client went away); the blocks are freed by the next step."""
        self._engine.abort(self.request_id)


class AsyncEngine:
    """The `Engine` of reference_server.interface: continuous batching, paged KV, prefix caching
    (static batching and contiguous KV as A/B modes)."""

    def __init__(self, config: EngineConfig) -> None:
        config.validate()
        self.config = config
        self.model_name = config.model_name
        self._core: EngineCore | None = None  # built by the loop thread (it loads the model)
        self._lock = threading.Condition()
        self._inbox: list[Sequence] = []  # accepted, not yet handed to the core
        self._aborts: set[str] = set()
        self._cache_resets: list[asyncio.Future[None]] = []  # asked for, done before the next step
        self._pool_jobs: list[PoolJob] = []  # embeddings to compute between steps
        self._streams: dict[str, RequestStream] = {}  # every unfinished request
        self._num_waiting = 0  # inbox + the core's waiting queue, for QueueFull
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dead: BaseException | None = None

    # ---- the asyncio side -------------------------------------------------------------------

    @property
    def core(self) -> EngineCore:
        """The engine core (once started)."""
        if self._core is None:
            raise EngineDead("the engine has not started")
        return self._core

    @property
    def healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._dead is None

    @property
    def tokenizer(self) -> ByteTokenizer:
        return self.core.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.core.max_model_len

    @property
    def registry(self) -> CollectorRegistry:
        return self.core.metrics.registry

    @property
    def kv_blocks_total(self) -> int:
        return self.core.blocks.total

    @property
    def kv_blocks_free(self) -> int:
        return self.core.blocks.num_free

    async def start(self) -> None:
        """Load the model (in the loop thread) and return once it is ready to serve."""
        self._loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="engine-loop", daemon=True)
        self._thread.start()
        await ready

    async def shutdown(self) -> None:
        """Stop the loop thread and the tensor-parallel workers; unfinished requests end with "abort"."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> RequestStream:
        """Queue a request; its tokens arrive on the returned stream. Call from the event loop."""
        return self.add_requests([(request_id, prompt_ids)], params)[0]

    def add_requests(self, prompts: list[tuple[str, list[int]]], params: SamplingParams) -> list[RequestStream]:
        """Queue (request id, prompt ids) pairs sharing params, all or none: a batch never takes part
        of the queue and then gives up, failing other clients' requests meanwhile."""
        if not self.healthy:
            raise EngineDead("the engine loop is not running")
        if len(prompts) > self.config.max_waiting:  # it could never be queued: a 400, not a 429
            raise ValueError(
                f"the request has {len(prompts)} prompts; this server queues at most "
                f"{self.config.max_waiting} (--max-waiting)"
            )
        # new_sequence reads only what never changes: safe beside the loop thread.
        seqs = [self.core.new_sequence(request_id, prompt_ids, params) for request_id, prompt_ids in prompts]
        streams = [RequestStream(seq.request_id, self) for seq in seqs]
        with self._lock:
            ids = [seq.request_id for seq in seqs]
            taken = [i for i in ids if i in self._streams] or [i for i in ids if ids.count(i) > 1]
            if taken:
                raise ValueError(f"request id {taken[0]!r} is already in use")
            if self._num_waiting + len(seqs) > self.config.max_waiting:
                raise QueueFull(f"{self._num_waiting} requests are already waiting")
            self._num_waiting += len(seqs)
            self._inbox += seqs
            self._streams.update(zip(ids, streams, strict=True))
            self._lock.notify()
        return streams

    async def reset_prefix_cache(self) -> None:
        """Forget the prefix cache; returns once the loop thread has (between two steps)."""
        if not self.healthy:
            raise EngineDead("the engine loop is not running")
        assert self._loop is not None
        done: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            self._cache_resets.append(done)
            self._lock.notify()
        await done

    async def pool(self, prompts: list[list[int]]) -> list[list[float]]:
        """Each prompt's embedding, computed by the loop thread between two steps. Call from the event loop."""
        if not self.healthy:
            raise EngineDead("the engine loop is not running")
        for prompt in prompts:
            self.core.check_prompt(prompt)
        assert self._loop is not None
        job = PoolJob(prompts, self._loop.create_future())
        with self._lock:
            if self._num_waiting + len(self._pool_jobs) >= self.config.max_waiting:
                raise QueueFull(f"{self._num_waiting} requests are already waiting")
            self._pool_jobs.append(job)
            self._lock.notify()
        return await job.result

    def abort(self, request_id: str) -> None:
        """End a request early; its KV blocks are freed before the next step runs."""
        with self._lock:
            if request_id in self._streams:
                self._aborts.add(request_id)
                self._lock.notify()

    # ---- the loop thread --------------------------------------------------------------------

    def _run(self, ready: asyncio.Future) -> None:
        assert self._loop is not None
        try:
            core = self._core = EngineCore(self.config)
        except BaseException as e:  # report to start(), then the engine is simply not healthy
            self._dead = e
            self._loop.call_soon_threadsafe(ready.set_exception, e)
            return
        self._loop.call_soon_threadsafe(ready.set_result, None)
        try:
            while self._next_step(core):
                pass
        except BaseException as e:
            log.exception("engine loop died")
            self._dead = e
        finally:
            self._end_all(core)

    def _next_step(self, core: EngineCore) -> bool:
        """Run one step (or wait for work); False when shutting down."""
        with self._lock:
            if self._stopping:
                return False
            new, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, set()
            resets, self._cache_resets = self._cache_resets, []
            jobs, self._pool_jobs = self._pool_jobs, []
        if resets:
            # The loop thread owns the block manager: the reset happens here, between two steps.
            core.blocks.reset_prefix_cache()
            assert self._loop is not None
            for done in resets:
                self._loop.call_soon_threadsafe(done.set_result, None)
        self._run_pool_jobs(core, jobs)
        for seq in new:
            core.add(seq)
        outputs = [out for request_id in aborts if (out := core.abort(request_id)) is not None]
        try:
            result = core.step()
            outputs += result.outputs
        finally:  # even when the engine dies in this step, the requests already ended hear of it
            self._count_waiting(core)
            self._deliver(outputs)
        if not result.num_scheduled:
            with self._lock:
                if (
                    not self._inbox
                    and not self._aborts
                    and not self._cache_resets
                    and not self._pool_jobs
                    and not self._stopping
                ):
                    self._lock.wait(STATIC_POLL if core.num_waiting else IDLE_WAIT)
        return True

    def _run_pool_jobs(self, core: EngineCore, jobs: list[PoolJob]) -> None:
        """Compute the pooling jobs, several in one forward up to max_num_batched_tokens (at least
        one job each), and settle their futures. EngineFault propagates; the jobs not done go back
        to the queue, which _end_all fails."""
        limit = self.config.max_num_batched_tokens
        while jobs:
            group = [jobs.pop(0)]
            tokens = group[0].tokens
            while jobs and tokens + jobs[0].tokens <= limit:
                tokens += jobs[0].tokens
                group.append(jobs.pop(0))
            try:
                vectors = core.pool([prompt for job in group for prompt in job.prompts])
            except EngineFault:
                with self._lock:
                    self._pool_jobs[:0] = group + jobs
                raise
            except Exception as e:
                log.exception("a pooling job of %d requests failed", len(group))
                for job in group:
                    self._settle(job, StepFailed(f"the pooling job failed: {e!r}"))
                continue
            for job in group:
                self._settle(job, vectors[: len(job.prompts)])
                vectors = vectors[len(job.prompts) :]

    def _settle(self, job: PoolJob, outcome: list[list[float]] | BaseException) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(_settle_future, job.result, outcome)

    def _count_waiting(self, core: EngineCore) -> None:
        """The waiting gauge counts the requests still in the inbox too."""
        with self._lock:
            self._num_waiting = len(self._inbox) + core.num_waiting
            core.metrics.waiting.set(self._num_waiting)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        """Hand a step's outputs to their streams, in one call on the event loop."""
        if not outputs:
            return
        with self._lock:
            items: list[tuple[RequestStream, TokenOutput | Exception]] = [
                (self._streams.pop(o.request_id) if o.final else self._streams[o.request_id], o.output) for o in outputs
            ]
        assert self._loop is not None
        self._loop.call_soon_threadsafe(_put_all, items)

    def _end_all(self, core: EngineCore) -> None:
        """On shutdown or death: end every open stream (abort / EngineDead) and stop the workers."""
        core.abort_all()  # frees every block
        with self._lock:
            if self._dead is None:  # shutting down: every request still open ends as aborted
                items: list[tuple[RequestStream, TokenOutput | Exception]] = [
                    (s, TokenOutput(-1, "", "abort")) for s in self._streams.values()
                ]
            else:
                items = [(s, EngineDead(f"engine loop died: {self._dead!r}")) for s in self._streams.values()]
            self._inbox = []
            self._streams.clear()
            resets, self._cache_resets = self._cache_resets, []
            jobs, self._pool_jobs = self._pool_jobs, []
        for job in jobs:
            self._settle(job, EngineDead("the engine has stopped"))
        try:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(_put_all, items)
            for done in resets:
                self._loop.call_soon_threadsafe(done.set_exception, EngineDead("the engine has stopped"))
        except RuntimeError:  # the event loop is already closed
            pass
        core.shutdown()


@dataclass
class PoolJob:
    """Prompts to embed, and the event loop's future for their vectors."""

    prompts: list[list[int]]
    result: asyncio.Future[list[list[float]]]

    @property
    def tokens(self) -> int:
        return sum(len(p) for p in self.prompts)


def _settle_future(future: asyncio.Future[list[list[float]]], outcome: list[list[float]] | BaseException) -> None:
    if future.done():  # the request was cancelled (the client went away)
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _put_all(items: list[tuple[RequestStream, TokenOutput | Exception]]) -> None:
    for stream, out in items:
        stream._put(out)
