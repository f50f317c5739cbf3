"""Launching as users do (``--nproc``, torchrun on two "nodes" of 127.0.0.1, srun's environment),
and failing as real jobs fail: a rank killed by SIGKILL, a rank that raises, a rank that hangs,
a rank that never starts. What is asserted is what a user sees: exit codes, the one error line,
that it ended (within a deadline generous enough for a busy machine), the processes and files
left behind."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import helpers
import pytest
import torch
from helpers import ENV, hooked_env, start, suite_env

from gnnbridge.core.errors import RankFailedError
from gnnbridge.core.runtime.sharing import shm_dir
from gnnbridge.testing.conformance import small_graph
from gnnbridge.testing.ports import free_port
from gnnbridge.testing.workers import fail_on_one_rank, launch_ranks, load_shared_and_dump

pytestmark = pytest.mark.slow
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
TRAIN = ["train", "--quiet", "--set", "train.epochs=2", "--set", "train.batch_size=256"]
# ENV: one thread per rank in every layout (the reduction order inside a matmul depends on the
# thread count, and this test compares final metrics for equality, not closeness).


class Job:
    """A command started in the background whose stderr is read as it comes: ``gnnbridge``'s
    as :func:`helpers.start` starts it (warm where it can), torchrun's fresh as a user's is."""

    def __init__(self, args, cwd, env=ENV, new_session=False):
        if args[:3] == gnnbridge():
            self.proc = start(*args[3:], cwd=cwd, env=env, new_session=new_session)
        else:
            self.proc = subprocess.Popen(
                args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        self.lines: list[str] = []
        self.out: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(pipe, sink), daemon=True)
            for pipe, sink in ((self.proc.stderr, self.lines), (self.proc.stdout, self.out))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(pipe, sink):
        for line in pipe:
            sink.append(line.rstrip("\n"))

    def wait_for(self, pattern, timeout=240):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(re.search(pattern, line) for line in self.lines):
                return
            assert self.proc.poll() is None, "\n".join(self.lines)
            time.sleep(0.1)
        raise AssertionError(f"no line matched {pattern!r}:\n" + "\n".join(self.lines))

    def finish(self, timeout=300):
        """The exit code; a job still running after ``timeout`` s is killed (with its ranks) and
        the test fails showing what it printed."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in [*descendants(self.proc.pid), self.proc.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait()
            raise AssertionError(f"still running after {timeout} s; it printed:\n" + "\n".join(self.lines)) from None
        for reader in self._readers:
            reader.join(5)
        return self.proc.returncode

    @property
    def stdout(self):
        return "\n".join(self.out)

    @property
    def errors(self):
        return [line for line in self.lines if line.startswith("Error: ")]


def gnnbridge(*args):
    return [sys.executable, "-m", "gnnbridge", *args]


def torchrun(nnodes, node_rank, nproc, port, *args):
    return [
        *TORCHRUN,
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(node_rank),
        "--nproc-per-node",
        str(nproc),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "-m",
        "gnnbridge",
        *args,
    ]


def descendants(pid):
    """All processes below ``pid``, found by their parent ids in /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = sorted(parents.get(todo.pop(), []))
        out.extend(kids)
        todo.extend(kids)
    return out


def alive(pids, grace=60.0):
    """The pids still running (zombies count as gone) after up to ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        running = [p for p in pids if Path(f"/proc/{p}").exists() and " Z " not in Path(f"/proc/{p}/stat").read_text()]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.2)


