#!/usr/bin/env bash
# One device call of benchmarks, after `gpu_session.sh stage1` / `stage2` / `stage3` (and a
# call that carries staging/p4): `bash benchmarks/gpu_session.sh exec bash benchmarks/gpu_round.sh NAME`.
# Each step has its own time limit and log. Only a few files come back from a call, so every
# log and result is written under $R and packed into one $OUT/round_NAME.tgz at the end.
set -uo pipefail
K=/root/keep
D=$K/librispeech-test-other-70
R=$K/round/${1:?baseline|models|archs|combo|archs2|final2|final|final3|final4|e2e|merged|waves|gpu_first|verify|product|gpu_tests|blocks|blocks_short|wide|wide_short|detector|detector_short|steady|record_a|record_b|tdt_min|conv_min|lean|tests_prof|zip_prof}
rm -rf "$R"; mkdir -p "$R"
trap 'tar czf "$OUT/round_$1.tgz" -C "$R" . ; ls -R "$R" | head -40' EXIT
step() {  # step NAME SECONDS CMD...
    local name=$1 secs=$2
    shift 2
    local t0=$SECONDS
    timeout "$secs" "$@" > "$R/$name.log" 2>&1
    echo "== $name rc=$? $((SECONDS - t0))s"
    tail -n "${TAIL:-6}" "$R/$name.log" | cut -c1-220
}
pyc_report() {  # the bytecode cache gpu_session.sh keeps: how many files, from which trees
    local pre=${PYTHONPYCACHEPREFIX:-/none}
    echo "cached .pyc files after: $(find "$pre" -name '*.pyc' 2>/dev/null | wc -l)" \
        | tee "$R/pyc_after.txt"
    find "$pre" -name '*.pyc' 2>/dev/null | sed "s|^$pre||" | cut -d/ -f1-8 | sort | uniq -c \
        | sort -rn | head -15 | tee -a "$R/pyc_after.txt"
    return 0  # head closing the pipe early is not a failure of the round
}
zip_profile() {  # zip_profile SECONDS: the Zipformer-large shape built, converted, profiled
    TAIL=2 step build_zip 90 python3 benchmarks/record_models.py zipformer_large \
        /tmp/oasr_min/src_zip --convert /tmp/oasr_min/bundle_zip
    TAIL=12 step profile_zip "$1" python3 benchmarks/gpu_profile.py \
        --bundle /tmp/oasr_min/bundle_zip --audio "$D/audio" \
        --batch 256 --repeat 2 --out "$R/profile_zipformer_large.txt"
}
case "$1" in
baseline)  # every gpu test, with the tracebacks of the failures
    TAIL=25 step pytest_gpu 420 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    ;;
models)  # the layers' kernels, every gpu test, the new kernel and the VAD on the long recording
    TAIL=12 step pytest_gpu 260 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests
    step gpu_rnn 80 python3 benchmarks/gpu_rnn.py --out "$R/gpu_rnn.json" --data "$K"
    step vad 110 python3 benchmarks/vad_longform.py --device cuda --vad silero,fsmn,none \
        --batch 16 --reps 1 --out "$R/gpu_vad_longform.json"
    step parakeet 120 python3 benchmarks/gpu_parakeet.py "$R/gpu_parakeet.json" --data "$D" \
        --batches 64,128 --dtype bf16 --minutes 10
    ;;
archs)
    step qwen2audio 170 python3 benchmarks/gpu_qwen2audio.py "$R/gpu_qwen2audio.json" \
        --data "$D/audio"
    step zipformer 90 python3 benchmarks/gpu_zipformer.py "$R/gpu_zipformer.json" --data "$D" \
        --batch 64 --reps 5
    step paraformer 80 python3 benchmarks/gpu_paraformer.py "$R/gpu_paraformer.json" \
        --data "$D" --minutes 10
    step stream_conc 150 python3 benchmarks/gpu_stream_concurrency.py "$R/stream_conc" \
        --data "$K" --seconds 6 --whisper-counts 1,8,32
    step stream_longform 90 python3 benchmarks/stream_longform.py "$R/stream_longform.json" \
        --device cuda
    ;;
