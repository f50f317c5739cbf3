"""Rank workers for multi-process tests (importable by spawned children, unlike test modules)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import DataError
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.runtime.context import DistContext
from gnnbridge.core.training.trainer import RANK_MODULES, Trainer, parameters_digest

GRAPH_FILES = ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx")


def launch_ranks(worker: Callable[..., Any], nproc: int, args: tuple, timeout_s: float = 120) -> Any:
    """:func:`~gnnbridge.core.runtime.launcher.launch` on CPU, the ranks forked from a server that
    has loaded both backends' libraries and what a Trainer loads (as ``gnnbridge train``'s ranks
    are forked from one that loaded its backend's), so a test's ranks do not each import them
    (about 3 s of CPU a rank). The server is kept for the next test while the environment stays
    the same, so pytest's own per-test variable is left out of the ranks' environment."""
    from gnnbridge.core.plugins import backends
    from gnnbridge.core.runtime.launcher import launch

    preload = (*(entry for name in ("dgl", "pyg") for entry in backends.get(name).rank_modules()), *RANK_MODULES)
    current = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        return launch(worker, nproc, "cpu", args, timeout_s=timeout_s, preload=preload)
    finally:
        if current is not None:
            os.environ["PYTEST_CURRENT_TEST"] = current


def train_and_dump(ctx: DistContext, config: ExperimentConfig, data: GraphData, out: str) -> None:
    """Train, then save this rank's parameters, metrics and history to ``out/rank<r>.pt``."""
    trainer = Trainer(config, data, ctx, show_progress=False)
    outcome = trainer.fit()
    torch.save(
        {
            "params": parameters_digest(trainer.parts.model),
            "metrics": outcome["metrics"],
            "history": outcome["history"],
        },
        Path(out) / f"rank{ctx.rank}.pt",
    )


def graph_batches_and_metrics(ctx: DistContext, backend_name: str, kind: str, data, batch_size: int, out: str) -> None:
    """Record the graph batches a rank's loader yields for two epochs, and the metrics of an
    untrained GIN evaluated over the val and test splits, to ``out/rank<r>.pt``."""
    from gnnbridge.core.config import ModelSpec, SamplerKind, Task
    from gnnbridge.core.inference.evaluation import GraphEvaluator
    from gnnbridge.core.models.build import build_model
    from gnnbridge.core.plugins import get_backend
    from gnnbridge.core.sampling.seeds import epoch_batches

    backend = get_backend(backend_name)
    loader = backend.collection_sampler(backend.collection_store(data), SamplerKind(kind))
    epochs = []
    for epoch in range(2):
        batches = epoch_batches(data.train_idx, batch_size, 0, epoch, ctx.rank, ctx.world_size)
        epochs.append([(mb.seeds.clone(), mb.input_nodes.clone()) for mb in loader.loader(batches)])
    torch.manual_seed(0)
    model, _ = build_model(
        ModelSpec(arch="gin", hidden=8, layers=2), backend_name, Task.GRAPH, data.num_features, data.num_classes, data
    )
    with torch.no_grad():  # BatchNorm statistics that differ a lot between ranks
        model(*_some_batch(loader, data, ctx.rank))
    metrics = GraphEvaluator(backend, data, ctx, 4, loader).evaluate(model, ("val", "test"))
    torch.save({"epochs": epochs, "metrics": metrics}, Path(out) / f"rank{ctx.rank}.pt")


def _some_batch(loader, data, rank: int):
    mb = next(iter(loader.loader([data.train_idx[rank::2][:16]])))
    return mb.graph, data.x[mb.input_nodes] * (1 + 4 * rank) + rank


def fail_on_one_rank(ctx: DistContext, failing_rank: int, how: str) -> None:
    """All ranks meet once; then ``failing_rank`` raises (``how="raise"``) or stops talking
    (``"hang"``) while the others wait for it in a collective, as a crashed or stuck rank
    leaves its peers mid-epoch."""
    torch.distributed.barrier()
    if ctx.rank == failing_rank:
        if how == "raise":
            raise ValueError(f"boom on rank {ctx.rank}")
        time.sleep(3600)
    ctx.advance()  # the others step on, and wait for the stuck rank in the next collective
    torch.distributed.all_reduce(torch.ones(4))