def parent_of(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def ranks_of(pid):
    """The training processes under a launcher: not multiprocessing's resource tracker, nor the
    fork server the launcher starts (a child of it that is Python's forkserver, or a fork of the
    launcher itself; its children, the ranks, carry its command line)."""
    launcher = Path(f"/proc/{pid}/cmdline").read_text()

    def helper(p):
        line = Path(f"/proc/{p}/cmdline").read_text()
        parent = parent_of(p)
        return "resource_tracker" in line or (parent == pid and ("forkserver" in line or line == launcher))

    return [p for p in descendants(pid) if not helper(p)]


def rank_pid(pids, rank):
    """Which of the launcher's processes is global rank ``rank`` (torchrun passes RANK by environment)."""
    return next(p for p in pids if f"\0RANK={rank}\0" in "\0" + Path(f"/proc/{p}/environ").read_text())


def results(folder):
    data = json.loads((Path(folder) / "results.json").read_text())
    return data["metrics"], [h["loss"] for h in data["history"]], [r["shard_sha1"] for r in data["ranks"]], data


# --------------------------------------------------------------------------- same numbers everywhere


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """``TRAIN --nproc 2`` on a backend, run once for the module: the run that each torchrun
    layout (and a torchrun resume of it) must reproduce exactly. Read only: a test that continues
    it continues a copy."""
    runs = {}

    def run(backend):
        if backend not in runs:
            cwd = tmp_path_factory.mktemp(f"spawned-{backend}")
            job = Job(gnnbridge(*TRAIN, "--backend", backend, "--nproc", "2", "--out", "run"), cwd)
            assert job.finish() == 0, job.lines
            runs[backend] = cwd / "run"
        return runs[backend]

    return run


def test_two_torchrun_nodes_match_one_node_with_two_ranks(tmp_path, spawned):
    """On PyG here; on DGL in the test of two jobs at once, whose second torchrun job is this one."""
    port = free_port()
    nodes = [Job(torchrun(2, r, 1, port, *TRAIN, "--backend", "pyg", "--out", "multi"), tmp_path) for r in (1, 0)]
    assert [n.finish() for n in nodes] == [0, 0], [n.lines for n in nodes]
    assert_two_nodes_reproduce(tmp_path / "multi", spawned("pyg"), nodes)


def assert_two_nodes_reproduce(folder, spawned_run, nodes):
    """A job of two torchrun nodes of one rank each (``nodes``: node 1's, then node 0's) is the
    spawned run of two ranks on one node, exactly, and only node 0 reports."""
    one, two = results(spawned_run), results(folder)
    assert two[3]["num_nodes"] == 2 and one[3]["num_nodes"] == 1
    assert [r["node"] for r in two[3]["ranks"]] == [0, 1]
    assert two[2] == one[2]  # the same per-rank seed shards
    assert two[1] == one[1]  # the same loss, epoch by epoch
    assert two[0] == one[0]  # the same final metrics, exactly
    assert "test_acc" in nodes[1].stdout and nodes[0].stdout == ""  # rank 0 reports, rank 1 is silent


def test_a_node_loads_the_dataset_once_and_its_ranks_map_the_same_pages(tmp_path):
    launch_ranks(load_shared_and_dump, 2, (str(tmp_path),), timeout_s=120)
    assert sorted(p.name for p in tmp_path.glob("loaded-by-*")) == ["loaded-by-rank0"]  # one load per node
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    expected = small_graph()
    for rank in got:
        assert torch.equal(rank["x"], expected.x) and torch.equal(rank["edge_index"], expected.edge_index)
        assert rank["summary"] == expected.summary()
    files = {rank["x_file"] for rank in got}
    assert len(files) == 1 and files.pop().startswith(f"{shm_dir()}/gnnbridge-")  # one mapped file for both
    assert not Path(got[0]["x_file"]).exists()  # and its name is gone


def test_a_torchrun_job_resumes_a_spawned_run_like_the_spawned_launcher_does(tmp_path, spawned):
    """Resuming inside a job: every rank reads the checkpoint, rank 0 continues the folder."""
    shutil.copytree(spawned("pyg"), tmp_path / "spawned")
    shutil.copytree(spawned("pyg"), tmp_path / "job")
    again = Job(gnnbridge("train", "--resume", "spawned", "--set", "train.epochs=3", "--quiet"), tmp_path)
    assert again.finish() == 0, again.lines
    port = free_port()
    nodes = [
        Job(torchrun(2, r, 1, port, "train", "--resume", "job", "--set", "train.epochs=3", "--quiet"), tmp_path)
        for r in (1, 0)
    ]
    assert [n.finish() for n in nodes] == [0, 0], [n.lines for n in nodes]
    resumed, job = results(tmp_path / "spawned"), results(tmp_path / "job")
    assert job[3]["num_nodes"] == 2 and job[3]["resumed_from"] == {"epoch": 1, "world_size": 2}
    assert job[1] == resumed[1] and len(job[1]) == 3  # the same loss, epoch by epoch
    assert job[0] == resumed[0]  # the same final metrics, exactly


# --------------------------------------------------------------------------- failing fast


def wait_for_checkpoint(run, timeout=240):
    """Kill only once the first checkpoint is on disk, so what is kept afterwards is known."""
    deadline = time.monotonic() + timeout
    while not (run / "checkpoints" / "latest.pt").exists():
        assert time.monotonic() < deadline, f"no checkpoint was written in {timeout} s"
        time.sleep(0.05)


def assert_kept_for_resume(run):
    """A failed run that has a checkpoint keeps exactly what resuming needs: no results, no
    temporary files, no shared-memory files."""
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and p.name != ".gnnbridge.lock")
    assert files == ["checkpoints/best.pt", "checkpoints/latest.pt", "config.yaml"], files
    # Nor anything in shared memory (the suite's private folder, see tests/conftest.py).
    assert list(shm_dir().glob("gnnbridge-*")) == []


