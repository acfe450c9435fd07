"""Choosing the out-of-line build per heap and per launch (issue 28): the host side.

``Heap(outline=)``, ``heap.outline``, ``heap.ctx_with(outline=)`` and
``ctx_type_for(outline=)`` on the simulator (where the device code is the
same Python either way: the flag is recorded, the arrays are the heap's).
What the choice compiles to on the real CUDA target is
tests/test_codesize.py (``test_the_ctx_type_chooses_outline_per_kernel``).
"""

import numpy as np
import pytest
from numba import cuda

import devalloc
from devalloc import ctx as C
from devalloc import layout as L

CAP = L.capacity_for_pages(4)


@cuda.jit
def k_scratch(ctx, nbytes, out):
    # Safe to re-run: every thread allocates, writes, records, frees.
    i = cuda.grid(1)
    off = devalloc.alloc(ctx, nbytes)
    out[i] = off
    if off != devalloc.NULL:
        a = devalloc.view(ctx, off, nbytes, np.uint8)
        a[0] = 1
        devalloc.free(ctx, off)


@cuda.jit
def k_hold(ctx, nbytes, out):
    # Safe to re-run (heap.run resets the heap): every thread allocates and keeps it.
    out[cuda.grid(1)] = devalloc.alloc(ctx, nbytes)


def test_a_heap_takes_the_process_default_unless_told():
    assert devalloc.Heap(CAP).outline is C.OUTLINE_DEFAULT
    assert devalloc.Heap(CAP, outline=None).outline is C.OUTLINE_DEFAULT
    assert devalloc.Heap(CAP, outline=True).outline is True
    assert devalloc.Heap(CAP, outline=False).outline is False
    assert devalloc.Heap(CAP, outline=np.bool_(True)).outline is True
    assert devalloc.Heap(CAP, outline="auto").outline == "auto"


def test_the_process_default_is_auto_unless_the_environment_says():
    # DEVALLOC_OUTLINE, read when devalloc is imported (ctx._outline_env).
    assert C._outline_env(None) == "auto" and C._outline_env(" Auto ") == "auto"
    for off in ("", "0", "false", "No", "off"):
        assert C._outline_env(off) is False, off
    for on in ("1", "true", "yes"):
        assert C._outline_env(on) is True, on
    assert C.OUTLINE_CHOICES == (False, True, "auto")
    assert C.OUTLINE_DEFAULT in C.OUTLINE_CHOICES


@pytest.mark.parametrize("bad", [1, 0, "yes", "AUTO", 1.0, [True]])
def test_outline_that_is_not_none_true_false_or_auto_is_a_type_error(bad):
    with pytest.raises(TypeError, match=r"outline= must be None \(the process default, "
                                        r"DEVALLOC_OUTLINE\), True, False or 'auto'"):
        devalloc.Heap(CAP, outline=bad)
    with pytest.raises(TypeError, match="outline= must be None"):
        C.ctx_type_for(outline=bad)


def test_ctx_with_the_heaps_own_choice_is_its_ctx():
    for outline in (True, False, "auto"):
        heap = devalloc.Heap(CAP, outline=outline)
        assert heap.ctx_with(outline=outline) is heap.ctx


@pytest.mark.parametrize("kind", ["normal", "debug", "observed"])
def test_ctx_with_the_other_choice_is_the_same_heap(kind):
    opts = {"debug": {"debug": True}, "observed": {"profile": True, "trace": 8}}.get(kind, {})
    heap = devalloc.Heap(CAP, outline=False, **opts)
    other = heap.ctx_with(outline=True)
    assert type(other) is type(heap.ctx)
    assert other is heap.ctx_with(outline=True)  # made once
    auto = heap.ctx_with(outline="auto")
    assert auto is heap.ctx_with(outline="auto") and auto.arena is heap.ctx.arena
    assert other.arena is heap.ctx.arena
    for name in other._fields[2:]:  # debug words, sizes, profile, trace: the heap's own
        assert getattr(other, name) is getattr(heap.ctx, name), name
    # (On the simulator the metadata is the heap's array itself; on a GPU the
    # same device memory typed PagedMeta(outline=True).)
    assert other.meta.shape == heap.ctx.meta.shape
    assert heap.outline is False  # heap.ctx keeps the heap's own choice


