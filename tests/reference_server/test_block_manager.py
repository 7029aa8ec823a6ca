"""KV block managers: paged tables grow block by block; contiguous slabs reserve max_model_len per sequence."""

from reference_server.engine.block_manager import ContiguousBlocks, PagedBlocks
from reference_server.engine.sequence import Sequence
from reference_server.interface import SamplingParams


def seq(n: int = 1) -> Sequence:
    return Sequence("r", [1] * n, SamplingParams(), 0.0)


def test_paged_tables_grow_as_tokens_need_blocks_and_free_returns_them() -> None:
    bm = PagedBlocks(num_blocks=4, block_size=16)
    a, b = seq(), seq()
    bm.allocate(a, 17, [])
    assert len(a.block_table) == 2 and bm.num_free == 2
    bm.allocate(a, 32, [])  # still fits in two blocks
    assert len(a.block_table) == 2
    assert bm.can_allocate(b, 32, []) and not bm.can_allocate(b, 33, [])
    bm.allocate(b, 20, [])
    assert set(a.block_table).isdisjoint(b.block_table) and bm.num_free == 0
    bm.free(a)
    bm.free(b)
    assert bm.num_free == bm.total == 4 and a.block_table == []


def test_contiguous_slabs_reserve_a_slab_and_fits_fewer_sequences() -> None:
    bm = ContiguousBlocks(num_blocks=10, block_size=16, blocks_per_slab=4)  # max_model_len 64
    assert bm.total == 8  # two slabs; two blocks cannot form a slab
    seqs = [seq(), seq(), seq()]
    for s in seqs[:2]:
        assert bm.can_allocate(s, 1, [])
        bm.allocate(s, 1, [])
    # The lowest free slab goes first, so sequences admitted together own neighbouring slabs.
    assert seqs[0].block_table == [0, 1, 2, 3] and seqs[1].block_table == [4, 5, 6, 7]
    assert not bm.can_allocate(seqs[2], 1, [])  # 1 token each, yet the pool is full
    assert bm.can_allocate(seqs[0], 64, [])  # growing within the slab is free
    paged = PagedBlocks(num_blocks=10, block_size=16)
    fitted = 0
    while paged.can_allocate(seq(), 1, []):
        paged.allocate(seq(), 1, [])
        fitted += 1
    assert fitted == 10
    bm.free(seqs[0])
    assert bm.num_free == 4 and bm.can_allocate(seqs[2], 1, [])
    bm.allocate(seqs[2], 1, [])
    assert seqs[2].block_table == [0, 1, 2, 3]


def test_a_reset_prefix_cache_forgets_cached_blocks_but_not_held_ones() -> None:
    bm = PagedBlocks(num_blocks=8, block_size=4)
    a = seq(9)  # two full blocks before the last token
    bm.allocate(a, 9, [])
    bm.cache_blocks(a, 0, 9)
    assert len(bm.cached_prefix(seq(9))) == 2
    bm.reset_prefix_cache()
    assert bm.cached_prefix(seq(9)) == []
    assert len(a.block_table) == 3  # the running sequence keeps its KV
    bm.free(a)
    assert bm.num_free == bm.total
