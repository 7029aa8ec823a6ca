"""A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU), tensor-parallel ready.

Module and parameter names follow Hugging Face (`model.layers.N.self_attn.q_proj.weight`, ...), so a
local safetensors checkpoint loads by name. Without one, weights are seeded random: serving speed
depends on shapes, not values.
"""

from __future__ import annotations

import zlib

import torch
from torch import nn

from reference_server.attention import AttentionMetadata, KVCache, attention
from reference_server.parallel import TensorParallel
from reference_server.shapes import ModelShape


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


# oneDNN's packed CPU matmul reads 0.5 GB of weights in 24-25 ms on one core for 4-6 rows, and in
# 34-42 ms for 1-2 (measured on this project's 2-core hosts): fewer rows are padded to 4.
PACKED_MIN_ROWS = 4


class ParallelLinear(nn.Linear):
    """A linear layer split across ranks.

    column: each rank holds a slice of the output features (no communication).
    row: each rank holds a slice of the input features; partial outputs are summed by all_reduce.
    """

    packed: torch.Tensor | None = None  # the weight in oneDNN's blocked layout, once pack_for_cpu ran

    def __init__(self, in_features: int, out_features: int, tp: TensorParallel, split: str, bias: bool = False) -> None:
        self.split, self.tp = split, tp
        if split == "column":
            out_features = tp.shard(out_features, "output features")
        else:
            in_features = tp.shard(in_features, "input features")
        super().__init__(in_features, out_features, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.split == "column":
            return self._matmul(x, self.bias)
        out = self.tp.all_reduce(self._matmul(x, None))
        return out if self.bias is None else out + self.bias  # the bias once, after the sum

    def _matmul(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.packed is None:
            return nn.functional.linear(x, self.weight, bias)
        rows = x.shape[0]
        if rows < PACKED_MIN_ROWS:  # padded, as engines pad a batch to the sizes their kernels run best
            x = torch.cat([x, x.new_zeros(PACKED_MIN_ROWS - rows, x.shape[1])])
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")[:rows]

    def shard_dim(self, param_name: str) -> int | None:
        """Which dimension of the full checkpoint tensor this rank slices (None: replicated)."""
        if self.split == "column":
            return 0
        return 1 if param_name == "weight" else None


class RotaryEmbedding(nn.Module):
    cos: torch.Tensor  # buffers [max_position, head_dim], registered in __init__
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_position: int, theta: float) -> None:
        super().__init__()
        # Explicitly on CPU, also while the model is built on the meta device; moved with the model.
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim)
        freqs = torch.outer(torch.arange(max_position, dtype=torch.float32, device="cpu"), inv_freq)
        self.register_buffer("cos", freqs.cos().repeat(1, 2), persistent=False)
        self.register_buffer("sin", freqs.sin().repeat(1, 2), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate x [N, heads, head_dim] by each token's position (Hugging Face's half-split layout)."""
        cos = self.cos[positions].unsqueeze(1).to(x.dtype)
        sin = self.sin[positions].unsqueeze(1).to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, shape: ModelShape, tp: TensorParallel, layer: int) -> None:
        super().__init__()
        d, hd = shape.hidden_size, shape.head_dim
        self.layer = layer
        self.heads = tp.shard(shape.num_heads, "num_heads")
        self.kv_heads = tp.shard(shape.num_kv_heads, "num_kv_heads")
        self.head_dim = hd
        self.q_proj = ParallelLinear(d, shape.num_heads * hd, tp, "column", bias=shape.qkv_bias)
        self.k_proj = ParallelLinear(d, shape.num_kv_heads * hd, tp, "column", bias=shape.qkv_bias)
        self.v_proj = ParallelLinear(d, shape.num_kv_heads * hd, tp, "column", bias=shape.qkv_bias)
        self.o_proj = ParallelLinear(shape.num_heads * hd, d, tp, "row")

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, rope: RotaryEmbedding, meta: AttentionMetadata, cache: KVCache
    ) -> torch.Tensor:
        n = x.shape[0]
        q = rope(self.q_proj(x).view(n, self.heads, self.head_dim), positions)
        k = rope(self.k_proj(x).view(n, self.kv_heads, self.head_dim), positions)
        v = self.v_proj(x).view(n, self.kv_heads, self.head_dim)
        out = attention(q, k, v, self.layer, meta, cache)
        return self.o_proj(out.reshape(n, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, shape: ModelShape, tp: TensorParallel) -> None:
        super().__init__()
        d, f = shape.hidden_size, shape.intermediate_size
        self.gate_proj = ParallelLinear(d, f, tp, "column")
        self.up_proj = ParallelLinear(d, f, tp, "column")
        self.down_proj = ParallelLinear(f, d, tp, "row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, shape: ModelShape, tp: TensorParallel, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.self_attn = Attention(shape, tp, layer)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)
        self.mlp = MLP(shape, tp)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, rope: RotaryEmbedding, meta: AttentionMetadata, cache: KVCache
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), positions, rope, meta, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """Hugging Face's `model.` prefix: embeddings, layers, final norm."""

    def __init__(self, shape: ModelShape, tp: TensorParallel) -> None:
        super().__init__()
        # An explicit weight skips nn.Embedding's random init (slow on the meta device, replaced anyway).
        self.embed_tokens = nn.Embedding(
            shape.vocab_size, shape.hidden_size, _weight=torch.empty(shape.vocab_size, shape.hidden_size)
        )
        self.layers = nn.ModuleList(DecoderLayer(shape, tp, i) for i in range(shape.num_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_norm_eps)


class CausalLM(nn.Module):
    """The decoder plus LM head. Embeddings and LM head are replicated on every rank."""

    def __init__(self, shape: ModelShape, tp: TensorParallel | None = None) -> None:
        super().__init__()
        self.shape = shape
        self.tp = tp or TensorParallel()
        self.model = Backbone(shape, self.tp)
        self.rope = RotaryEmbedding(shape.head_dim, shape.max_position, shape.rope_theta)
        if not shape.tie_embeddings:
            self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata, cache: KVCache
    ) -> torch.Tensor:
        """Hidden states [N, hidden] of a flat batch of tokens (prefill chunks and decodes mixed)."""
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, positions, self.rope, meta, cache)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits [N, vocab] of the given hidden states."""
        head = self.model.embed_tokens.weight if self.shape.tie_embeddings else self.lm_head.weight
        return nn.functional.linear(hidden, head).float()


def _shard_dim(model: CausalLM, name: str) -> int | None:
    module_name, _, param_name = name.rpartition(".")
    module = model.get_submodule(module_name)
    return module.shard_dim(param_name) if isinstance(module, ParallelLinear) else None


def _random_tensor(name: str, shape: torch.Size, seed: int, device: torch.device, tied: bool) -> torch.Tensor:
    """A seeded tensor for one full (unsharded) parameter; same values on every rank."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, device=device)
    if name.endswith(".bias"):
        return torch.zeros(shape, device=device)
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    # N(0, 1/fan_in) keeps activations and logits at unit scale, so sampling at temperature 1 stays
    # diverse. Embeddings ~ N(0, 1) dominate the residual stream, so even greedy output varies with
    # the token; tied ones get the linear scale, or every token would predict itself.
    std = 1.0 if "embed_tokens" in name and not tied else shape[-1] ** -0.5
    return torch.empty(shape, device=device).normal_(0.0, std, generator=gen)