def test_both_ctxs_allocate_from_one_heap():
    heap = devalloc.Heap(CAP, outline=False)
    out = cuda.device_array(32, np.int64)
    k_scratch[1, 32](heap.ctx_with(outline=True), 100, out)
    k_scratch[1, 32](heap.ctx_with(outline="auto"), 100, out)
    k_scratch[1, 32](heap.ctx, 100, out)
    u = heap.usage()
    assert u.allocs == 96 and u.frees == 96 and u.failed == 0


@pytest.mark.parametrize("bad", [1, None, "True", "on"])
def test_ctx_with_takes_true_false_or_auto(bad):
    heap = devalloc.Heap(CAP)
    with pytest.raises(TypeError, match="ctx_with"):
        heap.ctx_with(outline=bad)
    with pytest.raises(TypeError):
        heap.ctx_with(True)  # keyword only


def test_resize_keeps_the_choice_and_renews_ctx_with():
    heap = devalloc.Heap(CAP, outline=True)
    old = heap.ctx_with(outline=False)
    heap.resize(2 * CAP)
    assert heap.outline is True
    new = heap.ctx_with(outline=False)
    assert new is not old and new.arena is heap.ctx.arena


def test_run_swaps_a_ctx_with_like_heap_ctx():
    heap = devalloc.Heap(L.capacity_for_pages(4), outline=False)
    out = cuda.device_array(96, np.int64)
    # 96 blocks of 2048 B = 12 pages: three times the initial heap.
    result = heap.run(k_hold, 3, 32, heap.ctx_with(outline=True), 2048, out,
                      ceiling=1 << 20)
    assert result.usage.failed == 0 and result.usage.allocs == 96 and result.attempts == 3
    assert heap.outline is False
    result = heap.run(k_hold, 3, 32, heap.ctx_with(outline="auto"), 2048, out,
                      ceiling=1 << 20)
    assert result.usage.failed == 0 and result.usage.allocs == 96
    assert heap.outline is False


def test_a_closed_heap_has_no_ctx_with():
    heap = devalloc.Heap(CAP)
    heap.close()
    with pytest.raises(devalloc.HeapClosedError):
        heap.ctx_with(outline=True)


def test_repr_says_outline_when_not_the_process_default():
    shown = {True: ", outline)", False: ", outline=False)", "auto": ", outline='auto')"}
    for choice, text in shown.items():
        r = repr(devalloc.Heap(CAP, outline=choice))
        assert (text in r) == (choice != C.OUTLINE_DEFAULT), r
    assert "outline" not in repr(devalloc.Heap(CAP))


def test_the_metadata_type_names_the_choice():
    on, off = C.PagedMeta(14, outline=True), C.PagedMeta(14)
    assert off.outline is False and on.outline is True
    assert on != off and on.key != off.key and hash(on) != hash(off)
    assert str(on) == "array(int64, 1d, C, page=16384, outline)"
    assert str(off) == "array(int64, 1d, C, page=16384)"
    assert C.PagedMeta(14, outline=True) == on  # one type per (page, choice)
    auto = C.PagedMeta(14, outline="auto")
    assert auto.outline == "auto" and auto not in (on, off) and auto.key not in (on.key, off.key)
    assert str(auto) == "array(int64, 1d, C, page=16384, outline=auto)"
    for bad in (1, "Auto", None):
        with pytest.raises(TypeError, match="outline must be True, False or 'auto'"):
            C.PagedMeta(14, outline=bad)


def test_ctx_type_for_takes_the_choice_and_the_constants_the_default():
    for kind in ("normal", "debug", "observed"):
        on = C.ctx_type_for(kind=kind, outline=True)
        off = C.ctx_type_for(kind=kind, outline=False)
        auto = C.ctx_type_for(kind=kind, outline="auto")
        assert on != off and on.types[1].outline is True and off.types[1].outline is False
        assert auto.types[1].outline == "auto" and auto not in (on, off)
        assert C.ctx_type_for(kind=kind) == {True: on, False: off, "auto": auto}[C.OUTLINE_DEFAULT]
    assert C.ctx_type == C.ctx_type_for(outline=C.OUTLINE_DEFAULT)
    assert C.debug_ctx_type == C.ctx_type_for(kind="debug", outline=C.OUTLINE_DEFAULT)
    assert C.obs_ctx_type == C.ctx_type_for(kind="observed", outline=C.OUTLINE_DEFAULT)


def test_outline_enabled_is_the_process_default():
    from devalloc.device import outline

    assert outline.ENABLED is C.OUTLINE_DEFAULT
