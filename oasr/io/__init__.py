"""Reading manifests and writing transcription output (``oasr transcribe``'s two ends)."""

from oasr.io.manifest import (
    AUDIO_EXTENSIONS,
    ColumnMap,
    ManifestError,
    ManifestRow,
    count_rows,
    iter_manifest,
    passthrough_schema,
)
from oasr.io.schema import OUTPUT_COLUMNS, output_schema
from oasr.io.writer import FORMATS, OutputError, OutputRow, OutputWriter, resolve_output_path

__all__ = [
    "AUDIO_EXTENSIONS",
    "FORMATS",
    "OUTPUT_COLUMNS",
    "ColumnMap",
    "ManifestError",
    "ManifestRow",
    "OutputError",
    "OutputRow",
    "OutputWriter",
    "count_rows",
    "iter_manifest",
    "output_schema",
    "passthrough_schema",
    "resolve_output_path",
]
