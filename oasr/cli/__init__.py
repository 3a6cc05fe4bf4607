"""The ``oasr`` command line (Typer)."""