def load_shared_and_dump(ctx: DistContext, out: str) -> None:
    """Each rank takes the dataset through ``node_shared`` and reports what it got and where the
    pages of ``x`` live; the loader leaves a mark per call, so a test can count the loads."""
    from functools import partial

    from gnnbridge.core.runtime.sharing import node_shared

    data = node_shared(ctx, partial(_marked_small_graph, Path(out) / f"loaded-by-rank{ctx.rank}"))
    torch.save(
        {
            "x": data.x.clone(),
            "edge_index": data.edge_index.clone(),
            "summary": data.summary(),
            "x_file": data.x.untyped_storage().filename,
        },
        Path(out) / f"rank{ctx.rank}.pt",
    )


def _marked_small_graph(mark: Path):
    from gnnbridge.testing.conformance import small_graph

    mark.touch()
    return small_graph()


def layers_on_disk_and_dump(ctx: DistContext, data: GraphData, out: str) -> None:
    """Layer-wise inference with every layer in a shared file (eval.layer_store=disk) on both
    backends; saves the logits and which layer files were mapped while they were written."""
    from gnnbridge.core.config import ModelSpec
    from gnnbridge.core.inference.evaluation import LayerwiseEvaluator
    from gnnbridge.core.plugins import backends
    from gnnbridge.testing.conformance import build

    result = {}
    for name in ("pyg", "dgl"):
        torch.manual_seed(0)
        model = build(backends.get(name), ModelSpec(arch="sage", hidden=8, layers=3, dropout=0.0), data).eval()
        evaluator = LayerwiseEvaluator(backends.get(name), data, ctx, batch_size=16, layer_store="disk")
        result[name] = evaluator.full_logits(model)
    with open("/proc/self/maps") as f:
        result["maps"] = sorted({line.split(None, 5)[-1].strip() for line in f if "gnnbridge-layers-" in line})
    torch.save(result, Path(out) / f"rank{ctx.rank}.pt")


def gather_rows_and_dump(ctx: DistContext, data: GraphData, out: str) -> None:
    """All-gathers rows laid out as layer-wise inference lays them out (padding on this rank's
    buffer) and unevenly, and runs layer-wise inference on both backends; saves what came back."""
    from gnnbridge.core.config import ModelSpec
    from gnnbridge.core.inference.evaluation import LayerwiseEvaluator
    from gnnbridge.core.plugins import backends
    from gnnbridge.testing.conformance import build

    shards = ctx.row_shards(7)
    sizes = [s.numel() for s in shards]
    mine = torch.full((max(sizes), 2), -1.0)  # rows past this rank's shard are padding, never returned
    mine[: sizes[ctx.rank]] = shards[ctx.rank].float()[:, None]
    uneven = [1, 3]
    result = {
        "even": ctx.all_gather_rows(mine, sizes),
        "uneven": ctx.all_gather_rows(torch.full((uneven[ctx.rank], 2), float(ctx.rank)), uneven),
    }
    for name in ("pyg", "dgl"):
        torch.manual_seed(0)
        model = build(backends.get(name), ModelSpec(arch="sage", hidden=8, layers=2, dropout=0.0), data).eval()
        result[name] = LayerwiseEvaluator(backends.get(name), data, ctx, batch_size=64).full_logits(model)
    torch.save(result, Path(out) / f"rank{ctx.rank}.pt")


def open_mapped_graph(folder: str, mapped: bool = True) -> GraphData:
    """A test opener: the graph whose arrays ``folder`` holds as ``.npy`` files, memory-mapped
    (read-only, never written), carrying ``mapped_from`` unless ``mapped`` is False. Like a
    prepared folder's opener it refuses, in one line, a copy whose files differ in size from its
    ``manifest.json``."""
    import json
    import warnings

    import numpy as np

    root = Path(folder)
    for name, size in json.loads((root / "manifest.json").read_text()).items():
        if (root / name).stat().st_size != size:
            raise DataError(
                f"{root / name} has {(root / name).stat().st_size} bytes but its manifest says {size}: "
                "this copy of the folder differs from the one prepared; copy it again."
            )

    def load(name):
        with warnings.catch_warnings():  # the mapping is read-only and nothing writes to it
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(np.load(root / f"{name}.npy", mmap_mode="r"))

    data = GraphData(*(load(n) for n in GRAPH_FILES), num_classes=int(np.load(root / "num_classes.npy")))
    if mapped:
        data.mapped_from = (open_mapped_graph, (folder, mapped))
    return data


