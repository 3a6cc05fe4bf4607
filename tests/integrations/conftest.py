"""The CLI tests' fixtures (one torch thread, the tiny random Whisper bundle), shared here."""

from tests.cli.conftest import bundle, one_thread  # noqa: F401