combo)  # one call holding what a short device budget allows
    TAIL=4 step pytest_gpu 90 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests
    TAIL=3 step gpu_rnn 40 python3 benchmarks/gpu_rnn.py --out "$R/gpu_rnn.json" --data "$K"
    TAIL=8 step stream_longform 90 python3 benchmarks/stream_longform.py \
        "$R/gpu_stream_longform.json" --device cuda
    TAIL=3 step parakeet 75 python3 benchmarks/gpu_parakeet.py "$R/gpu_parakeet.json" \
        --data "$D" --batches 64,128 --dtype bf16 --minutes 10
    TAIL=3 step qwen2audio 100 python3 benchmarks/gpu_qwen2audio.py "$R/gpu_qwen2audio.json" \
        --data "$D/audio"
    TAIL=3 step zipformer 45 python3 benchmarks/gpu_zipformer.py "$R/gpu_zipformer.json" \
        --data "$D" --batch 64 --reps 3
    TAIL=3 step paraformer 40 python3 benchmarks/gpu_paraformer.py "$R/gpu_paraformer.json" \
        --data "$D" --minutes 5
    TAIL=3 step stream_conc 70 python3 benchmarks/gpu_stream_concurrency.py "$R/stream_conc" \
        --data "$K" --seconds 3 --whisper-counts 1,8
    ;;
archs2)  # every architecture's numbers and the stream concurrency, after the merges
    TAIL=6 step pytest_gpu 100 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests
    TAIL=3 step parakeet 75 python3 benchmarks/gpu_parakeet.py "$R/gpu_parakeet.json" \
        --data "$D" --batches 64,128 --dtype bf16 --minutes 10
    TAIL=3 step qwen2audio 90 python3 benchmarks/gpu_qwen2audio.py "$R/gpu_qwen2audio.json" \
        --data "$D/audio"
    TAIL=3 step zipformer 50 python3 benchmarks/gpu_zipformer.py "$R/gpu_zipformer.json" \
        --data "$D" --batch 64 --reps 3
    TAIL=3 step zipformer_stream 25 python3 benchmarks/gpu_zipformer_stream.py \
        "$R/gpu_zipformer_stream.json" --dtype bf16
    TAIL=3 step paraformer 50 python3 benchmarks/gpu_paraformer.py "$R/gpu_paraformer.json" \
        --data "$D" --minutes 5
    TAIL=4 step stream_conc 90 python3 benchmarks/gpu_stream_concurrency.py "$R/stream_conc" \
        --data "$K" --seconds 3 --whisper-counts 1,8,32
    TAIL=4 step nemotron_stream 50 python3 benchmarks/gpu_nemotron_stream.py \
        "$R/gpu_nemotron_stream.json" --device cuda --streams 1,8,32,64,128,256
    ;;
final2)  # the product path after the input/alignment work, and the new streaming heads
    TAIL=30 step e2e 240 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K"
    TAIL=8 step word_timings 150 python3 benchmarks/word_timings_longform.py --device cuda \
        --arms oasr,transformers --out "$R/gpu_word_timings_longform.json"
    TAIL=4 step align 40 python3 benchmarks/gpu_align.py "$R/gpu_align.json"
    TAIL=6 step conditioning 90 python3 benchmarks/longform_conditioning.py \
        "$R/gpu_longform_conditioning.json" --device cuda
    ;;
merged)  # after a wave of merges: every gpu test first, then host memory at scale
    TAIL=40 step pytest_gpu 330 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=5 step memory_rows 200 python3 benchmarks/cpu_memory_rows.py --clip librispeech \
        --model default --device cuda --sizes 100 1000 10000 --json "$R/gpu_memory_rows.json"
    ;;
