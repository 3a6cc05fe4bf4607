"""Keep pyarrow from importing pandas in a process that never gives it pandas objects.

At its first conversion (``pa.array``, building a table) pyarrow asks whether pandas is
installed, and answers by importing it: 0.5-0.8 s of ``oasr transcribe``'s start-up, only to
learn that a Python list is not a pandas Series. :func:`answer_no_pandas` makes pyarrow ask once
while the import of pandas fails, so it records "no pandas" for those checks. A later explicit
conversion to pandas (``to_pandas``) still imports it for real: pyarrow retries the import for
every call that needs pandas. Only for processes whose code never passes pyarrow a pandas
object (the CLI commands): pyarrow would not recognise a DataFrame given to ``pa.table``.

Untyped ``pa.array`` calls still import pandas (Arrow's C++ type inference looks for pandas
scalars); the transcribe path gives its arrays their types.
"""

from __future__ import annotations

import sys
from typing import Any


class _NoPandas:
    """A meta-path finder that refuses pandas (and nothing else)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def answer_no_pandas() -> None:
    """Make pyarrow's "is pandas installed?" check answer no without importing it; nothing to
    do when pandas is already imported."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([], type=pa.int8())  # the first conversion: pyarrow's pandas check runs here
    finally:
        sys.meta_path.remove(finder)