def save_graph_files(data: GraphData, folder: Path) -> None:
    """The arrays :func:`open_mapped_graph` opens, one ``.npy`` per field, and their sizes."""
    import json

    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    for name in GRAPH_FILES:
        np.save(folder / f"{name}.npy", getattr(data, name).numpy())
    np.save(folder / "num_classes.npy", np.array(data.num_classes))
    sizes = {p.name: p.stat().st_size for p in folder.glob("*.npy")}
    (folder / "manifest.json").write_text(json.dumps(sizes))


def where_x_lives(
    ctx: DistContext, data: GraphData | None, out: str, folder: str | None = None, mapped: bool = True
) -> None:
    """Report the ``/proc/self/maps`` line holding this rank's ``x`` and every mapping of a
    gnnbridge shared-memory file; with ``folder`` the rank takes the data through ``node_shared``
    (opening ``folder`` with :func:`open_mapped_graph`, ``mapped_from`` set if ``mapped``)."""
    import json
    from functools import partial

    from gnnbridge.core.runtime.sharing import node_shared, shm_dir

    if folder is not None:
        data = node_shared(ctx, partial(open_mapped_graph, folder, mapped))
    maps = Path("/proc/self/maps").read_text().splitlines()
    ptr = data.x.data_ptr()
    line = next(m for m in maps if int(m.split()[0].split("-")[0], 16) <= ptr < int(m.split()[0].split("-")[1], 16))
    shm = [m for m in maps if f"{shm_dir()}/gnnbridge-" in m]
    Path(out, f"rank{ctx.rank}.json").write_text(
        json.dumps(
            {
                "x_line": line,
                "shm": shm,
                "mapped": getattr(data, "mapped_from", None) is not None,
                "x_sum": float(data.x.sum()),
            }
        )
    )


def cached_training(ctx: DistContext, config: ExperimentConfig, data, out: str, file_limit: int | None = None) -> None:
    """Train with ``placement.feature_cache``; save to ``out/rank<r>.json``, per feature table
    with a cache, the ``/proc/self/maps`` lines holding its rows and ids (which file, which
    inode: two ranks on one mapping hold one copy), whether it holds the table's rows and
    gathers them right, and the run's hit rates. ``file_limit``: the largest file the rank may
    write (``RLIMIT_FSIZE``, SIGXFSZ ignored), so the kernel refuses a larger shared file as a
    full ``/dev/shm`` does."""
    import json
    import resource
    import signal

    from gnnbridge.core.records.features import cache_of, gather_rows

    if file_limit is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    trainer = Trainer(config, data, ctx, show_progress=False)
    tables = trainer.parts.data.x if isinstance(trainer.parts.data.x, dict) else {"": trainer.parts.data.x}
    caches = {}
    for name, table in tables.items():
        cache = cache_of(table)
        if cache is not None:
            every = torch.arange(table.shape[0])
            caches[name] = {
                "rows_map": mapping_of(cache.rows.data_ptr()),
                "ids_map": mapping_of(cache.ids.data_ptr()),
                "rows": cache.ids.numel(),
                "holds_table_rows": torch.equal(cache.rows, table[cache.ids]),
                "gathers_table": torch.equal(gather_rows(table, every), table[every].float()),
                "hits": cache.hits,
            }
    outcome = trainer.fit()
    Path(out, f"rank{ctx.rank}.json").write_text(
        json.dumps(
            {
                "caches": caches,
                "epoch_hit_rates": [h["feature_cache_hit_rate"] for h in outcome["history"]],
                "summary": trainer.cache_summary(),
            }
        )
    )