waves)  # every gpu test first; then host memory at scale, fp8, the GPU WFST search
    TAIL=40 step pytest_gpu 260 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=5 step memory_rows 150 python3 benchmarks/cpu_memory_rows.py --clip librispeech \
        --model default --device cuda --sizes 100 1000 10000 --json "$R/gpu_memory_rows.json"
    TAIL=12 step fp8 110 python3 benchmarks/gpu_fp8.py "$R/gpu_fp8.json" --repeat-minutes 5
    TAIL=8 step wfst 60 python3 benchmarks/gpu_wfst.py --out "$R/gpu_wfst.json"
    TAIL=5 step memory_rows_cpu 100 python3 benchmarks/cpu_memory_rows.py --clip librispeech \
        --model default --device cpu --threads 16 --sizes 100 1000 \
        --json "$R/cpu16_memory_rows.json"
    ;;
gpu_first)  # every gpu test first (tracebacks), then fp8 (the activation kernel), the WFST search
    TAIL=45 step pytest_gpu 340 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=14 step fp8 110 python3 benchmarks/gpu_fp8.py "$R/gpu_fp8.json" --repeat-minutes 5
    TAIL=12 step wfst 90 python3 benchmarks/gpu_wfst.py --out "$R/gpu_wfst.json"
    ;;
verify)  # after fixes: every gpu test, then fp8 and the WFST search again
    TAIL=12 step pytest_gpu 170 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=8 step fp8 40 python3 benchmarks/gpu_fp8.py "$R/gpu_fp8.json" --repeat-minutes 5
    TAIL=12 step wfst 40 python3 benchmarks/gpu_wfst.py --out "$R/gpu_wfst.json"
    ;;
product)  # the whole `oasr transcribe` process beside the engine and transformers; Parakeet fp8
    TAIL=30 step e2e 300 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K"
    TAIL=6 step parakeet_fp8 170 python3 benchmarks/gpu_parakeet.py "$R/gpu_parakeet_fp8.json" \
        --data "$D" --batches 64,128 --dtype bf16 --minutes 10 --quantization fp8 --no-peer
    ;;
final3)  # every gpu test; the WFST peer; Parakeet fp8 timed >= 10 s a point with its profile;
    # fp8 on Whisper base (after stage5..9)
    TAIL=14 step pytest_gpu 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=20 step wfst 60 python3 benchmarks/gpu_wfst.py --out "$R/gpu_wfst.json"
    TAIL=6 step parakeet_fp8 200 python3 benchmarks/gpu_parakeet.py "$R/gpu_parakeet_fp8.json" \
        --data "$D" --batches 64,128 --dtype bf16 --minutes 10 --quantization fp8 --no-peer \
        --min-wall 10 --profile
    TAIL=8 step fp8_base 100 python3 benchmarks/gpu_fp8.py "$R/gpu_fp8_whisper_base.json" \
        --model "$K/whisper-base" --repeat-minutes 5
    ;;
final4)  # every gpu test (the new e2e fixtures, the CPU coverage thread); riva's wider beam;
    # fp8 on the large-v3-turbo shape; the product path again
    TAIL=14 step pytest_gpu 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=30 step wfst 60 python3 benchmarks/gpu_wfst.py --out "$R/gpu_wfst.json"
    TAIL=8 step fp8_turbo 150 python3 benchmarks/gpu_fp8.py "$R/gpu_fp8_turbo.json" \
        --shape large-v3-turbo --max-new-tokens 32 --batch-sizes 64 --repeat-minutes 20 \
        --no-gemms
    ;;
blocks)  # every gpu test, then the product path (the coverage detector's blocks ahead of the seek)
    TAIL=16 step pytest_gpu 280 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=30 step e2e 220 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K"
    ;;
blocks_short)  # a short device budget: the product path first, then the transcribe-path gpu tests
    TAIL=30 step e2e 200 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K" \
        --minutes 30 --no-transformers --no-profile
    TAIL=16 step pytest_gpu 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests/transcribe tests/api tests/streaming
    ;;
wide)  # the transcribe-path gpu tests, then the product path on an hour a manifest: -b 256
    # (the default) against 64, many long rows in flight (the long recording in slices), --vad silero,
    # transformers in the same run, py-spy per thread
    TAIL=12 step pytest_gpu 90 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests/transcribe tests/api tests/engine/decode
    TAIL=40 step e2e 330 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K" \
        --minutes 60 --also-batch-sizes 64 --long-pieces 8
    ;;
