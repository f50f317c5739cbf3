"""Top-k retrieval from final node states: for every source, the ``k`` best-scoring destinations,
a tile of sources x destinations at a time.

Why tiles: scoring every (source, destination) pair at once takes sources x destinations floats
(200k x 200k is 160 GB). Each tile is one matrix product (a dot-product decoder) or one batched
decoder call (any other), as many pairs as :data:`CHUNK_BYTES` holds at the decoder's cost per
pair; its top ``k`` is merged into the sources' running lists, so memory stays at one tile plus
the ``[sources, k]`` answer whatever the sizes. The pairs a source already has (its training
edges) are set to ``-inf`` inside the tile before its top ``k`` is taken, so they are never
returned.

Every list has exactly ``k`` slots. A source with fewer than ``k`` destinations left once its
excluded pairs are taken out (:func:`fillable`) fills only its first slots: the others hold
:data:`NO_SLOT` and score ``-inf``. ``NO_SLOT`` is the most negative int64, which numpy, torch
and Python all refuse as an index (``-1``, the usual marker, silently reads the last item).
The exact lists mark slots by :func:`fillable`'s counts, not by the scores: a slot within the
count that scores ``-inf`` is a candidate the model scored ``-inf`` (``predict`` refuses such
outputs as non-finite), never an empty slot. The approximate lists mark what the search did not
find as well (:func:`filled` counts their slots).
"""

from __future__ import annotations

import torch

# About the memory one tile of pair scores (and what the decoder builds for it) takes.
CHUNK_BYTES = 2**28
NO_SLOT = torch.iinfo(torch.int64).min  # the id of a slot no allowed destination fills (its score is -inf)


