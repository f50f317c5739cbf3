"""A trained run held in memory to answer requests: what ``gnnbridge serve`` computes, without
HTTP (:mod:`gnnbridge.serving` puts it behind FastAPI).

The run is loaded once, as ``predict`` loads it (the checkpoint's config, its dataset, a folder
memory-mapped), and its parts are assembled once (:class:`~gnnbridge.core.inference.assembly.RunParts`).
A request for some nodes is answered from those nodes' exact full L-hop in-neighbourhood (the
``eval.mode=full`` sampler taking every neighbour), never from a pass over the whole graph; for a
model whose layers read only in-neighbours this is what ``predict``'s layer-wise pass gives
those rows, to float rounding. A link run's final node states are computed once when it loads
(the same typed layer-wise pass ``predict --top-k`` runs), so a top-k request only decodes its
sources against every destination. A graph the client sends is scored on its own, through the
same backend sampler and model call.

Every request is checked before the model sees it: :class:`RequestError` names the field and
the valid range (DGL does not bounds-check node ids; see ENVIRONMENT.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import torch

from gnnbridge.core.app.inference import check_candidates, inference_data, prepared_config
from gnnbridge.core.app.keyed import KeyLookup, key_lookup
from gnnbridge.core.config import SamplerKind, Task
from gnnbridge.core.errors import ConfigError, GnnBridgeError
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.inference.assembly import RunParts
from gnnbridge.core.inference.evaluation import SampledEvaluator, evaluation_mode, forward, scored_features
from gnnbridge.core.inference.typed_layerwise import unwrap
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.runtime.context import DistContext, resolve_device
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS
from gnnbridge.core.tasks import retrieval
from gnnbridge.core.tasks.pairs import find_pairs


class RequestError(GnnBridgeError, ValueError):
    """A request that cannot be answered as sent (HTTP 4xx): ``field`` names what is wrong."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field, self.status, self.message = field, status, message


