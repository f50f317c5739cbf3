"""Top-k retrieval from final node states: for every source, the ``k`` best-scoring destinations,
a chunk of sources at a time.

Why chunks: scoring every (source, destination) pair at once takes sources x destinations
floats (200k x 200k is 160 GB); a chunk of as many sources as ``chunk_bytes`` allows against
every destination is one matrix product (a dot-product decoder) or one batched decoder call
(any other), then its top ``k``, so memory stays at one chunk's scores plus the ``[sources, k]``
answer. The pairs a source already has (its training edges) are set to ``-inf`` inside the chunk
before its top ``k`` is taken, so they are never recommended; a source with fewer than ``k``
other destinations ends its list with ``-inf`` scores.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# About the memory one chunk's scores take: a few hundred sources against 200k destinations.
CHUNK_BYTES = 2**28


def chunked_top_k(
    model,
    h_src: torch.Tensor,
    h_dst: torch.Tensor,
    k: int,
    exclude: torch.Tensor,
    chunk_bytes: int = CHUNK_BYTES,
    device: torch.device | str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(top_dst [S, k] int64, top_scores [S, k] float32)`` for ``h_src`` [S, H] against
    ``h_dst`` [D, H]; ``exclude`` [2, E]: (source, destination) pairs never returned; ``model``
    scores rows with ``decode(src_rows, dst_rows)`` (a ``decoder`` attribute of ``"dot"`` takes
    the matrix product instead, the same numbers). ``chunk_bytes``: about the memory one chunk's
    scores take (:func:`chunk_pairs`). ``progress(n)``: told after each chunk."""
    n_src, n_dst = h_src.shape[0], h_dst.shape[0]
    k = min(k, n_dst)
    chunk = max(1, chunk_pairs(model, h_dst.shape[1], chunk_bytes) // max(n_dst, 1))
    order = torch.argsort(exclude[0], stable=True)
    ex_src, ex_dst = exclude[0, order], exclude[1, order]
    dst = h_dst.to(device, torch.float32)
    best = torch.empty(n_src, k, dtype=torch.int64)
    values = torch.empty(n_src, k, dtype=torch.float32)
    for lo in range(0, n_src, chunk):
        hi = min(lo + chunk, n_src)
        scores = _chunk_scores(model, h_src[lo:hi].to(device, torch.float32), dst)
        a, b = (int(i) for i in torch.searchsorted(ex_src, torch.tensor([lo, hi])))
        scores[(ex_src[a:b] - lo).to(scores.device), ex_dst[a:b].to(scores.device)] = float("-inf")
        top = scores.topk(k, dim=1)
        best[lo:hi], values[lo:hi] = top.indices.cpu(), top.values.float().cpu()
        if progress is not None:
            progress(hi - lo)
    return best, values


def chunk_pairs(model, width: int, chunk_bytes: int) -> int:
    """Pairs one chunk may score in ``chunk_bytes``: a dot product keeps a float per pair (and
    ``topk``'s copy of it); any other decoder also builds both rows of every pair."""
    per_pair = 12 if getattr(model, "decoder", None) == "dot" else 12 + 8 * width
    return max(1, chunk_bytes // per_pair)


def _chunk_scores(model, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``[len(src), len(dst)]`` scores of every pair of a chunk."""
    if getattr(model, "decoder", None) == "dot":
        return src @ dst.T
    rows = src.shape[0]
    return model.decode(src.repeat_interleave(dst.shape[0], dim=0), dst.repeat(rows, 1)).view(rows, -1).float()


def approximate_top_k(
    h_src: torch.Tensor,
    h_dst: torch.Tensor,
    k: int,
    exclude: torch.Tensor,
    chunk: int = 65536,
    neighbors: int = 32,
    search_depth: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`chunked_top_k` for a dot-product decoder through FAISS's HNSW graph index (inner
    product) instead of scoring every destination: each source asks for ``k`` plus as many
    results as it has excluded pairs, and the excluded ones are dropped, so a training pair is
    never returned. Approximate: ``benchmarks/top_k.py`` measures its recall against the exact
    lists. ``neighbors`` is HNSW's M (graph degree), ``search_depth`` its efSearch."""
    faiss = import_faiss()
    n_src, n_dst = h_src.shape[0], h_dst.shape[0]
    k = min(k, n_dst)
    index = faiss.IndexHNSWFlat(h_dst.shape[1], neighbors, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efSearch = max(search_depth, k)
    index.add(h_dst.float().contiguous().numpy())
    banned = torch.unique(exclude[0] * n_dst + exclude[1])  # one key per excluded pair
    per_source = torch.bincount(exclude[0], minlength=n_src)
    best = torch.full((n_src, k), -1, dtype=torch.int64)
    values = torch.full((n_src, k), float("-inf"), dtype=torch.float32)
    for lo in range(0, n_src, chunk):
        hi = min(lo + chunk, n_src)
        ask = min(n_dst, k + int(per_source[lo:hi].max()))
        scores, ids = (torch.from_numpy(a) for a in index.search(h_src[lo:hi].float().contiguous().numpy(), ask))
        keys = torch.arange(lo, hi).unsqueeze(1) * n_dst + ids
        scores = scores.masked_fill(torch.isin(keys, banned) | (ids < 0), float("-inf"))  # ids -1: no result
        top = scores.topk(k, dim=1)
        best[lo:hi], values[lo:hi] = ids.gather(1, top.indices), top.values
    return torch.where(values > float("-inf"), best, -1), values


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
