"""The upstream oracle (PyPI ``zipformer``, icefall's code) for every Zipformer test here."""

from __future__ import annotations

import pytest

from tests.helpers.zipformer_oracle import ORACLE_MISSING, oracle


@pytest.fixture(scope="module")
def up():
    mod = oracle()
    if mod is None:
        pytest.skip(ORACLE_MISSING)
    return mod