class Served:
    """A run's ``kind`` checkpoint ready to score requests (one at a time: :attr:`lock`).

    Built in two steps so a server can listen while the run loads: the constructor reads and
    checks the checkpoint and its config (a bad run is refused before anything listens), and
    :meth:`load` (called by the constructor unless ``load=False``) loads the dataset, assembles
    the parts and computes what a link or edge task decodes from."""

    def __init__(
        self,
        target: str | os.PathLike,
        *,
        kind: str = checkpoint.BEST,
        device: str | None = None,
        overrides: list[str] | tuple[str, ...] = (),
        trust_code: bool = False,
        load: bool = True,
    ):
        self.path, self.state, self.config = prepared_config(
            target, kind, device or "cpu", overrides, "predict", trust_code
        )
        if self.config.dataset.partitions:
            raise ConfigError(
                "serve loads the whole graph in one process; a partitioned run is served with the folder whole: "
                "--set dataset.partitions=0."
            )
        self.trust_code = trust_code
        self.loaded = False
        self._stack = contextlib.ExitStack()  # a link run's mapped states live as long as the server
        if load:
            self.load()

    def load(self) -> Served:
        """Load the dataset and assemble the model (the slow part of a start); returns ``self``."""
        data = inference_data(self.path, self.state, self.config, "predict", self.trust_code)
        self.ctx = DistContext(0, 1, 0, resolve_device(self.config.device.value, 0))
        self.parts = RunParts(self.config, data, self.ctx, weights=self.state)
        self.data = self.parts.data
        self.lock = threading.Lock()  # the sampler and the model are used by one request at a time
        self.keys = self._key_lookups()  # {node type: its key map}: a dataset prepared from tables
        self._states = self._final_states() if self.config.kind in (Task.LINK, Task.EDGE) else None
        self._full = self._full_evaluator() if self.config.kind is Task.NODE else None
        self.digest = _sha256(self.path)
        self.loaded = True
        return self

    def close(self) -> None:
        self._stack.close()

    # ------------------------------------------------------------------ what the run is

    def metadata(self) -> dict:
        """What a client needs to form requests: the task, target, backend, feature width, classes
        or outputs, the valid ids, and which checkpoint answers (its epoch and SHA-256)."""
        data, config = self.data, self.config
        out = {
            "experiment": config.name,
            "task": config.task,
            "target": config.target,
            "backend": config.backend,
            "model": config.model.arch,
            "device": str(self.ctx.device),
            "checkpoint": {"path": str(self.path), "epoch": self.state["epoch"], "sha256": self.digest},
        }
        if config.kind in (Task.LINK, Task.EDGE):
            s, rel, d = data.target_edge
            out |= {"edge_type": [s, rel, d], "num_sources": data.num_nodes[s], "num_destinations": data.num_nodes[d]}
            out |= self._ids_metadata()
            if config.kind is Task.LINK:
                return out | {"endpoints": ["/top-k"]}
            out |= {"num_edges": self._num_nodes(), "outputs": data.num_classes}  # (an edge task's items: edges)
            return (
                out | ({"classes": data.num_classes} if config.target == "class" else {}) | {"endpoints": ["/predict"]}
            )
        out |= {"num_nodes": self._num_nodes(), "outputs": data.num_classes} | self._ids_metadata()
        if isinstance(data, GraphData):
            out |= {"feature_width": data.num_features, "edge_feature_width": _edge_width(data)}
        if config.target == "class":
            out["classes"] = data.num_classes
        return out | {"endpoints": ["/predict"]}

    def _ids_metadata(self) -> dict:
        """How a request names nodes: ``"ids": "keys"`` and each node type's key columns for a
        dataset prepared from tables, ``"ids": "rows"`` (0 .. N-1) otherwise."""
        if not self.keys:
            return {"ids": "rows"}
        return {"ids": "keys", "keys": {t: lookup.columns for t, lookup in self.keys.items()}}

    def _num_nodes(self) -> int:
        return int(self.data.y.shape[0])  # the items predict writes a row for

    def _key_lookups(self) -> dict[str, KeyLookup]:
        """The key maps of the node types a request names (a node task's target type, a link or
        edge task's two ends), where the dataset was prepared from tables; {} otherwise."""
        if self.config.kind is Task.NODE:
            types = [getattr(self.data, "target_node", None)]
        else:
            edge = getattr(self.data, "target_edge", None) or ()
            types = [edge[0], edge[2]] if len(edge) == 3 else []
        found = {t: key_lookup(self.config, t) for t in dict.fromkeys(types)}
        return {t: lookup for t, lookup in found.items() if lookup is not None} if all(found.values()) else {}

    def _ids(self, field: str, given: Any, node_type: str | None, n: int, unit: str, at: str = "[{}]") -> torch.Tensor:
        """A request's nodes of ``node_type``: by the user's keys where the dataset keeps them,
        else as ids in ``[0, n)``; item ``i``'s field is ``field + at.format(i)``."""
        lookup = self.keys.get(node_type) if node_type else None
        return node_ids(field, given, n, unit, at) if lookup is None else keyed_ids(field, given, lookup, at)

    # ------------------------------------------------------------------ node ids

    def _full_evaluator(self) -> SampledEvaluator:
        """``eval.mode=full``'s evaluator: every neighbour at every hop (exact, any model)."""
        family = self.parts.family
        return family.through(self.parts, family.sampler(self.parts, every_neighbour=True))

    def nodes(self, ids: Any) -> dict:
        """``predict``'s rows of the nodes ``ids`` (the dataset's ids, in the request's order)."""
        return self.score_nodes([self.node_seeds(ids)])[0]

    def node_seeds(self, ids: Any) -> torch.Tensor:
        """A request's node ids, checked (:class:`RequestError` otherwise)."""
        if self.config.kind is not Task.NODE:
            raise RequestError("nodes", f"this run's task is {self.config.task}; it scores no node ids", 400)
        return self._ids("nodes", ids, getattr(self.data, "target_node", None), self._num_nodes(), "node")

    def score_nodes(self, requests: list[torch.Tensor]) -> list[dict]:
        """The rows of several requests' checked ids from one pass over the union of their
        neighbourhoods; a dict of outputs per request."""
        seeds = torch.cat(requests)
        unique, order = torch.unique(seeds, return_inverse=True)  # (a DGL block cannot take a seed twice)
        with self.lock, torch.no_grad(), evaluation_mode(self.ctx, self.parts.model, self.parts.call, "serving"):
            ev = self._full
            ev.sampler.reseed(self.config.train.seed, -1, 0)
            rows = torch.cat([forward(ev, self.parts.model, mb).float().cpu() for mb in ev.sampler.loader([unique])])
        rows = rows[order]
        return [self.outputs(part) for part in rows.split([r.numel() for r in requests])]

    def outputs(self, logits: torch.Tensor) -> dict:
        """The JSON of scored rows: ``logits`` and what the target derives (``probs``, ``pred`` for
        classes), as ``predict`` writes them."""
        if not bool(logits.isfinite().all()):
            raise FloatingPointError(f"the model's outputs are NaN or infinite with the weights in '{self.path}'")
        derived = self.parts.target.derived(*logits.shape)
        arrays = {"logits": logits} | {name: fn(logits) for name, (fn, _, _) in derived.items()}
        return {name: value.tolist() for name, value in arrays.items()}

    # ------------------------------------------------------------------ a graph the client sends

    def subgraph(self, graph: Any, ids: Any) -> dict:
        """The rows of ``ids`` (ids of the sent graph's nodes) from the model run on that graph
        alone: ``{"x": [[...]], "edge_index": [[src...], [dst...]], "edge_attr"?: [[...]]}``."""
        if self.config.kind is not Task.NODE or not isinstance(self.data, GraphData):
            raise RequestError(
                "graph", f"a sent graph is scored by a homogeneous node task; this run's is {self.config.task}", 400
            )
        sub = self._sent_graph(graph)
        seeds = node_ids("nodes", ids, sub.num_nodes, unit="node of the sent graph")
        unique, order = torch.unique(seeds, return_inverse=True)
        parts, cfg = self.parts, self.config
        backend = parts.backend
        sampler = backend.sampler(
            backend.graph_store(sub), [ALL_NEIGHBORS] * len(cfg.sampler.fanouts), SamplerKind.AUTO
        )
        ev = SampledEvaluator(
            backend, sub, self.ctx, len(unique), sampler, cfg.train.seed, parts.call, "memory", parts.target
        )
        with self.lock, torch.no_grad(), evaluation_mode(self.ctx, parts.model, parts.call, "serving a sent graph"):
            rows = torch.cat([forward(ev, parts.model, mb).float().cpu() for mb in sampler.loader([unique])])
        return self.outputs(rows[order])

    def _sent_graph(self, graph: Any) -> GraphData:
        if not isinstance(graph, dict):
            raise RequestError("graph", 'must be an object {"x": [[...]], "edge_index": [[...], [...]]}')
        width = self.data.num_features
        x = float_rows("graph.x", graph.get("x"), width)
        n = x.shape[0]
        edge_index = edge_lists("graph.edge_index", graph.get("edge_index"), n)
        edge_attr = None
        e_width = _edge_width(self.data)
        if e_width:
            edge_attr = float_rows("graph.edge_attr", graph.get("edge_attr"), e_width, rows=edge_index.shape[1])
        elif graph.get("edge_attr") is not None:
            raise RequestError("graph.edge_attr", "this run's graph has no edge features; leave it out")
        try:
            sub = GraphData.unlabelled(edge_index, x, self.data.num_classes, labels=self.data.labels)
        except GnnBridgeError as exc:
            raise RequestError("graph", str(exc)) from None
        if edge_attr is not None:
            order = torch.argsort(edge_index[1], stable=True)  # the record keeps its edges by destination
            sub.edge_attr = edge_attr[order]
        return sub

    # ------------------------------------------------------------------ edge tasks

    def edges(self, pairs: Any) -> dict:
        """An edge task's rows of the given ``[[src, dst], ...]`` edges of its graph (ids, or the
        two ends' keys for a dataset prepared from tables): ``predict``'s rows of those edges,
        decoded from the final states computed when the server loaded."""
        if self.config.kind is not Task.EDGE:
            raise RequestError("edges", f"scores an edge task's edges; this run's task is {self.config.task}", 400)
        data = self.data
        s, rel, d = data.target_edge
        if not isinstance(pairs, list) or not pairs:
            raise RequestError("edges", f"must be a non-empty list of [source, destination] pairs, got {_shown(pairs)}")
        for i, pair in enumerate(pairs):
            if not isinstance(pair, list) or len(pair) != 2:
                raise RequestError(f"edges[{i}]", f"must be a pair [source, destination], got {_shown(pair)}")
        ends = [
            self._ids("edges", [p[end] for p in pairs], t, data.num_nodes[t], f"'{t}' node", at=f"[{{}}][{end}]")
            for end, t in ((0, s), (1, d))
        ]
        wanted = torch.stack(ends)
        found = find_pairs(data.edge_index[data.target_edge], wanted, data.num_nodes[d])
        missing = (found < 0).nonzero().flatten()
        if missing.numel():
            i = int(missing[0])
            raise RequestError(
                f"edges[{i}]",
                f"{_shown(pairs[i])} is not an edge of ({s}, {rel}, {d}); an edge task scores its graph's own edges",
                404,
            )
        inner, device = unwrap(self.parts.model), self.ctx.device
        with self.lock, torch.no_grad(), self.parts.call.blame("decode (edges)"):
            features = scored_features(data, found, device)
            src, dst = self._states[s][wanted[0]].to(device), self._states[d][wanted[1]].to(device)
            logits = inner.decode(src, dst) if features is None else inner.decode(src, dst, features)
        return self.outputs(logits.float().cpu())

    # ------------------------------------------------------------------ link runs

    def _final_states(self) -> dict[str, torch.Tensor]:
        """Every node type's final states, from the typed layer-wise pass ``predict`` uses (a link
        run's top-k and an edge task's edges are decoded from them)."""
        if self.config.kind is Task.EDGE:
            if not self.parts.family.can_run_layerwise(self.parts):
                raise ConfigError(
                    f"serve answers an edge task's edges from layer-wise states, but {self.parts.call.origin} "
                    "offers no typed layer-wise pass."
                )
            return self.parts.embeddings(self._stack)
        links = self.parts.link_scorer()
        if not hasattr(links, "layerwise"):
            raise ConfigError(
                f"serve answers a link run's top-k from its layer-wise states, but {self.parts.call.origin} has none "
                "(or the run evaluates with eval.mode other than layerwise: --set eval.mode=layerwise)."
            )
        return links.embeddings(self.parts.model, self._stack)

    def top_k(self, sources: Any, k: Any) -> dict:
        """``predict --top-k``'s rows of ``sources``: each one's ``k`` best destinations and their
        scores, leaving out its training edges; a row ends where its candidates do."""
        if self.config.kind is not Task.LINK:
            raise RequestError(
                "sources", f"top-k ranks a link task's destinations; this run's task is {self.config.task}", 400
            )
        s, _, d = self.data.target_edge
        n_src, n_dst = self.data.num_nodes[s], self.data.num_nodes[d]
        ids = self._ids("sources", sources, s, n_src, f"'{s}' node")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_dst:
            raise RequestError("k", f"must be a whole number in [1, {n_dst}] (the '{d}' nodes), got {k!r}")
        try:
            check_candidates(self.data, k)
        except ConfigError as exc:
            raise RequestError("k", str(exc)) from None
        unique, order = torch.unique(ids, return_inverse=True)
        known = self.data.known_pairs()
        position = torch.full((n_src,), -1, dtype=torch.int64)
        position[unique] = torch.arange(unique.numel())
        mine = known[:, position[known[0]] >= 0]
        exclude = torch.stack([position[mine[0]], mine[1]])
        with self.lock, torch.no_grad(), self.parts.call.blame("decode (top-k)"):
            top, scores = retrieval.chunked_top_k(
                unwrap(self.parts.model), self._states[s][unique], self._states[d], k, exclude, device=self.ctx.device
            )
        counts = retrieval.fillable(exclude, unique.numel(), n_dst, k)
        top, scores, counts = top[order], scores[order], counts[order]
        items = [row[:c].tolist() for row, c in zip(top, counts.tolist())]
        if d in self.keys:  # named back by the destinations' keys
            items = [self.keys[d].keys(row) if row else [] for row in items]
        return {
            "items": items,
            "scores": [row[:c].tolist() for row, c in zip(scores.float(), counts.tolist())],
        }