def chunked_top_k(
    model,
    h_src: torch.Tensor,
    h_dst: torch.Tensor,
    k: int,
    exclude: torch.Tensor,
    chunk_bytes: int = CHUNK_BYTES,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(top_dst [S, k] int64, top_scores [S, k] float32)`` for ``h_src`` [S, H] against
    ``h_dst`` [D, H], best first; ``exclude`` [2, E]: (source, destination) pairs never returned;
    ``model`` scores rows with ``decode(src_rows, dst_rows)`` (a ``decoder`` attribute of
    ``"dot"`` takes the matrix product instead, the same numbers). ``chunk_bytes``: about the
    memory one tile takes (:func:`tile_shape`). Exactly ``k`` slots per source, the unfilled ones
    :data:`NO_SLOT` (see the module's docstring)."""
    n_src, n_dst = h_src.shape[0], h_dst.shape[0]
    rows, cols = tile_shape(model, n_src, n_dst, h_dst.shape[1], chunk_bytes)
    ex_src, ex_dst = _by_source(exclude)
    best = torch.full((n_src, k), NO_SLOT, dtype=torch.int64)
    values = torch.full((n_src, k), float("-inf"), dtype=torch.float32)
    for lo in range(0, n_src, rows):
        hi = min(lo + rows, n_src)
        src = h_src[lo:hi].to(device, torch.float32)
        a, b = (int(i) for i in torch.searchsorted(ex_src, torch.tensor([lo, hi])))
        mine_src, mine_dst = ex_src[a:b] - lo, ex_dst[a:b]
        for left in range(0, n_dst, cols):
            right = min(left + cols, n_dst)
            scores = _tile_scores(model, src, h_dst[left:right].to(device, torch.float32)).cpu()
            inside = (mine_dst >= left) & (mine_dst < right)
            scores[mine_src[inside], mine_dst[inside] - left] = float("-inf")
            ids = torch.arange(left, right).expand(hi - lo, -1)
            best[lo:hi], values[lo:hi] = _merge(best[lo:hi], values[lo:hi], ids, scores, k)
    return unfilled_slots(best, values, fillable(exclude, n_src, n_dst, k))


def tile_shape(model, n_src: int, n_dst: int, width: int, chunk_bytes: int) -> tuple[int, int]:
    """(sources, destinations) of one tile within ``chunk_bytes``: every destination at once
    where a source's row fits, else as many destinations as fit for one source. A dot product
    keeps a score and topk's copy per pair; any other decoder also builds both rows, their
    concatenation and its hidden layer (about 6 floats per hidden unit)."""
    per_pair = 12 if getattr(model, "decoder", None) == "dot" else 12 + 24 * width
    pairs = max(1, chunk_bytes // per_pair)
    if pairs >= n_dst:
        return min(n_src, pairs // n_dst), n_dst
    return 1, pairs


def fillable(exclude: torch.Tensor, n_src: int, n_dst: int, k: int) -> torch.Tensor:
    """``[n_src]`` int64: the slots of each source's list of ``k`` that a destination can fill,
    ``min(k, n_dst - its distinct excluded destinations)``. Only the sources that may fall short
    (more excluded pairs than ``n_dst - k``, duplicates counted) have their pairs de-duplicated."""
    slots = torch.full((n_src,), k, dtype=torch.int64)
    raw = torch.bincount(exclude[0], minlength=n_src)[:n_src]
    short = raw > n_dst - k
    if bool(short.any()):
        mine = exclude[:, short[exclude[0]]]
        distinct = torch.bincount(torch.unique(mine[0] * n_dst + mine[1]) // n_dst, minlength=n_src)[:n_src]
        slots = torch.where(short, (n_dst - distinct).clamp(max=k), slots)
    return slots


def unfilled_slots(best: torch.Tensor, values: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``best`` and ``values`` [S, k] with each row's slots from ``slots[row]`` on marked empty:
    :data:`NO_SLOT` and ``-inf``."""
    empty = torch.arange(best.shape[1]) >= slots.unsqueeze(1)
    return best.masked_fill(empty, NO_SLOT), values.masked_fill(empty, float("-inf"))


def filled(top_dst: torch.Tensor) -> torch.Tensor:
    """``[S]`` int64: the slots of each list holding a destination id (they come first; the rest are
    :data:`NO_SLOT`). The exact lists' counts are :func:`fillable`'s, which also cover a candidate
    the model scored ``-inf``."""
    return (top_dst != NO_SLOT).sum(dim=1)


def pad(best: torch.Tensor, values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lists of fewer than ``k`` columns (fewer candidates than ``k``) widened to ``k`` empty slots."""
    missing = k - best.shape[1]
    if missing <= 0:
        return best, values
    rows = best.shape[0]
    return (
        torch.cat([best, torch.full((rows, missing), NO_SLOT, dtype=best.dtype)], dim=1),
        torch.cat([values, torch.full((rows, missing), float("-inf"), dtype=values.dtype)], dim=1),
    )


def _merge(best, values, ids, scores, k: int):
    """The running top ``k`` with a tile's candidates (``ids``, ``scores`` [rows, cols]) folded in."""
    both_values = torch.cat([values, scores.float()], dim=1)
    both_ids = torch.cat([best, ids], dim=1)
    top = both_values.topk(k, dim=1)
    return both_ids.gather(1, top.indices), top.values


def _by_source(exclude: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    order = torch.argsort(exclude[0], stable=True)
    return exclude[0, order], exclude[1, order]


def _tile_scores(model, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``[len(src), len(dst)]`` scores of every pair of a tile."""
    if getattr(model, "decoder", None) == "dot":
        return src @ dst.T
    rows = src.shape[0]
    return model.decode(src.repeat_interleave(dst.shape[0], dim=0), dst.repeat(rows, 1)).view(rows, -1).float()


def approximate_top_k(
    h_src: torch.Tensor,
    h_dst: torch.Tensor,
    k: int,
    exclude: torch.Tensor,
    chunk_bytes: int = CHUNK_BYTES,
    neighbors: int = 32,
    search_depth: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`chunked_top_k` for a dot-product decoder through FAISS's HNSW graph index (inner
    product) instead of scoring every destination. Each source asks for ``k`` plus as many
    results as it has excluded pairs, and the excluded ones are dropped, so a training pair is
    never returned. Sources are searched in groups of like exclusion counts (a power of two
    apart), each group in chunks whose ``[sources, asked]`` results fit ``chunk_bytes``, so one
    source with many training pairs costs its own search, not every source's. Approximate:
    ``benchmarks/top_k.py`` measures its recall against the exact lists, and a source may get
    fewer than it could have where the search finds fewer (its other slots :data:`NO_SLOT`).
    ``neighbors`` is HNSW's M (graph degree), ``search_depth`` its efSearch."""
    faiss = import_faiss()
    n_src, n_dst = h_src.shape[0], h_dst.shape[0]
    index = faiss.IndexHNSWFlat(h_dst.shape[1], neighbors, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efSearch = max(search_depth, k)
    index.add(h_dst.float().contiguous().numpy())
    ex_src, ex_dst = _by_source(exclude)
    per_source = torch.bincount(exclude[0], minlength=n_src)
    best = torch.full((n_src, k), NO_SLOT, dtype=torch.int64)
    values = torch.full((n_src, k), float("-inf"), dtype=torch.float32)
    group = torch.ceil(torch.log2(per_source.float() + 1)).long()  # 0, 1, 2-3, 4-7, ... excluded pairs
    for g in torch.unique(group).tolist():
        sources = (group == g).nonzero().flatten()
        ask = min(n_dst, k + int(per_source[sources].max()))
        step = max(1, chunk_bytes // (ask * 40))  # scores, ids, keys and a mask per result
        for part in sources.split(step):
            best[part], values[part] = _search(index, h_src[part], part, ask, k, (ex_src, ex_dst), n_dst)
    best = best.masked_fill(values == float("-inf"), NO_SLOT)  # not found, or excluded: nothing there
    return unfilled_slots(best, values, fillable(exclude, n_src, n_dst, k))


def _search(index, rows: torch.Tensor, sources: torch.Tensor, ask: int, k: int, exclude, n_dst: int):
    """The ``k`` best of ``ask`` HNSW results for ``sources``, their excluded pairs dropped (only
    theirs are looked at: ``exclude`` is sorted by source)."""
    ex_src, ex_dst = exclude
    scores, ids = (torch.from_numpy(a) for a in index.search(rows.float().contiguous().numpy(), ask))
    starts = torch.searchsorted(ex_src, sources)
    counts = torch.searchsorted(ex_src, sources, right=True) - starts
    offsets = torch.cumsum(counts, 0) - counts
    owner = torch.repeat_interleave(torch.arange(sources.numel()), counts)
    mine = starts[owner] + torch.arange(int(counts.sum())) - offsets[owner]
    banned = torch.unique(ex_src[mine] * n_dst + ex_dst[mine])
    keys = sources.unsqueeze(1) * n_dst + ids
    scores = scores.masked_fill(torch.isin(keys, banned) | (ids < 0), float("-inf"))  # ids -1: no result
    top = scores.topk(min(k, ask), dim=1)
    return pad(ids.gather(1, top.indices), top.values, k)


def import_faiss():
    """FAISS, or one line saying how to get it (the ``retrieval`` extra)."""
    try:
        import faiss
    except ImportError:
        from gnnbridge.core.errors import ConfigError

        raise ConfigError(
            "--index hnsw needs FAISS, which is not installed: pip install 'gnnbridge[retrieval]' (faiss-cpu), "
            "or use the exact --index exact."
        ) from None
    return faiss
