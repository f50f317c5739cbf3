"""Which job this process belongs to, read from the environment of the launcher that started it.

Three ways to get ranks, picked automatically by :func:`detect_job`:

* **torchrun / torchelastic** sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``GROUP_RANK`` (the node) and ``MASTER_ADDR`` / ``MASTER_PORT``. Its agent on node 0 already
  hosts a TCPStore there (``TORCHELASTIC_USE_AGENT_STORE``); ranks must join it as clients.
* **SLURM** (``srun``) sets ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` / ``SLURM_NTASKS``,
  ``SLURM_LOCALID``, ``SLURM_NODEID`` and the node list. Nobody hosts a store: rank 0 does, on
  the first node of the list, on ``MASTER_PORT`` or a port derived from the job and step ids so
  that two jobs sharing a node do not meet.
* Neither: a plain process; ``--nproc N`` starts N local ranks through torch's elastic agent,
  which sets torchrun's variables, so those ranks take the torchrun path (see ``launcher``).

Only an ``srun`` *step* counts as a SLURM job. The batch script itself also carries
``SLURM_NTASKS`` (and ``SLURM_PROCID=0``), but it is one process: treating it as rank 0 of N
would wait for N-1 ranks that nobody started, so there it behaves like any machine.
"""

from __future__ import annotations

import itertools
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from gnnbridge.core.errors import ConfigError

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SLURM_PORT_BASE = 12000  # below Linux's ephemeral range (32768+), where outgoing sockets live
SLURM_PORT_SPAN = 20000


@dataclass(frozen=True)
class JobEnv:
    """This process's place in a job started by an external launcher.

    ``node`` names the machine for node-local groups: the launcher's node rank when it gives one
    (two torchrun "nodes" on one host are still two nodes), else the host name."""

    launcher: str  # "torchrun" or "slurm": for messages
    rank: int
    world_size: int
    local_rank: int | None
    node: str
    master_addr: str
    master_port: int
    agent_store: bool  # the launcher hosts the store, so rank 0 must not bind the port
    run_id: str = ""  # the launcher's id of this job: two jobs meeting on one port stay apart
    attempt: int = 0  # torchelastic's restart count: 0, then 1, 2 ... after each restart of the ranks
    max_restarts: int = 0  # how often the launcher may restart the ranks (torchrun --max-restarts)