# ---------------------------------------------------------------------- request fields


def node_ids(field: str, ids: Any, n: int, unit: str = "node", at: str = "[{}]") -> torch.Tensor:
    """``ids``: a non-empty JSON list of whole numbers in ``[0, n)`` (item ``i``: ``field + at.format(i)``)."""
    if not isinstance(ids, list) or not ids:
        raise RequestError(field, f"must be a non-empty list of {unit} ids in [0, {n}), got {_shown(ids)}")
    for i, v in enumerate(ids):
        if isinstance(v, bool) or not isinstance(v, int):
            raise RequestError(field + at.format(i), f"must be a whole number ({unit} id in [0, {n})), got {_shown(v)}")
        if not 0 <= v < n:
            raise RequestError(field + at.format(i), f"{unit} id {v} is outside [0, {n})", 404 if v >= 0 else 422)
    return torch.tensor(ids, dtype=torch.int64)


def keyed_ids(field: str, given: Any, lookup: KeyLookup, at: str = "[{}]") -> torch.Tensor:
    """``given``: a non-empty JSON list of keys of ``lookup``'s node type, as the user wrote them
    in the tables (a value for a one-column key; ``[a, b]`` in the key's column order or
    ``{"a": .., "b": ..}`` for a composite one); their node ids, in the request's order."""
    import pyarrow as pa

    cols = ", ".join(lookup.columns)
    what = f"'{lookup.type}' keys ({cols})"
    if not isinstance(given, list) or not given:
        raise RequestError(field, f"must be a non-empty list of {what}, got {_shown(given)}")
    parts = [_key_parts(field + at.format(i), v, lookup) for i, v in enumerate(given)]
    columns = {}
    for j, (name, kind) in enumerate(zip(lookup.columns, lookup.types)):
        values = [p[j] for p in parts]
        try:
            columns[name] = pa.array(values, type=kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            i = next(i for i, v in enumerate(values) if not _converts(v, kind))
            raise RequestError(
                field + at.format(i), f"column {name} of '{lookup.type}' holds {kind} keys, got {_shown(values[i])}"
            ) from None
    ids = lookup.ids(columns)
    unknown = (ids < 0).nonzero()[0]
    if unknown.size:
        i = int(unknown[0])
        raise RequestError(
            field + at.format(i), f"{_shown(given[i])} is not among the keys of '{lookup.type}' (column {cols})", 404
        )
    return torch.from_numpy(ids)


def _key_parts(field: str, value: Any, lookup: KeyLookup) -> list:
    cols = lookup.columns
    if len(cols) == 1:
        if isinstance(value, (list, dict)):
            got = _shown(value)
            raise RequestError(field, f"must be one '{lookup.type}' key (a value of column {cols[0]}), got {got}")
        return [value]
    if isinstance(value, list) and len(value) == len(cols):
        return value
    if isinstance(value, dict) and set(value) == set(cols):
        return [value[c] for c in cols]
    shape = "[" + ", ".join(cols) + "] or {" + ", ".join(f'"{c}": ..' for c in cols) + "}"
    raise RequestError(field, f"must be a '{lookup.type}' key {shape}, got {_shown(value)}")


def _converts(value: Any, kind) -> bool:
    import pyarrow as pa

    try:
        pa.array([value], type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return False
    return True


def float_rows(field: str, value: Any, width: int, rows: int | None = None) -> torch.Tensor:
    """``value``: a list of ``rows`` (any number when None) finite number lists of ``width``."""
    what = f"a list of {rows if rows is not None else 'N'} rows of {width} numbers"
    if not isinstance(value, list) or not value or (rows is not None and len(value) != rows):
        got = f"{len(value)} rows" if isinstance(value, list) else _shown(value)
        raise RequestError(field, f"must be {what}, got {got}")
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != width:
            got = f"{len(row)} numbers" if isinstance(row, list) else _shown(row)
            raise RequestError(f"{field}[{i}]", f"must be a list of {width} numbers (the run's width), got {got}")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row):
            raise RequestError(f"{field}[{i}]", f"must hold numbers only, got {_shown(row)}")
    x = torch.tensor(value, dtype=torch.float32)
    if not bool(x.isfinite().all()):
        raise RequestError(field, "must hold finite numbers (no NaN or infinity)")
    return x


def edge_lists(field: str, value: Any, n: int) -> torch.Tensor:
    """``value``: ``[[sources...], [destinations...]]``, ids of the sent graph's ``n`` nodes."""
    if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, list) for v in value):
        raise RequestError(
            field, f"must be two lists [[sources], [destinations]] of node ids in [0, {n}), got {_shown(value)}"
        )
    if len(value[0]) != len(value[1]):
        raise RequestError(
            field,
            f"its two lists must be as long (one source per destination), got {len(value[0])} and {len(value[1])}",
        )
    for end, ids in zip(("0", "1"), value):
        for i, v in enumerate(ids):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
                raise RequestError(
                    f"{field}[{end}][{i}]", f"must be a node id of the sent graph in [0, {n}), got {_shown(v)}"
                )
    return torch.tensor(value, dtype=torch.int64).view(2, -1)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _edge_width(data) -> int:
    attr = getattr(data, "edge_attr", None)
    return int(attr.shape[1]) if isinstance(attr, torch.Tensor) and attr.dim() == 2 else 0


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
