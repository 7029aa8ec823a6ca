"""The KV cache and attention over it.

The cache of each layer is one flat tensor of token slots `[num_blocks * block_size, kv_heads, head_dim]`.
A sequence owns blocks (its block table); token i of a sequence lives in slot
`block_table[i // block_size] * block_size + i % block_size`.

- paged: blocks come from anywhere in the pool; attention gathers a sequence's blocks, then runs SDPA.
- contiguous: a sequence owns one slab of max_model_len tokens (consecutive blocks, reserved up front);
  when a step's decodes own consecutive slabs, attention reads them as one view without copying:
  the cheaper read that costs capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass
class PrefillChunk:
    """One prompt chunk of a step: `length` query rows from `offset` in the batch, positions from `start`."""

    offset: int
    length: int
    start: int
    block_table: torch.Tensor  # [1, blocks] long
    mask: torch.Tensor | None = None  # [length, start + length] bool; None when start == 0 (plain causal)


@dataclass
class AttentionMetadata:
    """Where one step's tokens go in the cache and what each query attends to. Built once per step."""

    slot_mapping: torch.Tensor  # [N] long: cache slot of each new token
    num_decodes: int = 0  # the first num_decodes rows are single-token decodes
    decode_tables: torch.Tensor | None = None  # [num_decodes, blocks] long
    decode_len: int = 0  # longest decode context in the step
    decode_mask: torch.Tensor | None = None  # [num_decodes, 1, 1, decode_len] bool: key is visible
    decode_first_slab: int = -1  # contiguous KV: decodes own slabs first.. in order (-1: not so)
    prefills: list[PrefillChunk] = field(default_factory=list)

    def to(self, device: torch.device) -> AttentionMetadata:
        """The same metadata with its tensors on device."""

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=True)

        def move_optional(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else move(t)

        return AttentionMetadata(
            move(self.slot_mapping),
            self.num_decodes,
            move_optional(self.decode_tables),
            self.decode_len,
            move_optional(self.decode_mask),
            self.decode_first_slab,
            [
                PrefillChunk(p.offset, p.length, p.start, move(p.block_table), move_optional(p.mask))
                for p in self.prefills
            ],
        )


class KVCache:
    """Keys and values of every layer, in blocks of `block_size` token slots."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        blocks_per_slab: int = 0,
    ) -> None:
        shape = (num_layers, num_blocks * block_size, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        self.blocks_per_slab = blocks_per_slab  # > 0: contiguous mode
        self.num_slabs = num_blocks // blocks_per_slab if blocks_per_slab else 0

    def scratch(self, tokens: int) -> KVCache:
        """A paged cache like this one with room for `tokens` slots (for work whose KV is not kept)."""
        layers, _, heads, dim = self.k.shape
        blocks = -(-tokens // self.block_size)
        return KVCache(layers, blocks, self.block_size, heads, dim, self.k.dtype, self.k.device)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the new tokens' keys and values ([N, kv_heads, head_dim]) at their slots."""
        self.k[layer].index_copy_(0, slots, k)
        self.v[layer].index_copy_(0, slots, v)

    def gather(
        self, layer: int, tables: torch.Tensor, length: int, first_slab: int = -1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the first `length` tokens of each sequence: [B, length, kv_heads, head_dim]."""
        return (
            self._read(self.k[layer], tables, length, first_slab),
            self._read(self.v[layer], tables, length, first_slab),
        )

    def _read(self, cache: torch.Tensor, tables: torch.Tensor, length: int, first_slab: int) -> torch.Tensor:
        heads, dim = cache.shape[1:]
        if self.blocks_per_slab:
            slab = self.blocks_per_slab * self.block_size
            slabs = cache[: self.num_slabs * slab].view(self.num_slabs, slab, heads, dim)
            if first_slab >= 0:  # consecutive slabs: a view, no copy
                return slabs[first_slab : first_slab + tables.shape[0], :length]
            return slabs[:, :length][tables[:, 0] // self.blocks_per_slab]
        blocks = tables[:, : -(-length // self.block_size)]
        pages = cache.view(-1, self.block_size, heads, dim)[blocks]  # the paged gather
        return pages.flatten(1, 2)[:, :length]


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, meta: AttentionMetadata, cache: KVCache
) -> torch.Tensor:
    """Causal attention of one step's tokens. q: [N, heads, dim]; k, v: [N, kv_heads, dim]."""
    cache.write(layer, meta.slot_mapping, k, v)
    out = torch.empty_like(q)
    nd = meta.num_decodes
    if nd:
        assert meta.decode_tables is not None, "a step with decodes carries their block tables"
        keys, values = cache.gather(layer, meta.decode_tables, meta.decode_len, meta.decode_first_slab)
        o = F.scaled_dot_product_attention(
            q[:nd].unsqueeze(2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=meta.decode_mask,
            enable_gqa=True,
        )
        out[:nd] = o.squeeze(2)
    for p in meta.prefills:
        rows = slice(p.offset, p.offset + p.length)
        qs = q[rows].transpose(0, 1).unsqueeze(0)
        if p.mask is None:  # the whole prefix is in this chunk: no cache read needed
            ks, vs = k[rows].transpose(0, 1).unsqueeze(0), v[rows].transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
        else:
            keys, values = cache.gather(layer, p.block_table, p.start + p.length)
            o = F.scaled_dot_product_attention(
                qs, keys.transpose(1, 2), values.transpose(1, 2), attn_mask=p.mask, enable_gqa=True
            )
        out[rows] = o[0].transpose(0, 1)
    return out
