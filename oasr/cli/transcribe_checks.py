"""``oasr transcribe``'s command-line-only flag values checked before anything is loaded: each
bad value is one line saying what is wrong and what to pass instead (``FlagError``). The run
options the API shares (device, dtype, batch size, ...) are checked by
:meth:`oasr.transcribe.options.RunOptions.validate`."""

from __future__ import annotations

__all__ = ["FlagError", "check_flags"]


class FlagError(ValueError):
    """A flag value the run cannot use; the message names the flag and the fix."""


def check_flags(*, limit: int | None, max_cue_chars: int, max_cue_seconds: float,
                cue_gap: float) -> None:
    """Every value-range check of the command-line-only flags; raises :class:`FlagError`."""
    if limit is not None and limit < 1:
        raise FlagError(f"--limit {limit}: must be at least 1 (leave it out for every row)")
    if max_cue_chars < 1:
        raise FlagError(f"--max-cue-chars {max_cue_chars}: must be at least 1")
    if not max_cue_seconds > 0:
        raise FlagError(f"--max-cue-seconds {max_cue_seconds}: must be > 0")
    if cue_gap < 0:
        raise FlagError(f"--cue-gap {cue_gap}: must be >= 0")