def mapping_of(address: int) -> str:
    """The ``/proc/self/maps`` line whose range holds ``address``."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        lo, hi = (int(a, 16) for a in line.split()[0].split("-"))
        if lo <= address < hi:
            return line
    raise AssertionError(f"{address:#x} is in no mapping of this process")


def typed_states_and_dump(ctx: DistContext, data, store: str, out: str) -> None:
    """Every node type's final states from the typed layer-wise pass (heterogeneous SAGE, seed
    0, batches of 5) on both backends; rank 0 saves them to ``out``."""
    from contextlib import ExitStack

    from gnnbridge.core.config import ModelSpec, Task
    from gnnbridge.core.inference.typed_layerwise import TypedLayerwise
    from gnnbridge.core.models.build import build_model, model_dims
    from gnnbridge.core.plugins import get_backend

    result = {}
    for name in ("pyg", "dgl"):
        torch.manual_seed(0)
        spec = ModelSpec(arch="sage", hidden=8, layers=2, dropout=0.0)
        model = build_model(spec, name, Task.LINK, *model_dims(data), data)[0].eval()
        with ExitStack() as stack:
            states = TypedLayerwise(get_backend(name), data, ctx, 5, store).states(model, stack)
            result[name] = {t: h.clone() for t, h in states.items()}
    if ctx.rank == 0:
        torch.save(result, out)


def sparse_lookups(rank: int) -> dict[str, torch.Tensor]:
    """The rows each rank's batch looks up in three tables: they overlap between ranks, rank 1
    misses ``items`` and no rank touches ``tags``."""
    if rank == 0:
        return {"users": torch.tensor([1, 2, 2, 7]), "items": torch.tensor([4])}
    return {"users": torch.tensor([2, 5])}


def sparse_tables_loss(tables: dict[str, torch.nn.Embedding], rank: int) -> torch.Tensor:
    """A rank's loss over its lookups, weighted by rank so that the ranks' gradients differ."""
    weight = torch.arange(1.0, 4.0) * (rank + 1)
    return sum((tables[name](rows) * weight).sum() for name, rows in sparse_lookups(rank).items())


def table_steps_and_dump(ctx: DistContext, copies: str, out: str) -> None:
    """Three Adam steps through sparse tables kept as ``placement.tables=copies`` says: rows
    repeated within and across ranks, a rank that misses a table, a table no rank touches,
    batches that grow (so the shared mailboxes do). Dumps the tables, their moments and the
    file behind each table's weight (None: private memory) to ``out/rank<r>.pt``."""
    from gnnbridge.core.config import TrainConfig
    from gnnbridge.core.training import optim, shared_tables, sparse

    torch.manual_seed(0)
    model = torch.nn.ModuleDict(
        {n: torch.nn.Embedding(k, 3, sparse=True) for n, k in (("users", 40), ("goods", 9), ("tags", 5))}
    )
    model["head"] = torch.nn.Linear(3, 1)  # a dense part, as every model has
    opt = optim.for_model(model, TrainConfig(lr=0.1))
    tables = sparse.sparse_tables(model)
    applies = copies == "machine" and shared_tables.applies(ctx, opt, tables)
    sync = shared_tables.SharedTableSync(ctx, tables, opt) if applies else sparse.SparseGradSync(ctx, tables)
    for step in range(3):
        g = torch.Generator().manual_seed(10 * step + ctx.rank)
        users = torch.randint(0, 40, (3 + 8 * step,), generator=g)
        goods = torch.randint(0, 9, (4,), generator=g) if step or ctx.rank == 0 else torch.zeros(0, dtype=torch.long)
        opt.zero_grad(set_to_none=True)
        weight = torch.arange(1.0, 4.0) * (ctx.rank + 1)
        ((model["users"](users) ** 2 * weight).sum() + (model["goods"](goods) * weight).sum()).backward()
        sync()
        opt.step()
        sync.settle()
    dump = {"applies": applies}
    for name in ("users", "goods"):
        param = model[name].weight
        dump[name] = [param.detach().clone(), *(opt.state[param][k].clone() for k in ("exp_avg", "exp_avg_sq"))]
        dump[f"{name}.file"] = param.untyped_storage().filename
    torch.save(dump, Path(out) / f"rank{ctx.rank}.pt")


def sparse_grads_and_dump(ctx: DistContext, out: str) -> None:
    """Backward through sparse tables on this rank's lookups, the sync the trainer runs after
    it, and the gradients each table ends with (None: no gradient) to ``out/rank<r>.pt``."""
    from gnnbridge.core.training.sparse import SparseGradSync

    torch.manual_seed(0)
    tables = {name: torch.nn.Embedding(n, 3, sparse=True) for name, n in (("users", 20), ("items", 10), ("tags", 5))}
    sparse_tables_loss(tables, ctx.rank).backward()
    SparseGradSync(ctx, {name: t.weight for name, t in tables.items()})()
    grads = {name: None if t.weight.grad is None else t.weight.grad.to_dense() for name, t in tables.items()}
    torch.save(grads, Path(out) / f"rank{ctx.rank}.pt")


