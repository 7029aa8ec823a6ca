"""Runs the model for one step, on one process or on N tensor-parallel ranks.

Rank 0 (the engine's process) builds each step's input and, with tensor_parallel > 1, broadcasts it
to the worker ranks (spawned processes) that run the same forward on their weight shards; the
row-parallel layers all-reduce partial results. `ModelRunner` is one `Executor`; the GPU twin's
(reference_server.twin.executor) is the other.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.process import BaseProcess
from typing import Protocol

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from reference_server.accounting import StepWork
from reference_server.attention import AttentionMetadata, KVCache, PrefillChunk
from reference_server.config import EngineConfig
from reference_server.engine.sampler import Sampler
from reference_server.engine.scheduler import ScheduledChunk
from reference_server.engine.sequence import Sequence
from reference_server.model import load_model, pack_for_cpu
from reference_server.parallel import TensorParallel
from reference_server.shapes import PRESETS
from reference_server.tokenizer import ByteTokenizer

# Every collective (the rendezvous included) fails after this long: enough for a rank to load a big
# checkpoint. An idle rank 0 sends a keepalive more often, so waiting workers never time out.
COLLECTIVE_TIMEOUT = 600  # seconds
KEEPALIVE_EVERY = 5.0  # seconds
KEEPALIVE = "keepalive"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class EngineFault(Exception):
    """A broken device or a lost tensor-parallel peer: the engine cannot serve any more."""


@dataclass
class Executed:
    """What running a step gave: a token for each sequence whose chunk completed, and collective seconds."""

    sampled: list[Sequence]
    tokens: list[int]
    collective: float


class Executor(Protocol):
    """What the engine core needs to run its steps: the model on its ranks, or the GPU twin."""

    def run(self, chunks: list[ScheduledChunk], work: StepWork) -> Executed:
        """Run one step's chunks (their `work` as reference_server.accounting counts it)."""

    def pool(self, prompts: list[list[int]], work: StepWork) -> torch.Tensor:
        """Embeddings [B, hidden] of whole prompts, prefilled outside the schedule (`work` as counted)."""

    def keepalive(self) -> None:
        """Called when a step has nothing to run."""

    def shutdown(self) -> None:
        """Stop whatever the executor started."""


@dataclass
class StepInput:
    """Everything a rank needs to run one step's forward (picklable, CPU tensors)."""

    input_ids: torch.Tensor  # [N] long
    positions: torch.Tensor  # [N] long
    meta: AttentionMetadata
    sample_rows: torch.Tensor  # [S] long: rows whose logits are sampled


@dataclass
class PoolInput:
    """A pooling job for every rank: whole prompts, prefilled on their own (no sampling, no KV kept)."""

    input_ids: torch.Tensor  # [N] long: the prompts one after another
    lengths: list[int]  # each prompt's tokens


def pool_input(prompts: list[list[int]]) -> PoolInput:
    """The pooling job of these prompts."""
    return PoolInput(torch.tensor([t for p in prompts for t in p]), [len(p) for p in prompts])


@dataclass(frozen=True)
class KVLayout:
    """How many KV blocks this configuration gets, the context length, and whether blocks form slabs."""

    num_blocks: int
    block_size: int
    max_model_len: int
    blocks_per_slab: int  # 0 = paged


