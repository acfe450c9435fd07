"""The house rules: host and device apart, one home for every packed format."""

import subprocess
import sys

from devalloc import layout as L


def test_the_host_side_imports_no_device_code():
    # Heap, stats, the report and the debug decoding must work (and import)
    # without compiling or even importing a device function.
    code = (
        "import sys\n"
        "import devalloc.host.heap, devalloc.host.stats, devalloc.host.report, "
        "devalloc.host.debug, devalloc.ctx\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('devalloc.device', 'devalloc.sim')))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"NUMBA_ENABLE_CUDASIM": "1", "PATH": ""}, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_state_word_accessors_round_trip():
    s = L.pack_state(L.slab_tag(5), (7 << 16) | 3, 12345)
    assert L.state_tag(s) == 6 and L.is_slab_tag(L.state_tag(s))
    assert L.slab_class(L.state_tag(s)) == 5
    assert L.slab_live(s) == 3 and L.slab_cursor(s) == 7
    assert L.state_count(s) == 12345
    assert L.state_keep_count(s) == L.pack_state(L.TAG_FREE, 0, 12345)
    assert s + 2 * L.SLAB_BUMP_ONE == L.pack_state(6, (9 << 16) | 5, 12347)
    assert s + L.SLAB_REUSE_ONE == L.pack_state(6, (7 << 16) | 4, 12346)
    for t in (L.TAG_FREE, L.TAG_HEAD, L.TAG_TAIL, L.TAG_BUMP, L.TAG_RETIRING, L.NCLASSES + 1):
        assert not L.is_slab_tag(t)


def test_metadata_word_helpers():
    assert L.state_word(3) == L.STATE_BASE + 3
    assert L.bitmap_word(10, 2, 5) == L.bits_base(10) + 2 * L.BITMAP_WORDS + 5
    assert L.bitmap_word(10, 9, L.BITMAP_WORDS - 1) == L.free_tree(10) - 1
    assert L.bitmap_word(10, 9, 1, 10) == L.bits_base(10) + 9 * 2 + 1  # 1 KiB pages: 2 words
    assert L.record_word(0, L.R_KIND) == L.RECORD_BASE
    assert L.record_word(2, L.R_THREAD) == L.RECORD_BASE + 2 * L.RECORD_WORDS + 3


def test_bump_word_round_trip():
    w = L.pack_bump(1234, 77, 5000)
    assert (L.bump_page(w), L.bump_count(w), L.bump_cursor(w)) == (1234, 77, 5000)
    assert L.bump_page(0) == -1  # no chunk yet


def test_scope_state_helpers():
    s = L.pack_scope(4096, 64, 3)
    assert L.scope_advance(s, 48) == L.pack_scope(4096, 112, 3)
    assert L.align_up(1) == 16 and L.align_up(16) == 16 and L.align_up(17) == 32
    assert L.debug_size_slots(2) == 2 * L.PAGE // L.DEBUG_MIN_BLOCK
    for chunk in (0, 16, 4096, (1 << 39) - 16):
        t = L.pack_scope(chunk, L.SCOPE_HEADER + 48, 7)
        assert L.scope_chunk(t) == L.scope_chunk_had(t) == chunk
    assert L.scope_chunk(L.pack_scope(-1, 0, 1)) == -1


def test_size_class_constants_are_tied_together():
    sizes = [L.class_size(c) for c in range(L.NCLASSES)]
    assert sizes[:L.LINEAR_CLASSES] == [L.ALIGN * (c + 1) for c in range(L.LINEAR_CLASSES)]
    assert sizes[-1] == L.MAX_SMALL and sizes == sorted(set(sizes))
    for c, size in enumerate(sizes):
        assert L.size_class(size) == c and L.size_class(size - L.ALIGN + 1) <= c
        # at most 25 % rounding above LINEAR_MAX
        if c > L.LINEAR_CLASSES:
            assert size <= 1.25 * (sizes[c - 1] + 1)
