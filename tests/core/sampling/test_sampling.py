import itertools
import os
import signal

import pytest
import torch

from gnnbridge.core.errors import ConfigError
from gnnbridge.core.sampling import kernels
from gnnbridge.core.sampling.neighbors import ALL_NEIGHBORS, NeighborSampler
from gnnbridge.core.sampling.seeds import FEW_STEPS, epoch_batches, epoch_generator, few_steps


def edge_set(data):
    return set(zip(data.edge_index[0].tolist(), data.edge_index[1].tolist()))


@pytest.fixture(params=["compiled", "torch-dense-map", "torch-sort-relabel"])
def relabel(request, monkeypatch):
    """Each way a batch can be sampled: numba on CPU; the torch code (what CUDA tensors run)."""
    if request.param != "compiled":
        monkeypatch.setenv("GNNBRIDGE_SAMPLER_KERNEL", "torch")
    if request.param == "torch-sort-relabel":  # the path graphs over DENSE_MAP_MAX_NODES take
        monkeypatch.setattr(NeighborSampler, "DENSE_MAP_MAX_NODES", 0)
    return request.param


def sample_both_ways(monkeypatch, indptr, indices, fanouts, seeds, key=0):
    compiled = NeighborSampler(indptr, indices, fanouts).sample(seeds, epoch_generator(key, 0))
    monkeypatch.setenv("GNNBRIDGE_SAMPLER_KERNEL", "torch")
    vectorised = NeighborSampler(indptr, indices, fanouts).sample(seeds, epoch_generator(key, 0))
    monkeypatch.delenv("GNNBRIDGE_SAMPLER_KERNEL")
    return compiled, vectorised


def assert_same_sample(a, b):
    for name in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == b.num_sampled_edges


def test_sampled_edges_exist_and_respect_fanouts(small_data, relabel):
    sampler = NeighborSampler(small_data.indptr, small_data.indices, [3, 2])
    out = sampler.sample(small_data.train_idx[:40], epoch_generator(0, 0))
    src, dst = out.node[out.row], out.node[out.col]
    assert set(zip(src.tolist(), dst.tolist())) <= edge_set(small_data)
    assert torch.equal(small_data.edge_index[:, out.edge], torch.stack([src, dst]))
    assert torch.equal(out.node[:40], small_data.train_idx[:40])
    degree = small_data.indptr.diff()
    hop1 = out.col[: out.num_sampled_edges[0]]
    # fanouts[0] applies to the seeds: exactly min(degree, 3) neighbours each.
    assert torch.equal(torch.bincount(hop1, minlength=40), degree[out.node[:40]].clamp(max=3))
    hop2 = out.col[out.num_sampled_edges[0] :]
    first_hop = torch.arange(40, 40 + out.num_sampled_nodes[1])
    assert hop2.min() >= 40 and hop2.max() < 40 + out.num_sampled_nodes[1]
    assert torch.equal(torch.bincount(hop2 - 40, minlength=first_hop.numel()), degree[out.node[first_hop]].clamp(max=2))
    assert out.edge.unique().numel() == out.edge.numel()  # without replacement
    assert out.node.unique().numel() == out.node.numel()


def test_all_neighbours_takes_the_whole_in_neighbourhood(small_data):
    sampler = NeighborSampler(small_data.indptr, small_data.indices, [ALL_NEIGHBORS])
    seeds = torch.tensor([5, 17])
    out = sampler.sample(seeds)
    for local, v in enumerate(seeds.tolist()):
        want = small_data.indices[small_data.indptr[v] : small_data.indptr[v + 1]].sort().values
        got = out.node[out.row[out.col == local]].sort().values
        assert torch.equal(got, want)


def test_both_relabel_paths_give_the_same_sample(small_data, monkeypatch):
    seeds = small_data.train_idx[:30]
    dense = NeighborSampler(small_data.indptr, small_data.indices, [4, 3]).sample(seeds, epoch_generator(0, 0))
    monkeypatch.setattr(NeighborSampler, "DENSE_MAP_MAX_NODES", 0)
    sort = NeighborSampler(small_data.indptr, small_data.indices, [4, 3]).sample(seeds, epoch_generator(0, 0))
    for name in ("node", "row", "col", "edge"):
        assert torch.equal(getattr(dense, name), getattr(sort, name))