RESUME_HINT = r"\. The run's checkpoint is kept; continue it with: gnnbridge train --resume run"


def test_sigkill_of_a_spawned_rank_ends_the_job(tmp_path):
    job = Job(gnnbridge("train", "--nproc", "2", "--set", "train.epochs=500", "--out", "run"), tmp_path)
    wait_for_checkpoint(tmp_path / "run")
    ranks = ranks_of(job.proc.pid)
    assert len(ranks) == 2
    # The ranks' server is a fork of the command line's own process (its command line, its child),
    # not a fresh interpreter importing torch and the backend again.
    servers = {parent_of(rank) for rank in ranks}
    assert len(servers) == 1 and parent_of(server := servers.pop()) == job.proc.pid
    assert Path(f"/proc/{server}/cmdline").read_text() == Path(f"/proc/{job.proc.pid}/cmdline").read_text()
    os.kill(ranks[1], signal.SIGKILL)
    code = job.finish(timeout=240)  # not the collective timeout (30 min): the death is noticed
    assert code != 0
    assert len(job.errors) == 1, job.lines
    # Named by whoever notices first: the agent (the signal) or the survivor's watchdog (the death).
    died = (
        rf"(\(pid {ranks[1]}\) was killed by SIGKILL|\(pid {ranks[1]} on .*\) died without a Python error \(killed "
        r"by a signal or the out-of-memory killer\?\))"
    )
    assert re.fullmatch(rf"Error: rank [01] {died}{RESUME_HINT}", job.errors[0]), job.errors[0]
    assert not any("Traceback" in line for line in job.lines)
    assert alive(ranks) == []
    assert_kept_for_resume(tmp_path / "run")


@pytest.mark.parametrize("nodes, per_node, victim_rank", [(2, 1, 1), (1, 2, 0)])
def test_sigkill_of_a_torchrun_rank_ends_the_job_naming_it(nodes, per_node, victim_rank, tmp_path):
    """Two nodes of one rank (the survivor is on another "machine"), and one node of two ranks
    whose rank 0, the owner of the run folder, is killed (torchrun SIGTERMs the neighbour, which
    must still name the killed rank, not itself). The run folder, which has a checkpoint by then,
    is kept for resuming."""
    port = free_port()
    args = ["train", "--set", "train.epochs=500", "--timeout", "30", "--out", "run"]
    launchers = [Job(torchrun(nodes, r, per_node, port, *args), tmp_path) for r in reversed(range(nodes))]
    wait_for_checkpoint(tmp_path / "run")
    everyone = [p for job in launchers for p in ranks_of(job.proc.pid)]
    victim = rank_pid(everyone, victim_rank)
    os.kill(victim, signal.SIGKILL)
    assert all(job.finish(timeout=240) != 0 for job in launchers)
    errors = [line for job in launchers for line in job.errors]
    assert errors and all(re.match(rf"Error: rank {victim_rank} \(pid {victim} on .*\) died", e) for e in errors), [
        job.lines for job in launchers
    ]
    assert alive(everyone) == []
    assert_kept_for_resume(tmp_path / "run")