wide_short)  # what a short device budget allows of `wide`: 30 minutes a manifest, no peer
    TAIL=40 step e2e 240 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K" \
        --minutes 30 --no-transformers --also-batch-sizes 64 --long-pieces 8
    ;;
detector)  # every gpu test first (the coverage detector on the GPU), then the product path as
    # `wide` but at the default -b only (many long rows, --vad silero, transformers, py-spy per
    # thread) beside the words-on runs with the detector on the CPU as before
    TAIL=16 step pytest_gpu 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=40 step e2e 320 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K" \
        --minutes 60 --long-pieces 8 --baseline-cpu-detector
    pyc_report
    ;;
detector_short)  # what a short device budget allows of `detector`: 30 minutes a manifest, no peer
    TAIL=16 step pytest_gpu 170 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    TAIL=40 step e2e 250 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K" \
        --minutes 30 --long-pieces 8 --baseline-cpu-detector --no-transformers
    pyc_report
    ;;
steady)  # the transcribe-path gpu tests, then the product path on MINUTES (default 150) a
    # manifest (and the short runs with a 1-ms GIL switch interval), the engine and transformers'
    # generate on the same audio; PYTEST_S / E2E_S bound the two steps for a short budget
    TAIL=12 step pytest_gpu "${PYTEST_S:-100}" python3 -m pytest -m gpu -q -p no:cacheprovider \
        -rfEs --tb=short tests/transcribe tests/api tests/test_registry.py
    TAIL=40 step e2e "${E2E_S:-290}" python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" \
        --data "$K" --minutes "${MINUTES:-150}" --long-pieces 8 --bench-batch-sizes 64,256 \
        --also-switch-interval-ms 1
    pyc_report
    ;;
record_a)  # every gpu test first, then the benchmark of record for the transducer / CTC
    # families (Parakeet TDT and CTC beside transformers, the icefall Zipformer-large shape;
    # FAMILIES overrides the list)
    TAIL=16 step pytest_gpu "${PYTEST_S:-170}" python3 -m pytest -m gpu -q -p no:cacheprovider \
        -rfEs --tb=short tests
    TAIL=60 step record "${RECORD_S:-420}" python3 benchmarks/gpu_record.py "$R/record" \
        --data "$K" --families "${FAMILIES:-parakeet_tdt,parakeet_ctc,zipformer_large}" --profile \
        --py-spy "${PY_SPY:-}"
    pyc_report
    ;;
record_b)  # the benchmark of record for the Whisper families (the large-v3-turbo shape, tiny.en
    # real weights), each beside transformers, py-spy per thread over tiny.en's words-on run
    TAIL=60 step record "${RECORD_S:-510}" python3 benchmarks/gpu_record.py "$R/record" \
        --data "$K" --families whisper_large_v3_turbo,whisper_tiny_en --profile \
        --py-spy "${PY_SPY:-whisper_tiny_en}"
    ;;
tdt_min)  # a short budget: the gpu tests (PYTEST_PATHS, default all), then the TDT search
    # alone and the first-shape probe on a freshly built Parakeet-TDT-0.6b-shape bundle
    # shellcheck disable=SC2086
    TAIL=16 step pytest_gpu "${PYTEST_S:-170}" python3 -m pytest -m gpu -q -p no:cacheprovider \
        -rfEs --tb=short ${PYTEST_PATHS:-tests}
    TAIL=4 step build 150 python3 benchmarks/record_models.py parakeet_tdt /tmp/oasr_min/src \
        --convert /tmp/oasr_min/bundle
    TAIL=8 step tdt_loop 120 python3 benchmarks/gpu_tdt_loop.py "$R/gpu_tdt_loop.json" \
        --bundle /tmp/oasr_min/bundle --audio "$D"
    TAIL=8 step first_shape 90 python3 benchmarks/gpu_first_shape.py "$R/gpu_first_shape.json" \
        --bundle /tmp/oasr_min/bundle
    ;;
