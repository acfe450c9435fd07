"""Pure layout arithmetic: exact numbers, no device."""

import math

import pytest

from devalloc import layout as L


def test_size_classes_exact_table():
    sizes = [L.class_size(c) for c in range(L.NCLASSES)]
    assert sizes == [
        16, 32, 48, 64, 80, 96, 112, 128,
        160, 192, 224, 256, 320, 384, 448, 512,
        640, 768, 896, 1024, 1280, 1536, 1792, 2048,
        2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192,
    ]


def test_size_class_is_the_smallest_class_that_fits():
    for n in range(1, L.MAX_SMALL + 1):
        c = L.size_class(n)
        assert 0 <= c < L.NCLASSES
        assert L.class_size(c) >= n
        assert c == 0 or L.class_size(c - 1) < n, n


def test_class_boundaries():
    assert [L.size_class(n) for n in (1, 16, 17, 128, 129, 160, 161, 256, 257, 4096, 4097, 8192)] == [
        0, 0, 1, 7, 8, 8, 9, 11, 12, 27, 28, 31]


def test_internal_fragmentation_at_most_25_percent_above_128():
    for n in range(129, L.MAX_SMALL + 1):
        assert L.class_size(L.size_class(n)) <= math.ceil(n * 1.25 / 16) * 16


def test_class_round_is_the_class_size_with_the_heaps_table():
    for n in range(1, L.MAX_SMALL + 1):
        assert L.class_round(n) == L.class_size(L.size_class(n)), n


def test_class_round_other_splits_exact():
    # sub_bits = 0: powers of two above 128 B; 1: two classes a power; 3: eight.
    r0 = [L.class_round(n, 0) for n in (1, 17, 128, 129, 257, 4097)]
    assert r0 == [16, 32, 128, 256, 512, 8192]
    r1 = [L.class_round(n, 1) for n in (129, 192, 193, 4097, 6145)]
    assert r1 == [192, 192, 256, 6144, 8192]
    r3 = [L.class_round(n, 3) for n in (129, 144, 145, 257, 4097)]
    assert r3 == [144, 144, 160, 288, 4608]
    assert [L.class_round(n, 4) for n in (129, 145, 257, 4097)] == [144, 160, 272, 4352]
    for k in range(5):  # aligned, fits, and never more than 2**-k above (or 16 B) past 128 B
        for n in range(1, L.MAX_SMALL + 1):
            r = L.class_round(n, k)
            assert r >= n and r % L.ALIGN == 0 and r <= L.MAX_SMALL
            assert r - n < max(L.ALIGN, (n - 1) >> k) or n <= L.LINEAR_MAX


def test_histogram_pages_what_ifs_exact():
    # The heap's own page and classes are the defaults.
    h = {100: 3, 200: 5, 3000: 1, 20_000: 2}
    # 16 KiB pages: classes 112, 224 and 3,072 B a slab each; 20,000 B takes 2 pages each.
    assert L.histogram_pages(h) == 3 + 2 * 2
    assert L.histogram_pages(h, page=L.PAGE, sub_bits=L.SUB_BITS) == 3 + 2 * 2
    # 1 KiB pages: 112 B blocks (9 a page) 1, 224 B (4 a page) 2, 3,000 B 3 pages,
    # 20,000 B 20 each.
    assert L.histogram_pages(h, page=1024) == 1 + 2 + 3 + 2 * 20
    assert L.histogram_bytes(h, page=1024) == 46 * 1024
    # Other splits above 128 B: 1 class a power of two, 4 (the heap's), 2.
    assert L.histogram_pages({129: 1, 200: 1, 250: 1}, sub_bits=0) == 1  # one 256 B class
    assert L.histogram_pages({129: 1, 200: 1, 250: 1}) == 3  # 160, 224, 256: three
    assert L.histogram_pages({129: 1, 200: 1, 250: 1}, sub_bits=1) == 2  # 192, 256
    # Blocks in one class fill its slabs: 16 KiB / 144 B = 113 a slab with sub_bits 3.
    assert L.histogram_pages({140: 113}, sub_bits=3) == 1
    assert L.histogram_pages({140: 114}, sub_bits=3) == 2
    for bad in (-1, 5):
        with pytest.raises(ValueError, match="sub_bits"):
            L.histogram_pages(h, sub_bits=bad)
    with pytest.raises(ValueError, match="page"):
        L.histogram_pages(h, page=3000)


