"""The one registry helper every axis uses."""

from __future__ import annotations

from importlib import metadata

import pytest

from oasr import registry
from oasr.registry import DuplicateNameError, Registry, UnknownNameError, plugin


def test_register_get_and_decorator():
    reg: Registry[object] = Registry("widget")

    @reg.register("a")
    class A:
        pass

    reg.register("b", 42)
    assert reg.get("a") is A
    assert reg.get("b") == 42
    assert reg.names() == ["a", "b"]
    assert "a" in reg and "c" not in reg
    assert len(reg) == 2


def test_duplicate_name_raises_naming_the_first():
    reg: Registry[int] = Registry("widget")
    reg.register("a", 1)
    with pytest.raises(DuplicateNameError, match="widget 'a' is already registered"):
        reg.register("a", 2)
    assert reg.get("a") == 1


def test_unknown_name_lists_valid_ones():
    reg: Registry[int] = Registry("widget")
    reg.register("beta", 1)
    reg.register("alpha", 2)
    with pytest.raises(UnknownNameError) as err:
        reg.get("gamma")
    assert str(err.value) == "unknown widget 'gamma'; valid: alpha, beta"
    empty: Registry[int] = Registry("gizmo")
    with pytest.raises(UnknownNameError, match="none are registered"):
        empty.get("x")


def test_lazy_string_entry_imports_on_first_get():
    reg: Registry[object] = Registry("widget")
    reg.register("path_join", "os.path:join")
    import os.path

    assert reg.get("path_join") is os.path.join


def test_origin_is_where_an_entry_was_registered_whether_imported_or_not():
    reg: Registry[object] = Registry("widget")
    reg.register("lazy", "json:dumps")
    reg.register("obj", Registry)
    assert reg.origin("lazy") == "json:dumps"
    reg.get("lazy")  # imported now: the origin stays the registration
    assert reg.origin("lazy") == "json:dumps"
    assert reg.origin("obj") == "oasr.registry.Registry"
    reg.unregister("obj")
    with pytest.raises(UnknownNameError, match="valid: lazy"):
        reg.origin("obj")


def test_lazy_entry_with_bad_target_raises_on_get_not_register():
    reg: Registry[object] = Registry("widget")
    reg.register("broken", "oasr_no_such_module:thing")
    with pytest.raises(ModuleNotFoundError):
        reg.get("broken")


def test_entry_points_are_loaded_lazily_once(monkeypatch):
    reg: Registry[int] = Registry("widget", entry_point_group="oasr.test_widgets")
    calls = []

    @plugin
    def register_plugin():
        calls.append(1)
        reg.register("from_plugin", 7)

    class FakeEP:
        def __init__(self, group):
            self.group = group

        def load(self):
            return register_plugin if self.group == "oasr.test_widgets" else None

    scans = []

    def fake_entry_points():
        scans.append(1)
        return [FakeEP("oasr.test_widgets"), FakeEP("someone.elses")]

    monkeypatch.setattr(metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_entry_point_index", None)
    other: Registry[int] = Registry("gadget", entry_point_group="oasr.test_gadgets")
    assert calls == []  # nothing loaded at construction
    assert reg.get("from_plugin") == 7
    assert reg.names() == ["from_plugin"]
    assert calls == [1]
    assert other.names() == []
    assert scans == [1]  # the installed metadata is read once for every registry


def test_every_axis_has_a_registry_with_loud_errors():
    from oasr.engine.batching import BATCHING_POLICIES, PARTITION_POLICIES
    from oasr.engine.decode import DECODE_STRATEGIES
    from oasr.engine.streaming_backend import STREAMING_BACKENDS
    from oasr.features import EXTRACTORS
    from oasr.models.registry import MODEL_REGISTRY
    from oasr.quantization import QUANT_METHODS
    from oasr.tokenizers import TOKENIZERS
    from oasr.vad import VADS

    axes = [MODEL_REGISTRY, DECODE_STRATEGIES, STREAMING_BACKENDS, BATCHING_POLICIES,
            PARTITION_POLICIES, TOKENIZERS, EXTRACTORS, VADS, QUANT_METHODS]
    assert len({r.axis for r in axes}) == len(axes)
    for reg in axes:
        assert isinstance(reg, Registry)
        assert_axis_populated(reg)
        with pytest.raises(UnknownNameError, match=f"unknown {reg.axis} 'no-such-thing'"):
            reg.get("no-such-thing")


# Axes with no built-in entry yet (their issues add the first one). Anything else must have
# entries, every one of which loads: an axis whose built-ins stopped registering fails here.
NO_BUILTIN_YET: set[str] = set()


def assert_axis_populated(reg: Registry) -> None:
    names = reg.names()
    if reg.axis in NO_BUILTIN_YET:
        assert not names, (f"{reg.axis} now has entries {names}: take it out of "
                           "NO_BUILTIN_YET so they are checked")
        return
    assert names, f"the {reg.axis} registry is empty: its built-in entries did not register"
    for name in names:
        assert reg.get(name) is not None


def test_an_empty_axis_fails_the_population_check():
    with pytest.raises(AssertionError, match="the widget registry is empty"):
        assert_axis_populated(Registry("widget"))
    reg: Registry[object] = Registry("widget")
    reg.register("broken", "oasr_no_such_module:thing")
    with pytest.raises(ModuleNotFoundError):
        assert_axis_populated(reg)
