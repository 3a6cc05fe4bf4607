"""Graph files: OpenFST const and vector files read into the arrays kaldifst iterates, header
symbol tables skipped, damaged files refused by name; graphs saved beside a model, found by
name, cached until rewritten."""

from __future__ import annotations

import json

import numpy as np
import pytest

from oasr.graphs.decoding_graph import DecodingGraph
from oasr.graphs.lexicon import SymbolTable
from oasr.graphs.openfst import FstFormatError, read_fst_arrays, read_header
from oasr.graphs.store import (
    GraphError,
    GraphInfo,
    graph_names,
    load_graph,
    resolve_graph,
    save_graph,
)

kaldifst = pytest.importorskip("kaldifst")

TEXT = """0 1 3 7 0.5
0 2 0 8 1.25
1 1 4 0 -0.5
1 2 5 0 2
2 0 0 0 0.125
2 1.5
1 0.25
"""


def arcs_of(fst):
    out = []
    for s in kaldifst.StateIterator(fst):
        for a in kaldifst.ArcIterator(fst, s):
            out.append((s, a.ilabel, a.olabel, a.weight.value, a.nextstate))
    return out


@pytest.mark.parametrize("kind", ["const", "vector"])
def test_read_equals_kaldifsts_arcs(tmp_path, kind):
    fst = kaldifst.compile(TEXT)
    path = tmp_path / f"{kind}.fst"
    (kaldifst.StdConstFst(fst) if kind == "const" else kaldifst.StdVectorFst(fst)).write(
        str(path))
    assert read_header(path).fst_type == kind
    a = read_fst_arrays(path)
    got = list(zip(a.src.tolist(), a.ilabel.tolist(), a.olabel.tolist(), a.weight.tolist(),
                   a.next.tolist()))
    assert got == arcs_of(kaldifst.StdVectorFst(fst))
    assert a.start == 0
    assert a.final.tolist() == [np.inf, 0.25, 1.5]
    g = DecodingGraph.from_arrays(a)
    assert g.emit_offsets.tolist() == [0, 1, 3, 3] and g.eps_offsets.tolist() == [0, 1, 1, 2]
    assert g.emit_ilabel.tolist() == [3, 4, 5] and g.eps_next.tolist() == [2, 0]
    assert g.max_token == 4 and g.num_arcs == 5


def test_header_symbol_tables_are_skipped(tmp_path):
    syms = kaldifst.SymbolTable()
    for i, name in enumerate(["<eps>", "a", "b", "c", "d", "e", "f", "g", "h"]):
        syms.add_symbol(name, i)
    names = ["<eps>", "a", "b", "c", "d", "e", "f", "g", "h"]
    text = "\n".join(" ".join(names[int(x)] if 2 <= i <= 3 else x
                               for i, x in enumerate(line.split()))
                      for line in TEXT.splitlines()) + "\n"
    fst = kaldifst.compile(text, isymbols=syms, osymbols=syms, keep_isymbols=True,
                           keep_osymbols=True)
    path = tmp_path / "syms.fst"
    kaldifst.StdConstFst(fst).write(str(path))
    assert read_header(path).flags & 3 == 3
    assert read_fst_arrays(path).ilabel.tolist() == [3, 0, 4, 5, 0]


def test_damaged_files_are_refused(tmp_path):
    p = tmp_path / "x.fst"
    p.write_bytes(b"not an fst at all")
    with pytest.raises(FstFormatError, match="not an OpenFST binary"):
        read_fst_arrays(p)
    good = tmp_path / "g.fst"
    kaldifst.StdConstFst(kaldifst.compile(TEXT)).write(str(good))
    p.write_bytes(good.read_bytes()[:-10])
    with pytest.raises(FstFormatError, match="shorter than"):
        read_fst_arrays(p)


def test_save_load_and_find_by_name(tmp_path):
    bundle = tmp_path / "bundle"
    fst = kaldifst.compile(TEXT)
    words = SymbolTable({0: "<eps>", 7: "seven", 8: "eight"})
    info = GraphInfo(token_rule="entered", num_units=6, blank=0, build={"x": 1})
    path = save_graph(bundle / "graphs", "g1", fst, words, info, [("seven", (2, 3))])
    assert graph_names(bundle) == ["g1"]
    assert resolve_graph("g1", bundle) == path
    assert resolve_graph(str(path), None) == path
    loaded = load_graph(path)
    assert loaded.info.token_rule == "entered" and loaded.info.num_units == 6
    assert loaded.spellings == {"seven": [(2, 3)]}
    assert loaded.word_text(np.array([8, 7])) == ["eight", "seven"]
    assert load_graph(path) is loaded  # cached
    save_graph(bundle / "graphs", "g1", fst, words, GraphInfo(token_rule="collapse"))
    assert load_graph(path).info.token_rule == "collapse"  # the rewrite is seen
    with pytest.raises(GraphError, match="has no graph 'nope' \\(it has: g1\\)"):
        resolve_graph("nope", bundle)
    with pytest.raises(GraphError, match="not a bundle folder"):
        resolve_graph("g1", None)
    with pytest.raises(GraphError, match="plain file name"):
        save_graph(bundle, "../x", fst, words, info)


def test_a_graph_needs_its_words(tmp_path):
    path = tmp_path / "lone.fst"
    kaldifst.StdConstFst(kaldifst.compile(TEXT)).write(str(path))
    with pytest.raises(GraphError, match="no words table"):
        load_graph(path)
    (tmp_path / "words.txt").write_text("<eps> 0\nseven 7\n")
    loaded = load_graph(path)
    assert loaded.info.token_rule == "collapse" and loaded.spellings is None
    with pytest.raises(GraphError, match="output label 8"):
        loaded.word_text(np.array([8]))
    (tmp_path / "lone.json").write_text(json.dumps({"token_rule": "sideways"}))
    with pytest.raises(GraphError, match="token_rule 'sideways'"):
        load_graph(path)
