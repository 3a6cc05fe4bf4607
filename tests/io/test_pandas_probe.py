"""pyarrow told "no pandas" once: typed conversions and Parquet I/O leave pandas unimported,
and an explicit ``to_pandas`` still imports it (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pandas", reason="pip install pandas (the probe matters only with it)")


def test_typed_conversions_do_not_import_pandas_and_to_pandas_still_works(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        import pyarrow as pa, pyarrow.parquet as pq
        from oasr.io.pandas_probe import answer_no_pandas
        answer_no_pandas()
        table = pa.Table.from_arrays([pa.array(["a", None], type=pa.string()),
                                      pa.array([1.5, 2.0], type=pa.float64())],
                                     names=["id", "x"])
        pq.write_table(table, {str(tmp_path / "t.parquet")!r})
        with pq.ParquetFile({str(tmp_path / "t.parquet")!r}) as f:
            assert f.read().to_pylist() == table.to_pylist()
        assert "pandas" not in sys.modules, "pandas imported"
        frame = table.to_pandas()
        assert "pandas" in sys.modules and list(frame["x"]) == [1.5, 2.0]
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
