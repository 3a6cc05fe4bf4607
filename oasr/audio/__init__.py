"""Audio input: decode any supported container to mono float32 at the model's rate.

``load_audio`` returns a whole recording or a segment of it; ``iter_audio_chunks`` walks a long
recording in bounded memory; ``audio_info`` reads the header only. Failures raise
``AudioDecodeError`` (a ``ValueError``) whose message names the source, the problem and the fix.
"""

from oasr.audio.decode import AudioInfo, audio_info, iter_audio_chunks, load_audio
from oasr.audio.errors import AudioDecodeError, AudioSource, describe_source, printable
from oasr.audio.resample import RESAMPLE_QUALITY

__all__ = [
    "RESAMPLE_QUALITY",
    "AudioDecodeError",
    "AudioInfo",
    "AudioSource",
    "audio_info",
    "describe_source",
    "iter_audio_chunks",
    "load_audio",
    "printable",
]
