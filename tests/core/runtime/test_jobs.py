"""Which job a process is in, read from the launcher's environment; and node-shared records."""

import pytest
import torch

from gnnbridge.core.errors import ConfigError
from gnnbridge.core.runtime.jobs import detect_job, expand_hostlist
from gnnbridge.core.runtime.sharing import attach, export
from gnnbridge.plugins.datasets import family_graphs
from gnnbridge.testing.conformance import small_graph

TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}
SRUN = {
    "SLURM_PROCID": "6",
    "SLURM_NTASKS": "8",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_LOCALID": "2",
    "SLURM_NODEID": "1",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
}


def test_plain_process_is_not_a_job():
    assert detect_job({}) is None
    assert detect_job({"MASTER_PORT": "29500"}) is None  # a stray export does not make a job


def test_torchrun_environment():
    job = detect_job(TORCHRUN)
    assert (job.launcher, job.rank, job.world_size, job.local_rank) == ("torchrun", 5, 8, 1)
    assert (job.node, job.master_addr, job.master_port) == ("node1", "10.0.0.1", 29500)
    assert job.agent_store  # torchrun's agent hosts the store: rank 0 must not bind the port


def test_torchrun_environment_missing_the_master_names_it():
    env = {k: v for k, v in TORCHRUN.items() if k != "MASTER_PORT"}
    with pytest.raises(ConfigError, match="MASTER_PORT"):
        detect_job(env)
    with pytest.raises(ConfigError, match=r"RANK=9 with WORLD_SIZE=8"):
        detect_job({**TORCHRUN, "RANK": "9"})
    with pytest.raises(ConfigError, match=r"LOCAL_RANK='one' is not an integer"):
        detect_job({**TORCHRUN, "LOCAL_RANK": "one"})


def test_srun_step_environment():
    job = detect_job(SRUN)
    assert (job.launcher, job.rank, job.world_size, job.local_rank, job.node) == ("slurm", 6, 8, 2, "node1")
    assert job.master_addr == "gpu07"  # rank 0 lives on the first node of the step
    assert not job.agent_store
    assert detect_job({**SRUN, "MASTER_ADDR": "head", "MASTER_PORT": "1234"}).master_addr == "head"
    assert detect_job({**SRUN, "MASTER_PORT": "1234"}).master_port == 1234


def test_slurm_ports_differ_between_jobs_and_steps_and_avoid_ephemeral_ports():
    ports = {
        detect_job({**SRUN, "SLURM_JOB_ID": str(job), "SLURM_STEP_ID": str(step)}).master_port
        for job in (4242, 4243)
        for step in (0, 1)
    }
    assert len(ports) == 4
    assert all(1024 < p < 32768 for p in ports)


def test_slurm_batch_script_and_single_task_steps_are_plain_machines():
    batch = {k: v for k, v in SRUN.items() if k not in ("SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS")}
    assert detect_job(batch) is None  # the sbatch script itself: one process, may spawn with --nproc
    assert detect_job({**SRUN, "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}) is None


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("node1", ["node1"]),
        ("gpu[07-09,12]", ["gpu07", "gpu08", "gpu09", "gpu12"]),
        ("a[1-2],b3,c[9-10]", ["a1", "a2", "b3", "c9", "c10"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ],
)
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


def test_unreadable_hostlist_says_to_set_master_addr():
    with pytest.raises(ConfigError, match="MASTER_ADDR"):
        expand_hostlist("gpu[a-b]")


@pytest.mark.parametrize("record", ["node", "graph"])
def test_shared_record_round_trips_through_files_that_can_then_go(record, tmp_path):
    data = small_graph() if record == "node" else family_graphs(30, 5, 9, seed=0)
    paths: list = []
    manifest = export(data, tmp_path, "gnnbridge-test", paths)
    copy = attach(manifest)
    assert len(paths) == len(manifest["tensors"])
    for path in paths:
        path.unlink()  # what node_shared does once every rank has mapped them
    assert type(copy) is type(data)
    assert copy.summary() == data.summary()
    for name in ("x", "edge_index", "y", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(copy, name), getattr(data, name))
    assert not list(tmp_path.iterdir())


def test_torchrun_restart_count_and_limit_are_read():
    job = detect_job(
        {**TORCHRUN, "TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3"}
    )
    assert (job.run_id, job.attempt, job.max_restarts) == ("abc", 2, 3)
    assert (detect_job(TORCHRUN).attempt, detect_job(TORCHRUN).max_restarts) == (0, 0)