def test_every_class_is_aligned_and_fits_a_page():
    for c in range(L.NCLASSES):
        assert L.class_size(c) % L.ALIGN == 0
        assert 2 <= L.class_blocks(c) <= L.MAX_SLAB_BLOCKS
        assert L.class_words(c) <= L.BITMAP_WORDS


def test_word_valid_masks_cover_exactly_the_blocks():
    for c in range(L.NCLASSES):
        bits = sum(bin(L.word_valid_mask(c, w)).count("1") for w in range(L.BITMAP_WORDS))
        assert bits == L.class_blocks(c)
        assert L.word_valid_mask(c, L.class_words(c)) == 0


def test_floor_log2():
    for x in list(range(1, 5000)) + [2**20 - 1, 2**20, 2**31, 2**32 - 1]:
        assert L.floor_log2(x) == x.bit_length() - 1


def test_pages_for():
    assert [L.pages_for(n) for n in (8193, L.PAGE, L.PAGE + 1, 65536, 200_000)] == [1, 1, 2, 4, 13]


def test_state_word_round_trip_and_sign():
    s = L.pack_state(L.TAG_HEAD, L.N_MASK, (1 << 23) - 1)
    assert s > 0  # bit 63 never set
    assert (L.state_tag(s), L.state_n(s), L.state_count(s)) == (L.TAG_HEAD, L.N_MASK, (1 << 23) - 1)
    assert L.state_count(L.pack_state(3, 7, L.COUNT_FOLD)) == L.COUNT_FOLD
    assert L.slab_tag(L.NCLASSES - 1) < L.TAG_HEAD < L.TAG_TAIL <= L.TAG_MASK



def test_count_fold_is_the_count_fields_top_bit():
    # _fold tests and clears this one bit instead of comparing the count.
    for count in (0, 1, L.COUNT_FOLD - 1, L.COUNT_FOLD, L.COUNT_FOLD + 511, (1 << 23) - 1):
        s = L.pack_state(L.TAG_HEAD, L.N_MASK, count)
        assert bool(s & L.COUNT_FOLD_BIT) == (count >= L.COUNT_FOLD)
        if count >= L.COUNT_FOLD:
            assert L.state_count(s ^ L.COUNT_FOLD_BIT) == count - L.COUNT_FOLD
    assert L.COUNT_FOLD_BIT >> L.COUNT_SHIFT == L.COUNT_FOLD

def test_metadata_regions_do_not_overlap():
    assert L.STRIPE_BASE >= 4
    last_stripe = L.stripe_word(L.STRIPES - 1, L.S_INVALID)
    assert last_stripe < L.HINT_BASE
    assert L.HINT_BASE + L.NCLASSES * L.HINT_STRIDE == L.STATE_BASE
    assert L.H_SPREAD_MAX < L.STRIPE_BASE
    assert L.bits_base(10) == L.STATE_BASE + 10
    for ps in range(L.PAGE_SHIFT_MIN, L.PAGE_SHIFT + 1):
        # Bitmaps (the page's own count of words each), the trees, then 0
        # to 7 words of padding, whose count names the page shift.
        assert L.bitmap_word(10, 0, 0, ps) == L.bits_base(10)
        assert L.free_tree(10, ps) == L.bits_base(10) + 10 * L.bitmap_words(ps)
        assert L.bitmap_word(10, 9, L.bitmap_words(ps) - 1, ps) == L.free_tree(10, ps) - 1
        assert L.room_tree(10, 0, ps) == L.free_tree(10, ps) + L.tree_stride(10)
        end = L.room_tree(10, L.NCLASSES - 1, ps) + L.tree_stride(10)
        assert end <= L.meta_words(10, ps) < end + 8
        assert L.page_shift_of(L.meta_words(10, ps)) == ps
    assert L.bitmap_words(L.PAGE_SHIFT) == L.BITMAP_WORDS