def detect_job(env: Mapping[str, str] | None = None) -> JobEnv | None:
    """The job this process is a rank of, or ``None`` outside torchrun and ``srun``."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return _torchrun(env)
    if "SLURM_PROCID" in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env):
        world = _int(env, "SLURM_STEP_NUM_TASKS") if "SLURM_STEP_NUM_TASKS" in env else _int(env, "SLURM_NTASKS")
        if world > 1:
            return _slurm(env, world)
    return None


def _torchrun(env: Mapping[str, str]) -> JobEnv:
    missing = [v for v in TORCHRUN_VARS if not env.get(v)]
    if missing:
        raise ConfigError(
            f"RANK and WORLD_SIZE are set but {', '.join(missing)} is not; start the job with "
            "torchrun, or set all of RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT."
        )
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    _check_rank(rank, world, "RANK", "WORLD_SIZE")
    node = f"node{_int(env, 'GROUP_RANK')}" if "GROUP_RANK" in env else _hostname()
    local_rank = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else None
    attempt = _int(env, "TORCHELASTIC_RESTART_COUNT") if "TORCHELASTIC_RESTART_COUNT" in env else 0
    return JobEnv(
        "torchrun",
        rank,
        world,
        local_rank,
        node,
        env["MASTER_ADDR"],
        _port(env, "MASTER_PORT"),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        run_id=env.get("TORCHELASTIC_RUN_ID", "none"),
        attempt=attempt,
        max_restarts=_int(env, "TORCHELASTIC_MAX_RESTARTS") if "TORCHELASTIC_MAX_RESTARTS" in env else 0,
    )


def _slurm(env: Mapping[str, str], world: int) -> JobEnv:
    rank = _int(env, "SLURM_PROCID")
    _check_rank(rank, world, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if env.get("MASTER_ADDR"):
        addr = env["MASTER_ADDR"]
    elif nodelist:
        addr = first_host(nodelist)
    else:
        raise ConfigError(
            "SLURM gives no node list (SLURM_STEP_NODELIST / SLURM_JOB_NODELIST); "
            "set MASTER_ADDR to the host of rank 0."
        )
    port = _port(env, "MASTER_PORT") if env.get("MASTER_PORT") else slurm_port(env)
    node = f"node{_int(env, 'SLURM_NODEID')}" if "SLURM_NODEID" in env else _hostname()
    local_rank = _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else None
    job, step = (
        env.get("SLURM_JOB_ID", env.get("SLURM_JOBID", "")),
        env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", "")),
    )
    run_id = f"{job}.{step}"
    return JobEnv("slurm", rank, world, local_rank, node, addr, port, agent_store=False, run_id=run_id)


def slurm_port(env: Mapping[str, str]) -> int:
    """A port every rank of one job step derives alike, and that differs between jobs and steps."""
    job = int(re.sub(r"\D", "", env.get("SLURM_JOB_ID", env.get("SLURM_JOBID", "0"))) or 0)
    step = int(re.sub(r"\D", "", env.get("SLURM_STEP_ID", env.get("SLURM_STEPID", "0"))) or 0)
    return SLURM_PORT_BASE + (job * 31 + step) % SLURM_PORT_SPAN


MAX_HOSTS = 100_000  # more nodes than any cluster has: a list that expands further is not a node list


def first_host(text: str) -> str:
    """The first host of SLURM's compressed node list (rank 0's node), read without expanding
    the list: ``n[0-99999999]`` names a hundred million hosts, and only the first is needed."""
    return next(iter_hostlist(text))


def expand_hostlist(text: str) -> list[str]:
    """Expand SLURM's compressed node list: ``gpu[01-03,7],cpu5`` -> gpu01 gpu02 gpu03 gpu7 cpu5.

    Zero padding is kept; several bracket groups in one name multiply out (``r[1-2]n[1-2]``).
    A list of more than :data:`MAX_HOSTS` hosts is refused, not expanded."""
    hosts = list(itertools.islice(iter_hostlist(text), MAX_HOSTS + 1))
    if len(hosts) > MAX_HOSTS:
        raise ConfigError(
            f"The SLURM node list {text[:80]!r} names more than {MAX_HOSTS:,} hosts; set MASTER_ADDR "
            "to the host of rank 0."
        )
    return hosts


def iter_hostlist(text: str):
    """Hosts of a compressed node list one at a time (lazily: memory and time stay bounded)."""
    found = False
    for name in _split_top_level(text):
        parts = re.split(r"(\[[^\]]*\])", name)
        if len(parts) > 64:  # real names have one or two bracket groups
            raise ConfigError(f"Cannot read the SLURM node list {text[:80]!r}; set MASTER_ADDR to the host of rank 0.")
        choices = [_RangeList(p[1:-1], text) if p.startswith("[") else [p] for p in parts]
        for combo in _lazy_product(choices):
            found = True
            yield "".join(combo)
    if not found:
        raise ConfigError(f"Cannot read the SLURM node list {text[:80]!r}; set MASTER_ADDR to the host of rank 0.")


def _lazy_product(choices: list):
    """``itertools.product`` without materialising its inputs (it would list every range)."""
    if not choices:
        yield ()
        return
    head, rest = choices[0], choices[1:]
    for item in head:
        for tail in _lazy_product(rest):
            yield (item, *tail)


def _split_top_level(text: str) -> list[str]:
    names, depth, current = [], 0, ""
    for ch in text.strip():
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            names.append(current)
            current = ""
        else:
            current += ch
    return [n for n in [*names, current] if n]


class _RangeList:
    """The names of one bracket group (``01-03,7``), checked at once and produced on demand."""

    def __init__(self, spec: str, text: str):
        self.items = []
        for item in spec.split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()) or len(lo) > 18 or len(hi) > 18:
                raise ConfigError(
                    f"Cannot read the SLURM node list {text[:80]!r}; set MASTER_ADDR to the host of rank 0."
                )
            self.items.append((int(lo), int(hi or lo), len(lo)))

    def __iter__(self):
        for lo, hi, width in self.items:
            for i in range(lo, hi + 1):
                yield str(i).zfill(width)


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(f"Environment variable {name}={env[name]!r} is not an integer.") from None


def _port(env: Mapping[str, str], name: str) -> int:
    port = _int(env, name)
    if not 0 < port < 65536:
        raise ConfigError(f"Environment variable {name}={port} is not a port (1-65535).")
    return port


def _check_rank(rank: int, world: int, rank_var: str, world_var: str) -> None:
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"{rank_var}={rank} with {world_var}={world}: a rank must be in [0, {world_var}).")


def _hostname() -> str:
    return socket.gethostname()