conv_min)  # a short budget: the gpu tests of the layers and the models with Conv2d front-ends,
    # then, most telling first, the first-shape probe and `oasr bench` on the Parakeet TDT and
    # CTC shapes (b256, bf16)
    # shellcheck disable=SC2086
    TAIL=16 step pytest_gpu "${PYTEST_S:-170}" python3 -m pytest -m gpu -q -p no:cacheprovider \
        -rfEs --tb=short ${PYTEST_PATHS:-tests/layers tests/models tests/streaming tests/engine/decode}
    for fam in tdt ctc; do
        TAIL=2 step "build_$fam" 150 python3 benchmarks/record_models.py "parakeet_$fam" \
            "/tmp/oasr_min/src_$fam" --convert "/tmp/oasr_min/bundle_$fam"
        if [ "$fam" = tdt ]; then
            TAIL=8 step first_shape 90 python3 benchmarks/gpu_first_shape.py \
                "$R/gpu_first_shape.json" --bundle /tmp/oasr_min/bundle_tdt
            cp "$R/gpu_first_shape.json" "$OUT/" 2>/dev/null
        fi
        TAIL=4 step "bench_$fam" 150 python3 -m oasr.cli.app bench "$D/audio/*.flac" \
            -m "/tmp/oasr_min/bundle_$fam" --device cuda --dtype bf16 -b 256 \
            --repeat-minutes "${BENCH_MINUTES:-200}" --json "$R/bench_$fam.json"
        cp "$R/bench_$fam.json" "$OUT/" 2>/dev/null
    done
    ;;
lean)  # a short budget: every gpu test; the benchmark of record for the Parakeet-TDT shape
    # (its profile: phases, the pipelined ticks and the SDPA attention each flipped; py-spy of
    # its words-on run); then where the Zipformer-large shape's time goes (its kernel profile)
    # (PYTEST_S=0: the tests ran in an earlier call of the same machine)
    if [ "${PYTEST_S:-130}" -gt 0 ]; then
        TAIL=16 step pytest_gpu "${PYTEST_S:-130}" python3 -m pytest -m gpu -q \
            -p no:cacheprovider -rfEs --tb=short tests
    fi
    TAIL=40 step record "${RECORD_S:-230}" python3 benchmarks/gpu_record.py "$R/record" \
        --data "$K" --families parakeet_tdt --profile --py-spy parakeet_tdt
    if [ "${ZIP:-1}" = 1 ]; then
        zip_profile 100
    fi
    ;;
tests_prof)  # the least budget: every gpu test, then (PROF_S > 0) the Parakeet-TDT shape's
    # profile (phases, the pipelined ticks and the SDPA attention each flipped)
    TAIL=16 step pytest_gpu "${PYTEST_S:-140}" python3 -m pytest -m gpu -q -p no:cacheprovider \
        -rfEs --tb=short tests
    cp "$R/pytest_gpu.log" "$OUT/" 2>/dev/null  # back even if the call is cut short
    if [ "${PROF_S:-0}" -gt 0 ]; then
        TAIL=2 step build_tdt 60 python3 benchmarks/record_models.py parakeet_tdt \
            /tmp/oasr_min/src_tdt --convert /tmp/oasr_min/bundle_tdt
        TAIL=8 step profile_tdt "$PROF_S" python3 benchmarks/gpu_profile.py \
            --bundle /tmp/oasr_min/bundle_tdt --audio "$D/audio" --batch 256 --dtype bf16 \
            --out "$R/profile_parakeet_tdt.txt"
    fi
    ;;
zip_prof)  # the Zipformer-large shape alone: build, convert, its kernel and module profile
    zip_profile "${PROF_S:-100}"
    ;;
gpu_tests)  # every gpu test alone, with the tracebacks of the failures (the e2e in its own call)
    TAIL=16 step pytest_gpu 480 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --tb=short tests
    ;;
e2e)  # the whole `oasr transcribe` process beside the engine and transformers
    TAIL=30 step e2e 300 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K"
    ;;
final)
    TAIL=12 step pytest_gpu 200 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests
    step word_timings 150 python3 benchmarks/word_timings_longform.py --device cuda \
        --arms oasr,transformers --out "$R/gpu_word_timings_longform.json"
    TAIL=30 step e2e 240 python3 benchmarks/gpu_transcribe_e2e.py "$R/e2e" --data "$K"
    ;;
esac
