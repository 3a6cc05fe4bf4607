"""Shared test fixtures that build small models (not tests themselves)."""
