"""``bench.probes.record_calls``: the benchmarks of one ``make bench`` run share a process, so what one
of them patches must be exactly as it was when its block ends."""

from __future__ import annotations

import types

from bench.probes import record_calls


class _Base:
    def work(self) -> str:
        return "base"


class _Child(_Base):
    pass


def test_a_method_recorded_on_a_subclass_is_inherited_again_after_the_block():
    with record_calls(_Child, "work") as calls:
        assert _Child().work() == "base"
    assert len(calls) == 1
    assert "work" not in vars(_Child)
    # A later benchmark's patch of the base class reaches the subclass's calls (bench_erasure records
    # every job operator's execute on their base class after bench_engines recorded the DML operators').
    original = _Base.work
    try:
        _Base.work = lambda self: "patched"  # type: ignore[method-assign]
        assert _Child().work() == "patched"
    finally:
        _Base.work = original  # type: ignore[method-assign]


def test_a_function_of_its_own_is_put_back():
    module = types.ModuleType("probed")
    module.answer = lambda: 42  # type: ignore[attr-defined]
    original = module.answer  # type: ignore[attr-defined]
    with record_calls(module, "answer") as calls:
        assert module.answer() == 42  # type: ignore[attr-defined]
    assert len(calls) == 1
    assert module.answer is original  # type: ignore[attr-defined]
