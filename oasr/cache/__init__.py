"""Caches the engine owns: the row-indexed decoder KV (``decoder_state``)."""
