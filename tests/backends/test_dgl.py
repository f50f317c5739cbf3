"""DGL-specific promises: the import repair, and fanouts counted from the seeds."""
import subprocess
import sys

from gnnbridge.backends.dgl.backend import DglBackend
from gnnbridge.core.contracts.config import SamplerKind
from gnnbridge.plugins.datasets import synthetic_graph


def test_dgl_imports_on_this_torch_and_reports_why_graphbolt_is_off():
    code = "from gnnbridge.backends.dgl.backend import DglBackend as B; b=B(); print(b.availability()); print(b.versions())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "None"
    assert "'dgl': '2.1.0'" in proc.stdout


def test_native_sampler_takes_fanouts_from_the_seeds_outwards():
    data = synthetic_graph(2000, 4, 8, avg_degree=40.0, homophily=0.5, signal=1.0, seed=0)
    backend = DglBackend()
    sampler = backend.sampler(backend.graph_store(data), [2, 8], SamplerKind.NATIVE)
    sampler.reseed(0, 0, 0)
    seeds = data.train_idx[:64]
    (mb,) = sampler.loader([seeds])
    first, last = mb.graph
    # The last block computes the seeds: at most 2 sampled neighbours each.
    assert last.num_dst_nodes() == 64
    assert int(last.in_degrees().max()) == 2
    # The first block feeds every node within one hop: up to 8 neighbours each.
    assert int(first.in_degrees().max()) == 8
