#!/usr/bin/env bash
# One device call on the H200: build oasr._C, the GPU tests, the engine benchmark against
# transformers (stage `all`), or `oasr bench --compare transformers` and the word-timing cost
# (stage `cli`). Results under $OUT.
#
# Weights travel in parts (a call carries 64 MiB): earlier calls copied staging/p1 and staging/p2
# (part_aa, part_ab, oasr_config.json, tokenizer/) to /root/keep; this one carries staging/p3
# (audio70.npz and wheels the image lacks) and joins them.
set -uo pipefail
K=/root/keep
OUT=${OUT:-/tmp/out}
mkdir -p "$K/bundle" "$OUT"
cp -r staging/p3/* "$K/"
cat "$K/part_aa" "$K/part_ab" > "$K/bundle/model.safetensors"
cp "$K/oasr_config.json" "$K/bundle/" && cp -r "$K/tokenizer" "$K/bundle/"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$K"/whl/*.whl > "$OUT/wheels.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD
python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
stage=${1:-all}

if [ "$stage" = cli ]; then
    timeout 300 python3 -c "from oasr.cli.app import main; main()" bench \
        manifests/librispeech-test-other-70.parquet --model "$K/bundle" --compare transformers \
        -b 1 -b 64 --repeat-minutes 30 --json "$OUT/oasr_bench.json" > "$OUT/oasr_bench.log" 2>&1
    tail -25 "$OUT/oasr_bench.log"
    timeout 200 python3 benchmarks/word_timing_cost.py --audio "$K/audio70.npz" \
        --bundle "$K/bundle" --device cuda --batch 64 --out "$OUT/word_timing_cost.json" \
        > "$OUT/word_timing_cost.log" 2>&1
    tail -6 "$OUT/word_timing_cost.log"
    timeout 120 python3 benchmarks/gpu_profile.py --bundle "$K/bundle" --audio "$K/audio70.npz" \
        --batch 64 --out "$OUT/profile_b64.txt" > "$OUT/profile.log" 2>&1
    tail -3 "$OUT/profile.log"
    exit 0
fi

if [ "$stage" = profile ]; then  # where a batch-64 pass spends its time, and the timing cost
    timeout 150 python3 benchmarks/gpu_profile.py --bundle "$K/bundle" --audio "$K/audio70.npz" \
        --batch 64 --out "$OUT/profile_b64.txt" > "$OUT/profile.log" 2>&1
    tail -3 "$OUT/profile.log"
    timeout 200 python3 benchmarks/word_timing_cost.py --audio "$K/audio70.npz" \
        --bundle "$K/bundle" --device cuda --batch 64 --out "$OUT/word_timing_cost.json" \
        > "$OUT/word_timing_cost.log" 2>&1
    tail -6 "$OUT/word_timing_cost.log"
    exit 0
fi

if [ "$stage" != bench ]; then  # stage bench: the engine benchmark alone
    OASR_TEST_BUNDLE="$K/bundle" OASR_TEST_AUDIO_NPZ="$K/audio70.npz" \
    timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider --continue-on-collection-errors \
        tests > "$OUT/pytest_gpu.txt" 2>&1
    tail -5 "$OUT/pytest_gpu.txt"
fi

timeout 300 python3 benchmarks/gpu_engine_vs_transformers.py --bundle "$K/bundle" \
    --audio "$K/audio70.npz" --batch-sizes "${BATCHES:-1,16,64,128,256}" --minutes 30 \
    --variant "ours_cap256:step_graph_max_captures=256" ${EXTRA_VARIANTS:-} --out "$OUT/engine_vs_transformers.json" \
    > "$OUT/engine_vs_transformers.log" 2>&1
tail -20 "$OUT/engine_vs_transformers.log"

