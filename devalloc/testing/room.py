"""The model's answer to "could the heap serve this request now?" (issue 25).

The explorer's property *NULL means out of memory*: an ``alloc`` (or a lane
of an ``alloc_group``) may return NULL only if, at some step during the
call, the model says no page could serve it. The model knows the live
blocks of completed operations (:class:`invariants.Model`); what it cannot
see is memory *in transit*: pages an operation in flight holds between a
state change and the page index (a page being freed, a slot reserved and
being given back, a run of a large claim being rolled back). The rule
grants each racing operation that many pages (``Op.pages``, at least its
lanes for an allocating group), and no more: docs/correctness.md,
"Progress", the in-transit bound.

* A small request of class ``c`` can be served when more pages than that
  allowance are *candidates*: pages no live block touches, and pages whose
  live blocks are all of class ``c`` and fewer than a slab holds.
* A request of ``k`` pages can be served when a run of free pages is long
  enough to keep ``k`` pages free whatever ``a`` pages in it are held:
  ``k * (a + 1) + a``.

Pure functions of the model: plain unit tests in tests/test_explorer.py.
"""

from .. import layout as L


def allowance(model, me, own=0):
    """Pages that operations in flight other than thread ``me``'s may hold, plus ``own``."""
    a = own
    for tid, op in model.inflight.items():
        if tid != me:
            a += max(op.pages, op.lanes) if op.kind in ("alloc", "bump") else op.pages
    return a


def page_use(model):
    """Return {page: [spans of its small live blocks] or None (a large block's page)}."""
    use = {}
    ps = model.ps
    for b in list(model.live.values()) + list(model.bumped.values()):
        first = b.off >> ps
        if b.small:
            spans = use.setdefault(first, [])
            if spans is not None:
                spans.append(b.span)
        else:
            for p in range(first, ((b.off + b.span - 1) >> ps) + 1):
                use[p] = None
    return use


def could_serve(model, size, me, own=0):
    """True if the heap, as the model has it, can serve ``alloc(size)`` by ``me``.

    ``own``: pages ``me``'s own operation may hold already (an
    ``alloc_group``'s earlier rounds: lanes - 1).
    """
    a = allowance(model, me, own)
    use = page_use(model)
    npages = model.npages
    ps = model.ps
    if size <= L.max_small(ps):
        cs = L.class_size(L.size_class(size))
        cap = L.class_blocks(L.size_class(size), ps)
        cand = sum(1 for p in range(npages) if p not in use)
        cand += sum(1 for spans in use.values()
                    if spans is not None and len(spans) < cap and all(s == cs for s in spans))
        return cand > a
    k = L.pages_for(size, ps)
    run = best = 0
    for p in range(npages):
        run = run + 1 if p not in use else 0
        best = max(best, run)
    return best >= k * (a + 1) + a
