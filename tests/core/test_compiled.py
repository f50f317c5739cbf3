"""core/compiled.py: numba's parallel kernels launched from two threads at once."""

import os
import subprocess
import sys
import textwrap

import pytest

# The training loop gathers rows and steps RowAdam while placement.prefetch's thread samples:
# each a parallel kernel on 2 threads. numba's workqueue layer aborts the process (SIGABRT,
# "Concurrent access has been detected") if two launches overlap; they must take turns.
SCRIPT = textwrap.dedent(
    """
    import threading

    import torch

    from gnnbridge.core.records.features import PARALLEL_MIN_BYTES, gather_rows
    from gnnbridge.core.sampling.neighbors import NeighborSampler
    from gnnbridge.core.sampling.seeds import epoch_generator
    from gnnbridge.core.training.sparse import RowAdam

    torch.set_num_threads(2)
    table = torch.randn(100_000, 64).to(torch.bfloat16)  # 16-bit rows: the compiled gather
    ids = torch.randint(0, 100_000, (PARALLEL_MIN_BYTES // (4 * 64) + 4096,))  # its parallel loop
    nodes, degree = 40_000, 20
    indptr = torch.arange(nodes + 1) * degree
    indices = torch.randint(0, nodes, (nodes * degree,))
    sampler = NeighborSampler(indptr, indices, [15, 10])  # 2048 seeds x 15: parallel picks
    weight = torch.nn.Parameter(torch.zeros(200_000, 64))
    adam = RowAdam([weight], lr=0.01)

    def sample():
        for epoch in range(40):
            sampler.sample(torch.arange(2048), epoch_generator(0, epoch))

    def train():
        for _ in range(40):
            gather_rows(table, ids)
            weight.grad = torch.sparse_coo_tensor(torch.arange(150_000)[None], torch.ones(150_000, 64), weight.shape)
            adam.step()

    threads = [threading.Thread(target=sample), threading.Thread(target=train)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("both threads finished")
    """
)


@pytest.mark.slow  # a fresh interpreter compiling and running kernels: ~20 s
def test_parallel_kernels_from_two_threads_take_turns_instead_of_aborting():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NUMBA_NUM_THREADS": "2"},
    )
    assert done.returncode == 0 and "both threads finished" in done.stdout, done.stderr[-2000:]
