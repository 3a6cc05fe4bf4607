"""Reading manifests and writing transcription output (``oasr transcribe``'s two ends)."""

from oasr.io.manifest import (
    AUDIO_EXTENSIONS,
    ColumnMap,
    ManifestError,
    ManifestRow,
    iter_manifest,
    passthrough_schema,
)
from oasr.io.manifest_ids import count_rows
from oasr.io.schema import OUTPUT_COLUMNS, output_schema
from oasr.io.subtitle_writer import SubtitleWriter, check_output_rows
from oasr.io.subtitles import CueOptions
from oasr.io.writer import (
    FORMATS,
    OutputError,
    OutputRow,
    OutputWriter,
    RowWriter,
    open_writer,
    resolve_output_path,
)

__all__ = [
    "AUDIO_EXTENSIONS",
    "FORMATS",
    "OUTPUT_COLUMNS",
    "ColumnMap",
    "CueOptions",
    "ManifestError",
    "ManifestRow",
    "OutputError",
    "OutputRow",
    "OutputWriter",
    "RowWriter",
    "SubtitleWriter",
    "check_output_rows",
    "count_rows",
    "iter_manifest",
    "open_writer",
    "output_schema",
    "passthrough_schema",
    "resolve_output_path",
]