def test_reused_sampler_does_not_leak_state_between_batches(small_data):
    sampler = NeighborSampler(small_data.indptr, small_data.indices, [4, 3])
    seeds = small_data.train_idx[:30]
    first = sampler.sample(seeds, epoch_generator(0, 0))
    sampler.sample(small_data.train_idx[30:90], epoch_generator(0, 1))
    again = NeighborSampler(small_data.indptr, small_data.indices, [4, 3]).sample(seeds, epoch_generator(0, 0))
    assert torch.equal(first.node, again.node) and torch.equal(first.row, again.row)


def test_sampling_is_deterministic_per_generator_seed(small_data):
    sampler = NeighborSampler(small_data.indptr, small_data.indices, [4, 4])
    seeds = small_data.train_idx[:30]
    a = sampler.sample(seeds, epoch_generator(1, 2, 0))
    b = sampler.sample(seeds, epoch_generator(1, 2, 0))
    c = sampler.sample(seeds, epoch_generator(1, 3, 0))
    assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge)
    assert not torch.equal(a.edge, c.edge)


@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
def test_batches_a_caller_keeps_are_never_overwritten_by_later_ones(small_data):
    # The sampler writes into reused arrays; a kept batch (a prefetch queue, a list) must stay as drawn.
    sampler = NeighborSampler(small_data.indptr, small_data.indices, [6, 4])
    kept = [sampler.sample(small_data.train_idx[i * 40 : (i + 1) * 40], epoch_generator(0, i)) for i in range(4)]
    for i, batch in enumerate(kept):
        fresh = NeighborSampler(small_data.indptr, small_data.indices, [6, 4])
        assert_same_sample(batch, fresh.sample(small_data.train_idx[i * 40 : (i + 1) * 40], epoch_generator(0, i)))


@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
def test_a_dropped_batchs_arrays_carry_the_next_batch(small_data):
    # What saves the page faults: once nothing holds a batch, the next is written where it was.
    sampler = NeighborSampler(small_data.indptr, small_data.indices, [6, 4])
    seeds = small_data.train_idx[:40]
    where = sampler.sample(seeds, epoch_generator(0, 0)).row.data_ptr()  # the batch is dropped at once
    assert sampler.sample(seeds, epoch_generator(0, 1)).row.data_ptr() == where
    held = sampler.sample(seeds, epoch_generator(0, 2))
    assert sampler.sample(seeds, epoch_generator(0, 3)).row.data_ptr() != held.row.data_ptr()


@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
@pytest.mark.parametrize("fanouts", [[4, 3], [ALL_NEIGHBORS, 2], [1, 1, 1], [50]])
def test_compiled_and_torch_paths_draw_the_same_sample(small_data, monkeypatch, fanouts):
    # The torch path is what CUDA tensors run: a run gives the same batches on CPU and GPU.
    seeds = small_data.train_idx[:64]
    assert_same_sample(*sample_both_ways(monkeypatch, small_data.indptr, small_data.indices, fanouts, seeds))


@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
def test_compiled_sample_does_not_depend_on_the_thread_count(monkeypatch):
    # Enough nodes that each hop is many chunks of the parallel loop, shared between threads.
    monkeypatch.setattr(kernels, "PARALLEL_MIN_PICKS", 1)
    n, degree = 20000, 12
    indptr = torch.arange(0, degree * n + 1, degree)
    indices = torch.randint(0, n, (degree * n,), generator=torch.Generator().manual_seed(0))
    seeds = torch.arange(0, n, 10)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = NeighborSampler(indptr, indices, [5, 5]).sample(seeds, epoch_generator(3, 1))
        torch.set_num_threads(2)
        two = NeighborSampler(indptr, indices, [5, 5]).sample(seeds, epoch_generator(3, 1))
    finally:
        torch.set_num_threads(before)
    assert one.num_sampled_nodes[1] > 4 * kernels.PICK_CHUNK  # hop 2's frontier spans many chunks
    assert_same_sample(one, two)


def star_graph(nodes: int, degree: int):
    """``nodes`` destinations 0..nodes-1, each with the same ``degree`` in-neighbours."""
    indptr = torch.arange(nodes + 1) * degree
    indices = nodes + torch.arange(degree).repeat(nodes)
    pad = torch.full((degree,), nodes * degree)
    return torch.cat([indptr, pad]), indices