def kv_layout(config: EngineConfig) -> KVLayout:
    """Size the KV pool from num_kv_blocks or the kv_memory_gb budget (per rank).

    max_model_len 0 means the preset's context, capped at what the pool can hold for one sequence.
    """
    shape = PRESETS[config.model_preset]
    tp = TensorParallel(0, config.tensor_parallel)
    kv_heads = tp.shard(shape.num_kv_heads, "num_kv_heads")
    bytes_per_block = (
        2 * shape.num_layers * config.block_size * kv_heads * shape.head_dim * DTYPES[config.dtype].itemsize
    )
    num_blocks = config.num_kv_blocks or int(config.kv_memory_gb * 1e9 // bytes_per_block)
    if config.twin and not config.num_kv_blocks:  # what the simulated GPUs' memory leaves for KV
        from reference_server.twin.timing import TimingModel

        tokens = TimingModel(config.twin_spec).kv_capacity_tokens(
            config.gpu_memory_utilization, config.max_num_batched_tokens, config.max_num_seqs
        )
        num_blocks = tokens // config.block_size
    if config.max_model_len > shape.max_position:
        raise ValueError(
            f"max_model_len={config.max_model_len} is beyond the {shape.name} preset's "
            f"context of {shape.max_position} tokens"
        )
    max_model_len = config.max_model_len or min(shape.max_position, num_blocks * config.block_size)
    per_seq = -(-max_model_len // config.block_size)
    if num_blocks < max(per_seq, 1) or max_model_len < 2:
        raise ValueError(
            f"KV cache of {num_blocks} blocks x {config.block_size} tokens cannot hold one "
            f"sequence of max_model_len={max_model_len}: raise kv_memory_gb or num_kv_blocks"
        )
    return KVLayout(num_blocks, config.block_size, max_model_len, per_seq if config.kv == "contiguous" else 0)


def build_step(
    chunks: list[ScheduledChunk], block_size: int, blocks_per_slab: int = 0
) -> tuple[StepInput, list[Sequence]]:
    """Flatten the scheduled chunks into one batch: single-token decodes first, then prompt chunks.

    Returns the step and the sequences that get a new token, in the order of its sample rows.
    """
    # Decodes are ordered by their first block so that consecutive contiguous-KV slabs line up.
    decodes = sorted((c for c in chunks if c.num_tokens == 1), key=lambda c: c.seq.block_table[0])
    prefills = [c for c in chunks if c.num_tokens > 1]
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    sample_rows: list[int] = []
    sampled: list[Sequence] = []
    for c in decodes + prefills:
        seq, start, end = c.seq, c.seq.num_computed, c.seq.num_computed + c.num_tokens
        ids += seq.token_ids(start, end)
        positions += range(start, end)
        slots += [seq.block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]
        if c.completes:
            sample_rows.append(len(ids) - 1)
            sampled.append(seq)
    meta = AttentionMetadata(slot_mapping=torch.tensor(slots), num_decodes=len(decodes))
    if decodes:
        _describe_decodes(meta, decodes, blocks_per_slab)
    meta.prefills = _prefill_chunks(prefills, offset=len(decodes))
    return StepInput(
        torch.tensor(ids), torch.tensor(positions), meta, torch.tensor(sample_rows, dtype=torch.long)
    ), sampled


def _describe_decodes(meta: AttentionMetadata, decodes: list[ScheduledChunk], blocks_per_slab: int) -> None:
    """The decode part: one block table and key mask for all single-token rows, read together."""
    lens = torch.tensor([c.seq.num_computed + 1 for c in decodes])
    width = max(len(c.seq.block_table) for c in decodes)
    meta.decode_tables = torch.tensor([c.seq.block_table + [0] * (width - len(c.seq.block_table)) for c in decodes])
    meta.decode_len = int(lens.max())
    meta.decode_mask = (torch.arange(meta.decode_len)[None, :] < lens[:, None])[:, None, None, :]
    firsts = [c.seq.block_table[0] for c in decodes]
    if blocks_per_slab and firsts == list(range(firsts[0], firsts[0] + len(firsts) * blocks_per_slab, blocks_per_slab)):
        meta.decode_first_slab = firsts[0] // blocks_per_slab


def _prefill_chunks(prefills: list[ScheduledChunk], offset: int) -> list[PrefillChunk]:
    """The prefill part: each prompt chunk attends on its own, from row `offset` of the batch on."""
    out = []
    for c in prefills:
        start = c.seq.num_computed
        mask = None
        if start > 0:  # earlier tokens are in the cache: query i sees keys 0..start+i
            mask = torch.arange(start + c.num_tokens)[None, :] <= (start + torch.arange(c.num_tokens))[:, None]
        out.append(PrefillChunk(offset, c.num_tokens, start, torch.tensor([c.seq.block_table]), mask))
        offset += c.num_tokens
    return out


class Worker:
    """One rank's model shard and KV cache."""

    def __init__(self, config: EngineConfig, layout: KVLayout, tp: TensorParallel) -> None:
        shape = PRESETS[config.preset]
        self.device = torch.device(f"cuda:{tp.rank}" if config.device == "cuda" else "cpu")
        dtype = DTYPES[config.dtype]
        self.tp = tp
        self.model = load_model(shape, tp, dtype, self.device, seed=config.seed, weights=config.weights)
        if self.device.type == "cpu":
            pack_for_cpu(self.model)
        kv_heads = tp.shard(shape.num_kv_heads, "num_kv_heads")
        self.cache = KVCache(
            shape.num_layers,
            layout.num_blocks,
            layout.block_size,
            kv_heads,
            shape.head_dim,
            dtype,
            self.device,
            layout.blocks_per_slab,
        )

    @torch.inference_mode()
    def execute(self, step: StepInput) -> torch.Tensor:
        """Logits [S, vocab] (float32) of the step's sample rows."""
        hidden = self.model(
            step.input_ids.to(self.device), step.positions.to(self.device), step.meta.to(self.device), self.cache
        )
        return self.model.logits(hidden[step.sample_rows.to(self.device)])

    @torch.inference_mode()
    def pool(self, job: PoolInput) -> torch.Tensor:
        """Each prompt's embedding [B, hidden] (float32): the mean of its final hidden states, L2-normalised.

        Each prompt is one whole prefill chunk (plain causal attention, no cache read); the KV it
        writes goes to a scratch cache of its own, so the served sequences' blocks are untouched.
        """
        chunks, offset = [], 0
        for n in job.lengths:  # start 0, no mask: each prompt attends within itself, reading no cache
            chunks.append(PrefillChunk(offset, n, 0, torch.zeros(1, 1, dtype=torch.long)))
            offset += n
        scratch = self.cache.scratch(offset)
        positions = torch.cat([torch.arange(n) for n in job.lengths])
        meta = AttentionMetadata(slot_mapping=torch.arange(offset), prefills=chunks).to(self.device)
        hidden = self.model(job.input_ids.to(self.device), positions.to(self.device), meta, scratch).float()
        means = torch.stack([h.mean(dim=0) for h in hidden.split(job.lengths)])
        return torch.nn.functional.normalize(means, dim=-1).cpu()


def _set_threads(config: EngineConfig) -> None:
    # Ranks share the cores, and one is left to the HTTP event loop: an oversubscribed core makes
    # torch's worker threads wait on each other (on a busy 2-core box, 2 threads ran 20x slower than 1).
    if config.device == "cpu":
        spare = max(1, (os.cpu_count() or 1) - 1)
        torch.set_num_threads(config.cpu_threads or max(1, spare // config.tensor_parallel))


def _init_group(config: EngineConfig, rank: int, port: int, timeout: float) -> None:
    backend = "nccl" if config.device == "cuda" else "gloo"
    if config.device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=config.tensor_parallel,
        timeout=timedelta(seconds=timeout),
    )


def _worker_main(config: EngineConfig, layout: KVLayout, rank: int, port: int, timeout: float) -> None:
    """A worker rank: run every step rank 0 broadcasts until it sends None (or goes away)."""
    # Ctrl-C reaches the whole process group: only rank 0 decides when the workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _set_threads(config)
    _init_group(config, rank, port, timeout)
    worker = Worker(config, layout, TensorParallel(rank, config.tensor_parallel))
    try:
        while True:
            box: list[StepInput | PoolInput | str | None] = [None]
            dist.broadcast_object_list(box, src=0)
            step = box[0]
            if step is None:
                break
            if isinstance(step, StepInput):  # else KEEPALIVE, sent only to keep the group's connections alive
                worker.execute(step)
            elif isinstance(step, PoolInput):
                worker.pool(step)
    except RuntimeError as e:  # rank 0 died: the connection closed under a collective
        print(
            f"tensor-parallel rank {rank}: stopping, rank 0 is gone ({str(e).splitlines()[0][:120]})", file=sys.stderr
        )
    finally:
        dist.destroy_process_group()


class ModelRunner:
    """Rank 0's entry point: runs steps locally and, with tensor parallel, on the worker ranks too."""

    def __init__(self, config: EngineConfig, layout: KVLayout) -> None:
        self.layout = layout
        self.sampler = Sampler(ByteTokenizer().eos_token_id, config.seed, utf8=config.output_text == "utf8")
        self.world_size = config.tensor_parallel
        self.processes: list[BaseProcess] = []
        _set_threads(config)
        if self.world_size > 1:
            port = _free_port()
            ctx = mp.get_context("spawn")
            self.processes = [
                ctx.Process(target=_worker_main, args=(config, layout, r, port, COLLECTIVE_TIMEOUT), daemon=True)
                for r in range(1, self.world_size)
            ]
            for p in self.processes:
                p.start()
            _init_group(config, 0, port, COLLECTIVE_TIMEOUT)
        self.worker = Worker(config, layout, TensorParallel(0, self.world_size))
        self._last_broadcast = time.monotonic()

    def run(self, chunks: list[ScheduledChunk], work: StepWork) -> Executed:
        """Build the step's input, run the model and sample (`work` is the engine's to record)."""
        step, sampled = build_step(chunks, self.layout.block_size, self.layout.blocks_per_slab)
        logits, collective = self.execute(step)
        return Executed(sampled, self.sampler.sample(logits, sampled), collective)

    def pool(self, prompts: list[list[int]], work: StepWork) -> torch.Tensor:
        """Embeddings of whole prompts, on every rank as a step is (`work` is the engine's to record)."""
        job = pool_input(prompts)
        return self._on_ranks(job, lambda: self.worker.pool(job))

    def execute(self, step: StepInput) -> tuple[torch.Tensor, float]:
        """Logits of the sample rows and the seconds spent in collectives during this step.

        Raises EngineFault when the failure leaves nothing to serve with; other errors fail the step only.
        """
        if self.world_size > 1:
            self.worker.tp.take_collective_seconds()
        logits = self._on_ranks(step, lambda: self.worker.execute(step))
        return logits, self.worker.tp.take_collective_seconds()

    def _on_ranks(self, job: StepInput | PoolInput, run: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Send `job` to the worker ranks and `run` it here; a failure with ranks (or a broken device)
        is an EngineFault, other errors fail the job only."""
        try:
            if self.world_size > 1:
                dist.broadcast_object_list([job], src=0)
                self._last_broadcast = time.monotonic()
            return run()
        except Exception as e:
            # The ranks run a step in lockstep: one that failed leaves the others out of step. A CUDA
            # error (illegal address, device-side assert) leaves the device unusable; running out of
            # memory does not (torch.OutOfMemoryError is no AcceleratorError).
            if self.world_size > 1 or isinstance(e, torch.AcceleratorError):
                raise EngineFault(f"the model step failed beyond recovery: {e!r}") from e
            raise

    def keepalive(self) -> None:
        """Call while idle: tells the worker ranks, blocked in a broadcast, that rank 0 is alive."""
        if self.world_size > 1 and time.monotonic() - self._last_broadcast >= KEEPALIVE_EVERY:
            dist.broadcast_object_list([KEEPALIVE], src=0)
            self._last_broadcast = time.monotonic()

    def shutdown(self) -> None:
        """Stop the worker ranks and leave the process group."""
        if self.world_size == 1:
            return
        try:
            dist.broadcast_object_list([None], src=0)
        except RuntimeError:  # a worker already gone (killed with its process group): nothing to tell it
            pass
        finally:
            dist.destroy_process_group()
            for p in self.processes:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