def sample_parts_and_dump(
    ctx: DistContext, root: str, parts: int, fanouts: list[int], out: str, caches: tuple[int, ...] = (0,)
) -> None:
    """Rank ``r`` plays machine ``r`` of a graph partitioned into ``parts``: for each size of
    remote cache in ``caches`` (bytes; 0: none) it samples batches of its own training nodes
    across machines (every hop's other-machine nodes on their owners, the rows from theirs or
    from the cache) and saves what came back, in *original* ids, to ``out/rank<r>-<cache>.pt``:
    each batch's seeds, every sampled edge (source, destination, edge id) and the fetched rows."""
    import torch.distributed as dist

    from gnnbridge.core.sampling.distributed import Exchange, PartitionSampler
    from gnnbridge.core.sampling.seeds import epoch_generator
    from gnnbridge.core.storage.parts import open_partition

    data = open_partition(root, parts, ctx.rank)
    original = torch.cat([open_partition(root, parts, m).partition.node_ids for m in range(parts)])
    for cache in caches:
        sampler = PartitionSampler.of(data, fanouts, Exchange(dist.group.WORLD, parts, ctx.rank))
        if cache:
            found = sampler.cache_rows(cache)
            sampler.remote = (found["ids"], found["rows"])
            sampler.exchange.reset()
        generator = epoch_generator(0, 0, ctx.rank, stream=1)
        batches = []
        seeds_all = data.train_idx
        for seeds in (seeds_all[:7], seeds_all[7:7], seeds_all[7:30]):  # an empty batch joins every exchange too
            sub = sampler.sample(seeds + sampler.start, generator)
            rows = sampler.fetch(sub.node)
            batches.append(
                {
                    "seeds": original[sub.seeds],
                    "src": original[sub.node[sub.row]],
                    "dst": original[sub.node[sub.col]],
                    "cols_sorted": bool((sub.col[1:] >= sub.col[:-1]).all()) if sub.col.numel() else True,
                    "nodes": original[sub.node],
                    "rows": rows,
                    "edges": sub.edge,
                    "hop_edges": sub.num_sampled_edges,
                }
            )
        saved = {"batches": batches, "traffic": sampler.exchange.reset()}
        torch.save(saved, Path(out) / f"rank{ctx.rank}-{cache}.pt")


def part_layers_and_dump(ctx: DistContext, root: str, parts: int, backends: tuple, arch: str, out: str) -> None:
    """Rank ``r`` plays machine ``r`` (of one rank) of a graph partitioned into ``parts``: for
    each of ``backends``, the exact layer-wise logits of its own nodes for a ``arch`` model drawn
    from seed 0, saved with the nodes' original ids to ``out/rank<r>-<backend>.pt``."""
    from gnnbridge.core.config import ModelSpec, Task
    from gnnbridge.core.inference.partitioned import PartitionedLayerwise
    from gnnbridge.core.models.build import build_model, model_dims
    from gnnbridge.core.models.init import initialise
    from gnnbridge.core.plugins import get_backend
    from gnnbridge.core.storage.parts import open_partition

    ctx.node_rank, ctx.num_nodes, ctx.local_rank, ctx.local_world_size = ctx.rank, ctx.world_size, 0, 1
    data = open_partition(root, parts, ctx.rank)
    for backend in backends:
        model, _ = build_model(ModelSpec(arch=arch, hidden=16), backend, Task.NODE, *model_dims(data), data)
        initialise(model, 0)
        logits = PartitionedLayerwise(get_backend(backend).require(), data, ctx, 37).full_logits(model.eval())
        saved = {"logits": logits, "ids": data.partition.node_ids.clone()}
        torch.save(saved, Path(out) / f"rank{ctx.rank}-{backend}.pt")


def sample_typed_parts_and_dump(ctx: DistContext, root: str, parts: int, fanouts: list[int], out: str) -> None:
    """Rank ``r`` plays machine ``r`` of a heterogeneous graph partitioned into ``parts``: it
    samples two batches of its own labelled nodes (the second empty: it still joins every
    exchange) across machines, each hop's relations in one exchange (``True``) and one by one
    (``False``), and saves, in the dataset's own ids, every sampled edge per relation (with its
    feature row where the relation has them) and every fetched row, to ``out/rank<r>.pt``."""
    import torch.distributed as dist

    from gnnbridge.core.sampling.distributed import Exchange, PartitionHeteroSampler
    from gnnbridge.core.storage.parts import open_partition
    from gnnbridge.core.tasks.node import for_node_task

    data = for_node_task(open_partition(root, parts, ctx.rank), True, 0)
    opened = [open_partition(root, parts, m).partition for m in range(parts)]
    original = {t: torch.cat([p.types[t].node_ids for p in opened]) for t in data.num_nodes}
    typed = {et: list(fanouts) for et in data.edge_types}
    sampler = PartitionHeteroSampler(data, typed, Exchange(dist.group.WORLD, parts, ctx.rank))
    start, target = data.partition.start, data.target_node
    saved = {}
    for batched in (True, False):  # every relation in one exchange, and one exchange per relation
        sampler.batched = batched
        saved[batched] = _typed_batches(sampler, data, original, start, target)
    saved["traffic"] = sampler.exchange.reset()
    torch.save(saved, Path(out) / f"rank{ctx.rank}.pt")