@pytest.mark.parametrize("path", ["compiled", "torch"])
def test_every_subset_of_neighbours_is_equally_likely(monkeypatch, path):
    # Unbiased without replacement: 3 of 6 neighbours, all 20 subsets equally often (chi-square),
    # and never one neighbour twice in a seed's picks.
    if path == "torch":
        monkeypatch.setenv("GNNBRIDGE_SAMPLER_KERNEL", "torch")
    nodes, degree, k = 6000, 6, 3
    indptr, indices = star_graph(nodes, degree)
    out = NeighborSampler(indptr, indices, [k]).sample(torch.arange(nodes), epoch_generator(0, 0))
    picks = (out.node[out.row] - nodes).view(nodes, k).sort(dim=1).values
    assert (picks.diff(dim=1) > 0).all()  # no duplicates within a seed's picks
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(degree), k))}
    counts = torch.bincount(torch.tensor([subsets[tuple(row)] for row in picks.tolist()]), minlength=len(subsets))
    expected = nodes / len(subsets)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 43.8  # the 0.999 quantile of chi-square with 19 degrees of freedom


def test_neighbour_choice_is_uniform():
    # One node with 10 in-neighbours; draw 3 of them many times: each appears ~30% of draws.
    indptr = torch.tensor([0, 10] + [10] * 10)
    indices = torch.arange(1, 11)
    sampler = NeighborSampler(indptr, indices, [3])
    gen = epoch_generator(0, 0)
    counts = torch.zeros(11)
    for _ in range(2000):
        out = sampler.sample(torch.tensor([0]), gen)
        counts[out.node[1:]] += 1
    freq = counts[1:] / 2000
    assert torch.allclose(freq, torch.full((10,), 0.3), atol=0.04)


def test_uneven_seed_counts_give_equal_batch_counts_and_disjoint_cover():
    seeds = torch.arange(4097)
    per_rank = [epoch_batches(seeds, 1024, seed=0, epoch=0, rank=r, world_size=2) for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1]) == 3
    assert max(b.numel() for batches in per_rank for b in batches) <= 1024
    everything = torch.cat([torch.cat(b) for b in per_rank])
    assert torch.equal(everything.sort().values, seeds)


def test_shards_reshuffle_every_epoch_but_are_reproducible():
    seeds = torch.arange(1000)
    e0 = torch.cat(epoch_batches(seeds, 100, 0, 0, 0, 2))
    e1 = torch.cat(epoch_batches(seeds, 100, 0, 1, 0, 2))
    assert not torch.equal(e0, e1)
    assert torch.equal(e0, torch.cat(epoch_batches(seeds, 100, 0, 0, 0, 2)))


def test_more_ranks_than_seeds_is_refused():
    with pytest.raises(ConfigError, match="cannot be shared by 4 ranks"):
        epoch_batches(torch.arange(3), 10, 0, 0, 0, 4)


def test_an_epoch_of_too_few_steps_is_named_with_the_batch_size_that_fixes_it():
    # The GIN tutorial's trap: 240 training graphs on 2 ranks, in the default batch of 256.
    line = few_steps(240, 256, 2, item="graph", norms=True)
    assert line == (
        "an epoch is 1 optimizer step per rank (120 graphs per rank, train.batch_size=256), so the weights and "
        "BatchNorm's running statistics are updated once an epoch and may not settle; use "
        "--set train.batch_size=40 or smaller for 3 or more steps an epoch."
    )
    assert len(epoch_batches(torch.arange(240), 40, 0, 0, 0, 2)) == FEW_STEPS  # the fix it names is enough
    assert "updated 2 times an epoch" in few_steps(240, 64, 2, item="graph")
    assert "BatchNorm" not in few_steps(240, 64, 2, item="graph")  # a model without it is not told of it
    assert few_steps(240, 40, 2) is None
    assert few_steps(240, 256, 2, max_batches=2) is None  # the user asked for so few steps
    assert few_steps(240, 256, 2, max_batches=50) is not None
    assert few_steps(4, 256, 2) is None  # 2 items per rank: no batch size gives 3 steps