def test_a_rank_that_raises_stops_its_peers_blocked_in_a_collective():
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    started = time.monotonic()
    with pytest.raises(RankFailedError, match=r"^rank 1 failed: ValueError: boom on rank 1"):
        launch_ranks(fail_on_one_rank, 2, (1, "raise"), timeout_s=600)
    # A deadline, not a measurement: far above a busy machine's start-up, far below the timeout.
    assert time.monotonic() - started < 300, "the peer waited for the collective timeout instead of stopping"
    # The elastic agent's signal handlers are gone again: Ctrl-C in a notebook is a KeyboardInterrupt.
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_a_rank_that_hangs_ends_the_job_after_the_timeout():
    started = time.monotonic()
    with pytest.raises(
        RankFailedError,
        match=r"rank 0 waited longer than the timeout in a collective: rank\(s\) 1 "
        "stuck behind the others",
    ):
        # 20 s, not less: on a busy machine a rank may reach the first barrier seconds after the other.
        launch_ranks(fail_on_one_rank, 2, (1, "hang"), timeout_s=20)
    assert time.monotonic() - started < 300, "the job outlived its 20 s timeout by minutes"  # a deadline


def test_a_rank_that_never_joins_is_named(tmp_path):
    """srun's environment with 3 tasks, of which only 2 start: both stop, and say which is missing."""
    port = free_port()
    env = {
        "SLURM_NTASKS": "3",
        "SLURM_STEP_ID": "0",
        "SLURM_NODEID": "0",
        "SLURM_STEP_NODELIST": "localhost",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    # 20 s, not less: the two ranks that do start may reach the rendezvous seconds apart on a busy machine.
    ranks = [
        Job(
            gnnbridge("train", "--timeout", "20", "--out", "run"),
            tmp_path,
            env=suite_env(**env, SLURM_PROCID=str(r), SLURM_LOCALID=str(r)),
        )
        for r in (0, 1)
    ]
    assert [r.finish(timeout=240) for r in ranks] == [1, 1]
    lines = ranks[0].errors + ranks[1].errors
    expected = (
        "Error: Rendezvous timed out after 20 s: rank(s) 2 of 3 never joined (not started, crashed "
        "early, or started with another MASTER_ADDR / MASTER_PORT)."
    )
    assert lines == [expected]  # one line for the node
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_to_the_launcher_stops_every_rank_and_keeps_only_the_resumable_run(tmp_path, sig):
    """SIGTERM and SIGINT (Ctrl-C) end a --nproc 2 run as they end a --nproc 1 run
    (tests/cli/test_hardening.py): every rank stops, the run with a checkpoint is kept, one line says
    how to continue it, and the exit code is the shell's 128 + signal."""
    job = Job(gnnbridge("train", "--nproc", "2", "--set", "train.epochs=500", "--out", "run"), tmp_path)
    wait_for_checkpoint(tmp_path / "run")
    ranks = ranks_of(job.proc.pid)
    job.proc.send_signal(sig)
    assert job.finish(timeout=240) == 128 + sig
    name = "SIGTERM" if sig == signal.SIGTERM else "SIGINT (Ctrl-C)"
    assert (
        job.lines[-1] == f"Stopped by {name}: its checkpoint is kept in run; continue it with: gnnbridge train "
        "--resume run."
    ), job.lines
    assert not job.errors, job.lines
    assert alive(ranks) == []
    assert_kept_for_resume(tmp_path / "run")


# Every rank is held in its start-up, before it unpickles its work (which imports the user's
# modules), until the test says go; each first leaves a marker. So Ctrl-C comes while every rank
# is starting. Ranks are forks of the launcher's fork server (a fork of the launcher, or a fresh
# process), which has run this file: it holds each child it forks.
RANKS_WAIT_WHILE_STARTING = textwrap.dedent("""
    import os, time

    def held(*args, **kwargs):
        gate = os.environ["GATE"]
        open(os.path.join(gate, f"starting-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(gate, "go")) and time.monotonic() < deadline:
            time.sleep(0.01)
        return start(*args, **kwargs)

    import multiprocessing.spawn

    start, multiprocessing.spawn._main = multiprocessing.spawn._main, held
""")


def test_ctrl_c_while_the_ranks_start_prints_only_the_launchers_line(tmp_path):
    """Ctrl-C at a terminal reaches the launcher and every rank (one process group); the agent
    also passes it on to the ranks. The ranks are still importing: the user sees one line."""
    gate = tmp_path / "gate"
    gate.mkdir()
    proc = start(
        *("train", "--nproc", "2", "--quiet", "--set", "train.epochs=500", "--out", "run"),
        cwd=tmp_path,
        env=hooked_env(tmp_path, RANKS_WAIT_WHILE_STARTING, GATE=str(gate)),
        new_session=True,  # a terminal's foreground job: the launcher and its ranks are one group
    )
    try:
        deadline = time.monotonic() + 240
        while len(list(gate.glob("starting-*"))) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, list(gate.iterdir())
            time.sleep(0.05)
        ranks = ranks_of(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        (gate / "go").touch()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    line = "Stopped by SIGINT (Ctrl-C): it had no checkpoint yet, so its run folder was removed."
    assert (proc.returncode, err.strip().splitlines()) == (130, [line]), err
    assert alive(ranks) == [] and not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- two jobs on one host


def test_two_jobs_at_once_on_one_host_do_not_collide(tmp_path, spawned):
    """Two spawned jobs in the same folder (same second, default run folders), and two torchrun
    jobs of two ranks each, one on one node and one on two (their own ports, shared-memory files
    named per job), whose ranks share their node's dataset and reproduce a spawned run of two
    ranks exactly (the DGL case of :func:`test_two_torchrun_nodes_match_one_node_with_two_ranks`)."""
    reference = spawned("dgl")
    before = set(shm_dir().glob("gnnbridge-*"))
    short = [*TRAIN, "--set", "train.epochs=1"]  # what collides is the start, the ports and the files
    dgl = (*TRAIN, "--backend", "dgl", "--out")
    jobs = [Job(gnnbridge(*short, "--nproc", "2"), tmp_path) for _ in range(2)]
    jobs.append(Job(torchrun(1, 0, 2, free_port(), *dgl, "one-node"), tmp_path))
    port = free_port()
    nodes = [Job(torchrun(2, r, 1, port, *dgl, "two-nodes"), tmp_path) for r in (1, 0)]
    assert [j.finish() for j in [*jobs, *nodes]] == [0] * 5, [j.lines for j in [*jobs, *nodes]]
    spawned_runs = sorted((tmp_path / "runs").iterdir())
    assert len(spawned_runs) == 2
    for folder in [*spawned_runs, tmp_path / "one-node", tmp_path / "two-nodes"]:
        metrics, _, shards, data = results(folder)
        assert metrics["test_acc"] > 0.3 and len(set(shards)) == 2 and data["world_size"] == 2
    assert results(tmp_path / "one-node")[:3] == results(reference)[:3]
    assert_two_nodes_reproduce(tmp_path / "two-nodes", reference, nodes)
    assert set(shm_dir().glob("gnnbridge-*")) == before  # the jobs' shared files were unlinked


# The first job's ranks wait before their second epoch until the test has seen the second job
# end: the first job surely holds its port all that time, however slow the machine.
HOLD_BEFORE_EPOCH_2 = textwrap.dedent("""
    import os, time
    from gnnbridge.core.training.trainer import Trainer

    _train_epoch = Trainer.train_epoch

    def train_epoch(self, epoch):
        release = os.environ.get("RELEASE")
        deadline = time.monotonic() + 240
        while epoch == 1 and release and not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
        return _train_epoch(self, epoch)

    Trainer.train_epoch = train_epoch
""")


def test_a_job_that_finds_its_port_taken_fails_alone(tmp_path):
    """Two srun steps told to use one MASTER_PORT: the second cannot listen there, and its
    ranks must not join (or stop) the first job, whose store holds that port."""
    port = free_port()
    release = tmp_path / "release"

    def slurm(job, rank, *args):
        env = hooked_env(
            tmp_path,
            HOLD_BEFORE_EPOCH_2,
            RELEASE=str(release),
            SLURM_JOB_ID=str(job),
            SLURM_STEP_ID="0",
            SLURM_NTASKS="2",
            SLURM_NODEID="0",
            SLURM_PROCID=str(rank),
            SLURM_LOCALID=str(rank),
            SLURM_STEP_NODELIST="localhost",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        return Job(gnnbridge("train", "--set", "train.epochs=3", *args), tmp_path, env=env)

    first = [slurm(1, r, "--out", "first") for r in (0, 1)]
    first[0].wait_for(r"epoch +1/3")
    second = [slurm(2, r, "--timeout", "8", "--out", "second") for r in (0, 1)]
    assert [job.finish() for job in second] == [1, 1]
    release.touch()
    assert [job.finish() for job in first] == [0, 0], [job.lines for job in first]
    assert any(f"Rank 0 cannot listen on 127.0.0.1:{port}" in line for line in second[0].errors), second[0].lines
    assert results(tmp_path / "first")[0]["test_acc"] > 0.5
    assert not (tmp_path / "second").exists()


def test_nproc_inside_a_job_is_refused_in_one_line(tmp_path):
    env = suite_env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    proc = helpers.gnnbridge("train", "--nproc", "4", "--out", "run", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "Error: --nproc 4 inside a torchrun job of 2 ranks: the launcher already started "
        "the ranks; drop --nproc (the job's size decides)."
    )
    assert not (tmp_path / "run").exists()


STUCK_MODEL = '''
import os
import time

import torch.distributed as dist
from torch import nn


class Stuck(nn.Module):
    """Its forward never returns on the ranks named in STUCK_RANKS, from the moment STUCK_WHEN
    names: its third training step ("train"), its first call (the dry step, "dry"), or its first
    call in eval mode after training began (the validation pass, "validation")."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)
        self.calls = 0

    def forward(self, graph, x):
        when = os.environ["STUCK_WHEN"]
        self.calls += self.training
        hang = {
            "train": self.training and self.calls >= 3,
            "dry": True,
            "validation": not self.training and self.calls > 0,
        }[when]
        if hang and str(dist.get_rank()) in os.environ["STUCK_RANKS"].split(","):
            while True:  # Python compute that never reaches a collective
                time.sleep(0.5)
        return self.lin(x)
'''


@pytest.mark.parametrize(
    "stuck, when, named, phase",
    [
        ("0,1", "train", "[01]", r"its forward pass of epoch 1, step \d+"),
        ("1", "train", "1", r"its forward pass of epoch 1, step \d+"),
        (
            "0,1",
            "dry",
            "[01]",
            r"its dry step before epoch 1 \(one small batch\), in the forward pass of class 'stuck_model:Stuck'",
        ),
        ("0,1", "validation", "[01]", r"its evaluation of val, in the forward pass of class 'stuck_model:Stuck'"),
    ],
)
def test_a_forward_that_never_returns_ends_the_job_naming_the_rank_and_the_phase(stuck, when, named, phase, tmp_path):
    """Stuck on every rank, nothing waits in a collective, so no collective timeout can fire;
    stuck on one rank, the other's collective times out, but the line names the stuck one.
    Every phase that calls the model is watched: the dry step before training and the
    validation pass too (round 3's hang came back there: still running after 200 s)."""
    (tmp_path / "stuck_model.py").write_text(STUCK_MODEL)
    job = Job(
        gnnbridge(
            *TRAIN,
            "--dataset",
            "karate",
            "--nproc",
            "2",
            "--timeout",
            "15",
            "--set",
            "model.arch=stuck_model:Stuck",
            "--set",
            "train.batch_size=2",
            "--out",
            "run",
        ),
        tmp_path,
        env=suite_env(STUCK_RANKS=stuck, STUCK_WHEN=when),
    )
    try:
        code = job.finish(timeout=180)
    except subprocess.TimeoutExpired:
        for pid in reversed(ranks_of(job.proc.pid)):
            os.kill(pid, signal.SIGKILL)
        job.proc.kill()
        raise AssertionError(f"still running after 180 s with --timeout 15; it said: {job.lines}") from None
    assert code == 1, job.lines
    assert len(job.lines) == 1 and re.match(
        rf"Error: rank {named} has been in {phase} for \d+ s \(--timeout 15\)",
        job.lines[0],
    ), job.lines
    assert not (tmp_path / "run").exists()  # no checkpoint yet: nothing to resume
