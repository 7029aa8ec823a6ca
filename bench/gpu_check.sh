#!/usr/bin/env bash
# The reference engine on one CUDA GPU: Llama-3-8B shapes (seeded random weights) in bf16.
# Prints decode tokens/s at batch 1 and 32 next to the HBM-bandwidth roofline (default: H200,
# 4.8 TB/s; set HBM_TBPS=3.35 for an H100), then the GPU twin's modelled figures for the same GPU
# (TWIN_GPU=h100 for an H100). Needs ~40 GB of GPU memory; finishes in under 8 minutes.
#   bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
TBPS=${HBM_TBPS:-4.8}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; \
print('torch', torch.__version__, 'on', torch.cuda.get_device_name(0))"

echo "== sanity: tiny preset on CUDA (float32), batch 1 and 8"
timeout 90 "$PY" bench/server_bench.py decode --device cuda --presets tiny --batches 1,8

echo "== llama-3-8b shapes, bf16, 16 GB KV cache"
timeout 360 "$PY" bench/server_bench.py decode --device cuda --dtype bfloat16 --presets llama-3-8b \
    --batches 1,32 --kv-memory-gb 16 --hbm-tbps "$TBPS"

echo "== the twin's model of the same GPU (vLLM-calibrated, docs/twin.md): decode tokens/s at batch 1 and 32"
timeout 60 "$PY" bench/twin_bench.py decode-model --twin "${TWIN_GPU:-h200}:llama-3-8b"