@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
def test_hop_and_relabel_pieces_match_the_torch_path(small_data, monkeypatch):
    # The typed (heterogeneous) sampler calls these per relation: same picks and ids either way.
    sampler = NeighborSampler(small_data.indptr, small_data.indices, [4])
    frontier, known = small_data.train_idx[:50], torch.arange(7)

    def pieces():
        local = torch.full((small_data.num_nodes,), -1)
        nbr, eid, owner = sampler._sample_hop(frontier, 4, epoch_generator(5, 0))
        new, ids = NeighborSampler._relabel(known, nbr, local)
        return nbr, eid, owner, new, ids

    compiled = pieces()
    monkeypatch.setenv("GNNBRIDGE_SAMPLER_KERNEL", "torch")
    for a, b in zip(compiled, pieces()):
        assert torch.equal(a, b)
    assert compiled[4].min() >= known.numel()  # new ids continue after the known nodes


INTERRUPTED_KERNELS = """
import os, signal, sys, threading, torch
from gnnbridge.core.errors import RunInterrupted
from gnnbridge.core.records.csc import csc_from_coo
from gnnbridge.core.sampling import kernels

def stop(signum, frame):
    raise RunInterrupted(signum)

def sigterm_in(seconds):
    threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGTERM)).start()

signal.signal(signal.SIGTERM, stop)
n = 20000
indptr, indices = torch.arange(0, 10 * n + 1, 10), torch.randint(0, n, (10 * n,))
calls = [lambda: kernels.sample_layers(indptr, indices, torch.arange(64), [10, 10], [1, 2],
                                      torch.full((n,), -1, dtype=torch.int32)),
         lambda: csc_from_coo(indices[:2000], indices[-2000:], n)]
if sys.argv[1] == "compile":  # a fresh NUMBA_CACHE_DIR: the kernels compile (seconds) under SIGTERMs
    handled_in = []  # the file of the frame each call of the run's handler interrupted
    signal.signal(signal.SIGTERM, lambda signum, frame: handled_in.append(frame.f_code.co_filename))
    compiled = threading.Event()
    def every_5ms():
        while not compiled.wait(0.005):
            os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=every_5ms, daemon=True).start()
    kernels.warm()
    csc_from_coo(indices[:10], indices[-10:], n)
    compiled.set()
    inside = sorted({f for f in handled_in if "numba" in f or "llvmlite" in f})
    assert handled_in and not inside, inside  # it ran, and never inside numba's machinery
else:
    kernels.warm()
    csc_from_coo(indices[:10], indices[-10:], n)
    for round in range(12):
        try:  # the timer is started inside: on a busy machine it may fire before start() returns
            sigterm_in(0.01 + 0.007 * round)
            while True:
                calls[round % 2]()
        except RunInterrupted as stopped:
            assert stopped.signum == signal.SIGTERM
print("stopped cleanly")
"""


def stop_kernels(tmp_path, mode):
    import subprocess
    import sys

    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPTED_KERNELS)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")} if mode == "compile" else None
    proc = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "stopped cleanly", proc.stderr[-2000:]
    assert "Exception ignored" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
def test_a_signal_during_a_compiled_kernel_stops_the_run_instead_of_crashing_it(tmp_path):
    """The SIGTERM that should end a run in "Stopped by SIGTERM: ..." surfaced as a SystemError
    from numba's dispatcher nine times in ten, so the run reported a crash."""
    stop_kernels(tmp_path, "calls")


@pytest.mark.slow
@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
def test_a_signal_while_the_kernels_compile_is_delivered_once_they_are_built(tmp_path):
    """A stop that came while LLVM compiled (a first run on a machine) could be dropped (numba
    compiles through ctypes callbacks, which drop exceptions) and the next kernel call hung; the
    run's handler must never run inside numba."""
    stop_kernels(tmp_path, "compile")


def test_nested_deferral_holds_a_signal_until_the_outer_block_ends():
    # The typed sampler holds signals once per batch; its kernels' own blocks nest inside.
    import signal

    from gnnbridge.core.compiled import signals_deferred

    seen = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: seen.append(number))
    try:
        with signals_deferred():
            holder = signal.getsignal(signal.SIGINT)
            with signals_deferred():
                assert signal.getsignal(signal.SIGINT) is holder  # the inner block touches no handler
                signal.raise_signal(signal.SIGINT)
            assert seen == []  # the inner block's end delivers nothing
        assert seen == [signal.SIGINT]
        with signals_deferred():  # and the next block defers again
            signal.raise_signal(signal.SIGINT)
            assert seen == [signal.SIGINT]
        assert seen == [signal.SIGINT, signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)  # the disposition this process had (tests/conftest.py)


