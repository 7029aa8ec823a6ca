#!/usr/bin/env bash
# Device check for the GPU sampler (needs an NVIDIA GPU + driver + CUDA torch; < 5 minutes).
# Runs GpuCollector on the real NVML while torch runs idle / matmul / decode-like phases on
# GPU 0; prints per-phase signal means, PASS/FAIL checks, the sampler's CPU cost; writes the
# readings to bench/results/gpu_trace_device.jsonl (a replay trace). Not runnable without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "CUDA torch needed: torch.cuda.is_available() is False")'
exec timeout 300 "$PY" bench/gpu_sampler_check.py --phase "${PHASE:-15}" --trace "${TRACE:-bench/results/gpu_trace_device.jsonl}"
