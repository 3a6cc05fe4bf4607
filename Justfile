# OASR developer tasks. `just --list` shows them.

venv := ".venv"
py := venv + "/bin/python"

# Create the virtual environment (CPU torch) and install OASR with its test extras.
setup:
    python3 -m venv {{venv}}
    {{py}} -m pip install --quiet --upgrade pip
    {{py}} -m pip install --quiet torch==2.13.0
    {{py}} -m pip install --quiet -e ".[test]"

# Run the test suite (GPU tests skip without CUDA).
test *ARGS:
    {{py}} -m pytest -q -n 2 {{ARGS}}

# Lint with ruff.
lint:
    {{venv}}/bin/ruff check oasr tests benchmarks

# Transcribe the bundled demo manifest with the packaged Whisper tiny.en.
demo:
    {{venv}}/bin/oasr transcribe manifests/demo.parquet -o demo.parquet

# CPU benchmark against transformers on the 70 bundled utterances (see benchmarks/README.md).
bench *ARGS:
    {{py}} benchmarks/cpu_transcribe_vs_transformers.py {{ARGS}}