def load_model(
    shape: ModelShape, tp: TensorParallel, dtype: torch.dtype, device: torch.device, seed: int = 0, weights: str = ""
) -> CausalLM:
    """Build the model for this rank: from a local safetensors file (HF names) or seeded random weights."""
    with torch.device("meta"):
        model = CausalLM(shape, tp)
    checkpoint = None
    if weights:
        from safetensors import safe_open

        checkpoint = safe_open(weights, framework="pt", device="cpu")
        available = set(checkpoint.keys())
    params = {}
    for name, meta_param in model.named_parameters():
        dim = _shard_dim(model, name)
        full_shape = list(meta_param.shape)
        if dim is not None:
            full_shape[dim] *= tp.world_size
        if checkpoint is None:
            full = _random_tensor(name, torch.Size(full_shape), seed, device, shape.tie_embeddings)
        else:
            if name not in available:
                raise ValueError(f"{weights}: tensor {name} is missing")
            full = checkpoint.get_tensor(name)
            if list(full.shape) != full_shape:
                raise ValueError(f"{weights}: {name} has shape {list(full.shape)}, preset needs {full_shape}")
        if dim is not None:
            full = full.chunk(tp.world_size, dim)[tp.rank]
        params[name] = nn.Parameter(full.to(device=device, dtype=dtype).contiguous(), requires_grad=False)
    model.load_state_dict(params, assign=True, strict=True)
    model.rope.to(device)
    return model.eval()


def pack_for_cpu(model: CausalLM) -> None:
    """Keep each layer's weight in oneDNN's blocked layout, as CPU engines do (vLLM's CPU backend
    prepacks its linear weights with oneDNN), and drop the plain copy.

    torch's plain CPU matmul of 2-8 rows takes twice as long as of one row, so a step of a small
    batch would cost twice a step of one and no longer be its weight reads; packed, the `wide`
    preset's decode step is flat (one thread: 25 ms at 1, 2 and 4 sequences, 36 at 8, against
    25, 53, 61 and 73 plain: bench/packed_weights.py). Float32 and bfloat16 only: oneDNN's
    float16 needs CPU support.
    """
    dtype = model.model.norm.weight.dtype
    if not torch.backends.mkldnn.is_available() or dtype not in (torch.float32, torch.bfloat16):
        return
    for module in model.modules():
        if isinstance(module, ParallelLinear):
            module.packed = torch.ops.mkldnn._reorder_linear_weight(module.weight, None)
            module.weight = None  # type: ignore[assignment]  # the packed copy replaces it
