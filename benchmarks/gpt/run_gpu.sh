#!/usr/bin/env bash
# Every GPU check of the gpt/blox attention cores in one go, on a GPU machine whose Python already
# has JAX with CUDA, optax, orbax, tokenizers and safetensors (the workspace is put on PYTHONPATH,
# nothing is installed). Logs go to $OUT (default ./gpu-out); RESULTS-gpu.md is filled from them.
# Run from anywhere: bash benchmarks/gpt/run_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$(ls -d "$PWD"/packages/*/src | paste -sd:):$PWD/benchmarks/gpt
export JAX_PLATFORMS= WANDB_MODE=disabled PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c "import jax, jaxlib; print('jax', jax.__version__, jax.devices()); from jax._src.lib import cuda_versions as c; print('cudnn', c.cudnn_get_version() if c else None)"
  git log -1 --format='commit %h %s' 2>/dev/null
} 2>&1 | tee "$OUT/env.log"
# 1. Equality of the cores (float32 at full matmul precision, as on CPU).
JAX_DEFAULT_MATMUL_PRECISION=highest timeout 240 $PY -m pytest -q -p no:cacheprovider --timeout=200 \
  packages/blox-params/tests/test_attention_implementations.py packages/gpt-models/tests/test_attention.py \
  2>&1 | tee "$OUT/equality.log" | tail -15
# 2. gpt2-small: pre-flight estimate vs measured peak, tok/s and MFU per core, one process each.
for impl in ${IMPLS:-cudnn xla blocked}; do timeout 130 $PY benchmarks/gpt/gpu_checks.py --impls "$impl" --steps ${STEPS:-20} 2>&1 | tail -3; done | tee "$OUT/gpt2small.log"
# 3. Train-step time of each core (bf16) on the tiny and ~10M shapes.
for shape in tiny "~10M"; do timeout 80 $PY benchmarks/gpt/attention_impls.py "$shape" --rounds 3 2>&1 | tail -6; done | tee "$OUT/impls.log"