def _typed_batches(sampler, data, original: dict, start: int, target: str) -> list[dict]:
    from gnnbridge.core.sampling.seeds import epoch_generator

    generator = epoch_generator(0, 0, 0, stream=1)
    batches = []
    for seeds in (data.train_idx[:9], data.train_idx[:0]):
        sub = sampler.sample({target: seeds + start}, generator)
        rows = sampler.fetch(sub.node)
        edges = {}
        for et in sub.row:
            s, _, d = et
            src, dst = original[s][sub.node[s][sub.row[et]]], original[d][sub.node[d][sub.col[et]]]
            attr = (sub.edge_attr or {}).get(et)
            edges[et] = {"src": src, "dst": dst, "attr": attr, "hops": sub.num_sampled_edges[et]}
        nodes = {t: original[t][ids] for t, ids in sub.node.items()}
        batches.append({"seeds": original[target][seeds + start], "edges": edges, "nodes": nodes, "rows": rows})
    return batches


def typed_part_layers_and_dump(ctx: DistContext, root: str, parts: int, backends: tuple, out: str) -> None:
    """Rank ``r`` plays machine ``r`` (of one rank) of a heterogeneous graph partitioned into
    ``parts``: for each of ``backends``, the typed layer-wise logits of its own labelled nodes
    for a model drawn from seed 0, saved with their ids in the dataset to ``out/rank<r>-<backend>.pt``."""
    from gnnbridge.core.config import ModelSpec, Task
    from gnnbridge.core.inference.partitioned import PartitionedTypedLayerwise
    from gnnbridge.core.models.build import build_model, model_dims
    from gnnbridge.core.models.init import initialise
    from gnnbridge.core.plugins import get_backend
    from gnnbridge.core.storage.parts import open_partition
    from gnnbridge.core.tasks.node import for_node_task

    ctx.node_rank, ctx.num_nodes, ctx.local_rank, ctx.local_world_size = ctx.rank, ctx.world_size, 0, 1
    data = for_node_task(open_partition(root, parts, ctx.rank), True, 0)
    for backend in backends:
        model, _ = build_model(ModelSpec(hidden=16), backend, Task.NODE, *model_dims(data), data)
        initialise(model, 0)
        logits = PartitionedTypedLayerwise(get_backend(backend).require(), data, ctx, 7, None).predict(model.eval())
        saved = {"logits": logits, "ids": data.partition.node_ids.clone()}
        torch.save(saved, Path(out) / f"rank{ctx.rank}-{backend}.pt")


def sample_link_parts_and_dump(ctx: DistContext, root: str, parts: int, settings: dict, out: str) -> None:
    """Rank ``r`` plays machine ``r`` of a link task cut into ``parts``: it samples one hop of a
    batch of its train edges' ends with the batch's own edges, twins and mirrors left out (some
    owned by other machines), every neighbour (fanout -1) and then at most 2, and saves per
    relation the sampled global edge ids with their destinations, the seeds and what was left
    out, to ``out/rank<r>.pt``."""
    import torch.distributed as dist

    from gnnbridge.core.sampling.distributed import Exchange, PartitionHeteroSampler
    from gnnbridge.core.storage.linkparts import open_link_part
    from gnnbridge.core.storage.parts import open_partition

    data = open_link_part(open_partition(root, parts, ctx.rank), settings)
    exchange = Exchange(dist.group.WORLD, parts, ctx.rank)
    eids = torch.arange(min(40, data.split("train").numel()))
    src, dst = data.train_pairs(eids)
    s, _, d = data.target_edge
    seeds = {s: torch.unique(torch.cat([src, dst]))} if s == d else {s: torch.unique(src), d: torch.unique(dst)}
    excluded = data.excluded(eids)
    saved = {"seeds": seeds, "excluded": excluded}
    for fanout in (-1, 2):
        sampler = PartitionHeteroSampler(data, {et: [fanout] for et in data.edge_types}, exchange)
        sub = sampler.sample(seeds, torch.Generator().manual_seed(ctx.rank), excluded)
        saved[fanout] = {et: (sub.edge[et], sub.node[et[2]][sub.col[et]]) for et in sub.edge}
    torch.save(saved, Path(out) / f"rank{ctx.rank}.pt")