@pytest.mark.parametrize("ps", range(L.PAGE_SHIFT_MIN, L.PAGE_SHIFT + 1))
def test_smaller_pages_geometry(ps):
    # Every class a page of 2**ps bytes serves as slabs has two blocks or
    # more, its bitmap fits the page's words, and the device's lookup
    # (the largest page's block count shifted) is the exact count.
    page = 1 << ps
    assert L.max_small(ps) == min(L.MAX_SMALL, page // 2)
    for c in range(L.NCLASSES):
        if L.class_size(c) > L.max_small(ps):
            assert c > L.size_class(L.max_small(ps))
            continue
        blocks = L.class_blocks(c, ps)
        assert blocks == page // L.class_size(c) >= 2
        assert blocks == L.class_blocks(c) >> (L.PAGE_SHIFT - ps)
        assert L.class_words(c, ps) <= L.bitmap_words(ps)
        assert sum(bin(L.word_valid_mask(c, w, ps)).count("1")
                   for w in range(L.class_words(c, ps))) == blocks
    assert L.pages_for(page, ps) == 1 and L.pages_for(page + 1, ps) == 2
    assert L.capacity_for_pages(3, ps) == 3 * page and L.pages_for_capacity(3 * page + 1, ps) == 3
    assert L.debug_size_slots(4, ps) == 4 * page // L.DEBUG_MIN_BLOCK
    # A buffer's pages, with their metadata, fit it, and one more would not.
    for nbytes in (L.memory_for_pages(1, ps), L.memory_for_pages(40, ps) + 999, 1 << 22):
        n = L.pages_for_memory(nbytes, ps)
        assert L.memory_for_pages(n, ps) <= nbytes < L.memory_for_pages(n + 1, ps)
    # What each more page costs in metadata: its state word and bitmap, and
    # its share of the trees (a smaller page, a smaller bitmap).
    more = L.meta_bytes(1 << 16, ps) - L.meta_bytes(1 << 15, ps)
    assert more <= (1 << 15) * L.meta_bytes_per_page(ps) + L.TREE_SLACK_BYTES + L.META_PAD_BYTES
    assert L.meta_bytes_per_page(ps) < page // 8


@pytest.mark.parametrize("npages", [1, 31, 32, 33, 1024, 1025, 40000, 1 << 20, L.MAX_PAGES])
def test_page_index_geometry(npages):
    # Level 0: a bit per page, 32 to a word; each level above: a word per 32
    # words below, up to one top word; the trees fit their stride.
    levels = L.tree_levels(npages)
    words = [L.level_words(npages, j) for j in range(levels)]
    assert words[0] * 32 >= npages > (words[0] - 1) * 32
    assert all(words[j] == -(-words[j - 1] // 32) for j in range(1, levels))
    assert words[-1] == 1 and (levels == 1 or words[-2] > 1)
    assert L.tree_words(npages) == sum(words) <= L.tree_stride(npages)
    assert [L.level_start(npages, j) for j in range(levels)] == [sum(words[:j]) for j in range(levels)]


def test_free_tree_init_counts_every_page():
    npages = 1100  # three levels: 35 words, 2 counts, the top count
    assert L.free_tree_init(npages, 0, 0) == 0xFFFFFFFF
    assert L.free_tree_init(npages, 0, 34) == (1 << (npages - 34 * 32)) - 1
    assert [L.free_tree_init(npages, 1, i) for i in range(2)] == [1024, npages - 1024]
    assert L.free_tree_init(npages, 2, 0) == npages


def test_capacity_geometry():
    # A heap's capacity is its arena: whole pages; the metadata lies beside it.
    assert L.pages_for_capacity(L.MIN_CAPACITY - 1) == 0
    assert L.pages_for_capacity(L.MIN_CAPACITY) == 1
    for cap in (L.MIN_CAPACITY, 1 << 20, 12 * L.PAGE, 1 << 30, (1 << 34) + 12345):
        n = L.pages_for_capacity(cap)
        assert n * L.PAGE <= cap < (n + 1) * L.PAGE


def test_memory_geometry():
    # Inside a memory= buffer the metadata takes its share of the buffer.
    assert L.pages_for_memory(L.MIN_MEMORY_BYTES - 1) == 0
    assert L.pages_for_memory(L.MIN_MEMORY_BYTES) == 1
    for nbytes in (L.MIN_MEMORY_BYTES, 1 << 20, 12 * L.PAGE, 1 << 30, (1 << 34) + 12345):
        n = L.pages_for_memory(nbytes)
        assert L.memory_for_pages(n) <= nbytes  # the heap never takes more than it was given
        assert L.memory_for_pages(n + 1) > nbytes  # and one more page would not fit
    for n in (1, 2, 12, 63, 4096):
        assert L.pages_for_memory(L.memory_for_pages(n)) == n
        assert L.pages_for_memory(L.memory_for_pages(n) - 1) == n - 1


@pytest.mark.parametrize("cap", [128 << 10, 1 << 20, 1 << 24, 1 << 30])
def test_usable_fraction_of_capacity(cap):
    # Every byte of a page-multiple capacity can be served (issue 14: a
    # 128 KiB heap served 87.5 % when the metadata took an arena page).
    assert L.pages_for_capacity(cap) * L.PAGE == cap


@pytest.mark.parametrize("npages,most", [(8, 0.33), (64, 0.056), (4096, 0.0175), (1 << 16, 0.017)])
def test_metadata_beside_the_arena_is_small(npages, most):
    # The header (HINT_SLOTS hints per class) and ~1.7 % per page (bitmaps).
    assert L.meta_bytes(npages) <= most * npages * L.PAGE


def test_capacity_for_pages_is_the_inverse_of_pages_for_capacity():
    for n in (1, 2, 12, 63, 4096):
        cap = L.capacity_for_pages(n)
        assert L.pages_for_capacity(cap) == n
        assert L.pages_for_capacity(cap - 1) == n - 1


def test_slab_fields_split_n_and_leave_tag_and_count_alone():
    s = L.pack_state(L.slab_tag(3), 0, 77) + 5 * L.N_ONE + 9 * L.CURSOR_ONE
    assert (L.slab_live(s), L.slab_cursor(s)) == (5, 9)
    assert (L.state_tag(s), L.state_count(s)) == (L.slab_tag(3), 77)
    # The largest slab (1024 blocks) fits both fields.
    full = L.pack_state(1, 0, 0) + L.MAX_SLAB_BLOCKS * (L.N_ONE + L.CURSOR_ONE)
    assert (L.slab_live(full), L.slab_cursor(full)) == (L.MAX_SLAB_BLOCKS, L.MAX_SLAB_BLOCKS)
    assert L.MAX_SLAB_BLOCKS <= L.LIVE_MASK and L.MAX_SLAB_BLOCKS <= L.CURSOR_MASK


@pytest.mark.parametrize("x", [0, 1, 2, 3, 0x80000000, 0xFFFFFFFF, 0x12345678, 0xF0F0F0F0])
def test_popc32_counts_bits(x):
    assert L.popc32(x) == bin(x).count("1")


def test_nth_set_bit_and_lowest_bits():
    m = 0b1011_0010_0000_0001
    ones = [i for i in range(32) if m >> i & 1]
    assert [L.nth_set_bit(m, k) for k in range(len(ones))] == ones
    assert L.nth_set_bit(0x80000000, 0) == 31
    assert L.lowest_bits(m, 2) == 0b10_0000_0001
    assert L.lowest_bits(m, 0) == 0
    assert L.lowest_bits(m, 32) == m
    assert L.lowest_bits(0xFFFFFFFF, 32) == 0xFFFFFFFF


def test_grants_round_trip():
    g = L.bump_grant(L.MAX_PAGES - 1, 1000, 24)
    assert (L.grant_page(g), L.grant_count(g)) == (L.MAX_PAGES - 1, 24)
    assert [L.grant_block(g, k) for k in (0, 23)] == [1000, 1023]
    r = L.reuse_grant(5, 31, 0x80000101)
    assert (L.grant_page(r), L.grant_count(r)) == (5, 3)
    assert [L.grant_block(r, k) for k in range(3)] == [31 * 32, 31 * 32 + 8, 31 * 32 + 31]
    assert L.grant_page(0) == -1  # nothing won
    assert min(g, r) > 1  # never mistaken for devalloc.device.slab's NO/BUSY
    assert 0 < max(g, r) < 1 << 63


def test_spread_bound_follows_the_sms_and_the_heap():
    # One slot per SM (rounded up to a power of two), one per PAGES_PER_SLOT
    # pages, HINT_SLOTS at most; log2.
    assert L.spread_log_max(1 << 20, 1) == 0
    assert L.spread_log_max(1 << 20, 2) == 1
    assert L.spread_log_max(1 << 20, 132) == 7 == L.HINT_SLOTS.bit_length() - 1
    assert L.spread_log_max(1 << 20, 100) == 7
    assert L.spread_log_max(1 << 20, 64) == 6
    assert L.spread_log_max(63, 132) == 0
    assert L.spread_log_max(64, 132) == 1
    assert L.spread_log_max(2048, 132) == 6
    for n in (1, 7, 100, 5000, L.MAX_PAGES):
        for sms in (1, 3, 16, 200, 10_000):
            e = L.spread_log_max(n, sms)
            assert (1 << e) <= L.HINT_SLOTS
            assert e == 0 or ((1 << e) * L.PAGES_PER_SLOT <= n and (1 << (e - 1)) < sms)


def test_hint_words_share_a_line_with_the_spread_word():
    words = {L.hint_word(c, s) for c in range(L.NCLASSES) for s in range(L.HINT_SLOTS)}
    spreads = {L.spread_word(c) for c in range(L.NCLASSES)}
    assert not words & spreads and len(words) == L.NCLASSES * L.HINT_SLOTS
    assert min(spreads) == L.HINT_BASE and max(words) < L.STATE_BASE
    for c in range(L.NCLASSES):  # a calm class's search loads one 128-byte line
        assert L.spread_word(c) // 16 == L.hint_word(c, 0) // 16


def test_every_metadata_index_fits_32_bits():
    # devalloc.device._meta._at zero-extends metadata indices from 32 bits on
    # the GPU (so numba drops its negative-index code): they must fit.
    assert L.meta_words(L.MAX_PAGES) < 2**31


def test_slab_class_tables_hold_the_layouts_sizes():
    # devalloc.device.slab looks the class sizes and slab capacities up in
    # constant memory instead of computing them (issue 13).
    from devalloc.device import slab

    assert list(slab.CLASS_SIZES) == [L.class_size(c) for c in range(L.NCLASSES)]
    assert list(slab.CLASS_BLOCKS) == [L.class_blocks(c) for c in range(L.NCLASSES)]


def test_free_divides_by_the_block_size_exactly_with_a_multiply_shift():
    # free's block index is (rel * ceil(2**32 / size)) >> 32: exact for every
    # class and every offset in a page (no division on the free path).
    import numpy as np

    from devalloc.device import slab

    rel = np.arange(L.PAGE, dtype=np.uint64)
    for c in range(L.NCLASSES):
        recip = np.uint64(slab.CLASS_RECIPS[c])
        assert recip < 2**32
        got = (rel * recip) >> np.uint64(32)
        assert np.array_equal(got, rel // np.uint64(L.class_size(c))), c


@pytest.mark.parametrize("m", [0, 1, 0x80000000, 0b1011_0010_0000_0001, 0xFFFFFFFF, 0x12345678])
def test_slab_lowest_bits_is_layouts_in_32_bits(m):
    import numpy as np

    from devalloc.device import slab

    for k in (0, 1, 2, 5, 32):
        assert int(slab._lowest.py_func(np.uint32(m), k)) == L.lowest_bits(m, k)


@pytest.mark.parametrize("npages", [1, 2, 31, 32, 33, 1023, 1024, 1025, 32768, 32769,
                                    L.MAX_PAGES - 1, L.MAX_PAGES])
def test_index_level_sizes_in_32_bits_are_layouts(npages):
    # The device's 32-bit ceilings ((n - 1) >> 5) + 1, no carry into bit 32,
    # against layout's (n + 31) >> 5 (docs/outline.md, "32-bit index arithmetic").
    import numpy as np

    from devalloc.device import index

    assert int(index._words_above.py_func(np.int64(npages))) == L.level_words(npages, 0)
    for j in range(L.TREE_LEVELS):
        start, n = index._level.py_func(np.int64(npages), j)
        assert (int(start), int(n)) == (L.level_start(npages, j), L.level_words(npages, j)), j


@pytest.mark.parametrize("n", [1, 2, 32, 33, 2**25, 2**31, 2**32 - 31, 2**32 - 1])
def test_words_above_is_a_ceiling_up_to_2_to_the_32(n):
    import numpy as np

    from devalloc.device import index

    assert int(index._words_above.py_func(np.uint32(n))) == -(-n // 32)


@pytest.mark.parametrize("npages,ps,sms", [(1, 14, 1), (7, 10, 132), (300, 12, 8), (65536, 14, 132)])
def test_a_heaps_geometry_is_every_figure_at_once(npages, ps, sms):
    g = L.geometry(npages, ps, sms)
    assert (g.npages, g.page_shift) == (npages, ps)
    assert g.meta_words == L.meta_words(npages, ps) and g.meta_bytes == L.meta_bytes(npages, ps)
    assert g.free_tree_at == L.free_tree(npages, ps)
    assert g.spread_log_max == L.spread_log_max(npages, sms)
    assert g.debug_slots == L.debug_size_slots(npages, ps)
    assert g.arena_bytes == L.capacity_for_pages(npages, ps)
    assert g.memory_bytes == L.memory_for_pages(npages, ps)


def test_a_heap_keeps_its_geometry():
    import devalloc

    heap = devalloc.Heap(1 << 20, page="auto")
    g = heap.geometry
    assert (g.npages, 1 << g.page_shift) == (heap.npages, heap.page)
    assert g.arena_bytes == heap.capacity and g.meta_bytes == heap.meta_bytes
    assert heap.spread == 1 << g.spread_log_max
