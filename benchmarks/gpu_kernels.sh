#!/usr/bin/env bash
# One device call on the H200 for the CUDA kernels (no model weights needed): build oasr._C,
# run the GPU tests of the kernels and of what dispatches to them, then the kernel benchmarks.
# Carries staging/p4 (wheels the image lacks). Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site staging/p4/whl/*.whl > "$OUT/wheels.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD
export PATH=$PATH:/usr/local/cuda/bin
which nvcc > "$OUT/nvcc.txt" 2>&1; nvcc --version >> "$OUT/nvcc.txt" 2>&1
python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"

timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider -rf \
    ${TESTS:-tests/kernels tests/features tests/engine/decode tests/models/conformer} \
    > "$OUT/pytest_kernels.txt" 2>&1
grep -E "passed|failed|Error|error" "$OUT/pytest_kernels.txt" | tail -15

for b in ${BENCHES:-gpu_ctc_prefix_beam gpu_features}; do
    timeout 150 python3 "benchmarks/$b.py" --out "$OUT/$b.json" > "$OUT/$b.log" 2>&1
    echo "== $b rc=$?"; tail -12 "$OUT/$b.log"
done
