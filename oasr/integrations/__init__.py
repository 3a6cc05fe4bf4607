"""Integrations with engines OASR runs inside (Ray Data); each imports its engine lazily."""
