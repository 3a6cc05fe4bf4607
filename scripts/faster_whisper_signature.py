"""Record faster-whisper's ``WhisperModel.transcribe`` keywords and defaults as JSON, for the
test that checks ``oasr.load(...).transcribe`` accepts each name or refuses it with a reason
(``tests/api/test_faster_whisper_names.py``). faster-whisper is not a test dependency, so the
record is committed; regenerate it after an upgrade:

    pip download --no-deps faster-whisper -d /tmp/fw && unzip -q /tmp/fw/*.whl -d /tmp/fw/src
    python scripts/faster_whisper_signature.py /tmp/fw/src \
        > tests/fixtures/faster_whisper_transcribe.json

The source is parsed, not imported (importing it needs CTranslate2).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path


def signature(src_root: Path) -> dict[str, object]:
    tree = ast.parse((src_root / "faster_whisper" / "transcribe.py").read_text(encoding="utf-8"))
    version = (src_root / "faster_whisper" / "version.py").read_text(encoding="utf-8")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "WhisperModel":
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "transcribe":
                    args = fn.args.args[2:]  # self, audio
                    defaults = fn.args.defaults[-len(args):]
                    return {"version": version.split("=")[-1].strip().strip("\"'"),
                            "keywords": {a.arg: ast.unparse(d) for a, d in zip(args, defaults)}}
    raise SystemExit("WhisperModel.transcribe not found")


if __name__ == "__main__":
    print(json.dumps(signature(Path(sys.argv[1])), indent=2, ensure_ascii=False))
