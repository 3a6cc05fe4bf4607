"""Zipformer2 (icefall) encoder."""