KERNEL_VARIANT = """
import sys
import numpy as np
from numba.np.ufunc import parallel as numba_parallel
from gnnbridge.core.sampling import kernels

indptr, indices = np.arange(0, 401, 4), np.arange(400) % 100
frontier = np.arange(100)
fault = kernels._no_fault(indices, 100)
offsets, starts, degrees = kernels._take(indptr, frontier, 2, fault)
out = [np.empty(200, np.int64) for _ in range(3)]
getattr(kernels, sys.argv[1])(indices, starts, degrees, 7, offsets, *out, 0, 0, fault)
print("threads started" if numba_parallel._is_initialized else "no threads")
"""


@pytest.mark.slow
@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
def test_the_serial_and_parallel_pick_loops_stay_themselves_through_the_on_disk_cache(tmp_path):
    """numba's cache keys code by function and types, not by ``parallel=``: when both loops were
    one function jitted twice, the first compiled stood in for both in every later process, so
    the serial loop paid the thread launch on every hop and the parallel one could run serially."""
    import subprocess
    import sys

    script = tmp_path / "variant.py"
    script.write_text(KERNEL_VARIANT)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def run(variant):
        proc = subprocess.run(
            [sys.executable, str(script), variant], capture_output=True, text=True, timeout=300, env=env
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.strip()

    assert run("_picks_serial") == "no threads"  # compiled, into the empty cache
    assert run("_picks_parallel") == "threads started"  # with the serial loop's code on disk
    assert run("_picks_serial") == "no threads"  # and now with both there


def test_a_stop_arriving_while_kernels_start_to_hold_signals_leaves_no_block_open(monkeypatch):
    """A SIGTERM whose handler ran while signals_deferred swapped handlers in left the block
    counted as open: every later kernel call then ran with stops undeferred (a SystemError from
    numba's dispatcher instead of "Stopped by SIGTERM", about one full suite in three)."""
    from gnnbridge.core import compiled
    from gnnbridge.core.errors import RunInterrupted

    def stop(signum, frame):
        raise RunInterrupted(signum)

    before = {signum: signal.getsignal(signum) for signum in compiled.STOP_SIGNALS}
    monkeypatch.setattr(signal, "getsignal", lambda signum: stop)
    real_signal, swaps = signal.signal, []

    def arrives_during_the_swap(signum, handler):
        swaps.append(signum)
        if len(swaps) == 2:  # the first handler is swapped in; the stop's own handler runs now
            raise RunInterrupted(signal.SIGTERM)
        return real_signal(signum, handler)

    monkeypatch.setattr(signal, "signal", arrives_during_the_swap)
    with pytest.raises(RunInterrupted):
        with compiled.signals_deferred():
            pass
    monkeypatch.undo()
    assert compiled._depth[0] == 0
    assert {signum: signal.getsignal(signum) for signum in compiled.STOP_SIGNALS} == before


@pytest.mark.parametrize("k", [1, 2, 5, 10, 25, 33])
def test_the_vectorised_floyd_picks_what_the_sequential_algorithm_picks(k):
    """The torch path resolves every draw of Floyd's algorithm at once (CUDA is launch-bound);
    it must keep, draw for draw, what the one-row-at-a-time algorithm keeps (the compiled kernel
    runs that), with the same uniforms, for degrees just above k (many duplicate draws) and far
    above it."""
    from gnnbridge.core.sampling.neighbors import _floyd_sample

    generator = torch.Generator().manual_seed(k)
    deg = torch.cat([torch.randint(k + 1, 2 * k + 2, (300,), generator=generator), torch.full((20,), 10 * k + 7)])
    rows = torch.arange(deg.numel()) * 3  # positions in a frontier: the counters
    for seed in range(5):
        rand = kernels.uniform(seed, rows.unsqueeze(1) * k + torch.arange(k))
        expected = []
        for i, d in enumerate(deg.tolist()):
            chosen = []
            for c in range(k):
                j = d - k + c
                t = min(int(rand[i, c].item() * (j + 1)), j)
                chosen.append(j if t in chosen else t)
            expected.append(chosen)
        assert _floyd_sample(deg, rows, k, seed).tolist() == expected
