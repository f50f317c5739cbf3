"""Knowing the setup: ``config show``, ``doctor``, every command's examples, shell completion."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import one_line

import gnnbridge
from gnnbridge.cli import cli as group
from gnnbridge.cli import main
from gnnbridge.core.app import doctor
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.config import KEY_HELP, ExperimentConfig


def flat_keys(data: dict, cls: type = ExperimentConfig, prefix: str = "") -> set[str]:
    """Every dotted key of ``data``, the keys of its sections (and of a section's own, such as
    ``log.mlflow``) included; a mapping that is a key's value (``dataset.options``) is one key."""
    keys, hints = set(), typing.get_type_hints(cls)
    for key, value in data.items():
        keys.add(prefix + key)
        if dataclasses.is_dataclass(hints[key]):
            keys |= flat_keys(value, hints[key], f"{prefix}{key}.")
    return keys


def test_config_show_prints_the_resolved_config_with_a_comment_on_every_key(capsys, refused):
    main(["config", "show", "gat-synthetic", "--backend", "dgl", "--set", "model.heads=8"])
    out = capsys.readouterr().out
    expected = resolve_config("gat-synthetic", backend="dgl", overrides=["model.heads=8"]).to_dict()
    assert yaml.safe_load(out) == expected  # the comments are comments: the output is the config
    assert all("  # " in line for line in out.splitlines())
    assert "heads: 8" in out and "backend: dgl" in out
    one_line(refused("config", "show", "--set", "model.hiden=3"), "did you mean 'hidden'")
    one_line(refused("config", "show", "--set", "log.to=[nope]"), "Unknown logger 'nope'")  # as train refuses it
    one_line(refused("config", "show", "--set", "log.to=csv"), "e.g. log.to=[tensorboard,csv]")


def test_every_config_key_has_its_line():
    assert flat_keys(ExperimentConfig().to_dict()) == set(KEY_HELP)


def test_the_json_schema_validates_every_built_in_experiment_and_refuses_what_train_refuses(capsys, tmp_path):
    """What an editor does with ``gnnbridge config schema``: the shipped experiments validate, a
    misspelt key, a wrong type and a choice outside the list do not; every key is described."""
    import jsonschema

    main(["config", "schema"])
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    folder = Path(gnnbridge.__file__).parent / "experiments"
    for path in sorted(folder.glob("*.yaml")):
        assert not list(validator.iter_errors(yaml.safe_load(path.read_text()))), path.name
    assert not list(validator.iter_errors(ExperimentConfig().to_dict()))
    for bad in ({"model": {"hiden": 3}}, {"train": {"epochs": "ten"}}, {"eval": {"layer_store": "ssd"}}, {"tsk": 1}):
        assert list(validator.iter_errors(bad)), bad
    described = {k for k, v in schema["properties"].items() if v.get("description")}
    for section in schema["$defs"].values():
        if section.get("type") == "object":
            assert all(p.get("description") for p in section["properties"].values()), section["title"]
    assert described == set(schema["properties"])


def test_doctor_checks_each_part_and_passes_here(capsys):
    main(["doctor"])  # no SystemExit: nothing failed
    out = capsys.readouterr().out
    for part in (
        "torch",
        "gpu",
        "collectives",
        "backend pyg",
        "backend dgl",
        "core sampler",
        "threads",
        "network",
        "shared memory",
        "memory",
        "disk",
    ):
        assert any(line[6:].startswith(part) for line in out.splitlines()), part
    assert "gloo" in out


def test_doctor_fails_a_job_that_would_not_fit(monkeypatch, tmp_path, refused):
    data = tmp_path / "graph.npz"
    rng = np.random.default_rng(0)
    np.savez(
        data,
        edge_index=rng.integers(0, 40, (2, 200)),
        x=rng.normal(size=(40, 4)).astype(np.float32),
        y=np.arange(40) % 2,
    )
    config = resolve_config(dataset=str(data), nproc=64, overrides=["model.arch=bogus"])

    class Tiny:
        free, total = 1024, 1 << 40

    with monkeypatch.context() as patched:
        patched.setattr(doctor.shutil, "disk_usage", lambda path: Tiny())
        found = {f.what: f for f in doctor.diagnose(config)}
    assert (
        found["shared memory"].status == "fail"
        and f"{doctor.format_bytes(data.stat().st_size)} dataset" in found["shared memory"].detail
    )
    assert "--shm-size" in found["shared memory"].fix
    assert found["threads"].status == "fail" and "--nproc" in found["threads"].fix
    assert found["experiment"].status == "fail" and "Unknown model.arch 'bogus'" in found["experiment"].detail
    one_rank = {f.what: f for f in doctor.diagnose(resolve_config(dataset=str(data)))}
    assert one_rank["shared memory"].status == "ok"  # one rank shares nothing
    assert one_rank["experiment"].status == "ok"
    proc = refused("doctor", "--dataset", str(data), "--nproc", "64")
    assert proc.returncode == 1 and "would stop a job" in proc.stderr


def refused_by_train(case: str, folder) -> list[str]:
    """Arguments that ``train`` refuses at once, each for a reason only the data can tell."""
    if case == "text file named .npz":
        (folder / "graph.npz").write_text("not a numpy archive\n")
        return ["--dataset", "graph.npz"]
    if case == "two edge types, no link.edge_type":
        rng = np.random.default_rng(0)
        edges = [np.stack([np.arange(30) % 30, rng.integers(0, 20, 30)]).astype(np.int64) for _ in range(2)]
        np.savez(
            folder / "shop.npz",
            num_nodes__user=np.array([30]),
            x__item=np.ones((20, 4), np.float32),
            edge_index__user__buys__item=edges[0],
            edge_index__user__views__item=edges[1],
        )
        return ["--dataset", "shop.npz", "--set", "task=link"]
    if case == "model too large for memory":
        return ["--set", "model.hidden=100000000"]
    return ["--dataset", "missing.npz"]


@pytest.mark.parametrize(
    "case", ["missing .npz", "text file named .npz", "two edge types, no link.edge_type", "model too large for memory"]
)
def test_doctor_and_config_show_refuse_what_train_refuses(case, refused, tmp_path):
    """One function holds everything train checks before it starts, the data's checks included:
    doctor and config show run it too, so what they pass, train starts."""
    args = refused_by_train(case, tmp_path)
    train = refused("train", "--quiet", *args)
    assert train.returncode != 0 and train.stderr.startswith("Error: "), train.stderr
    said = re.sub(r"[\d.]+ [KMGT]?B", "SIZE", train.stderr.strip())  # free memory moves between calls
    show = refused("config", "show", *args)
    one_line(show, "Error: ")
    assert re.sub(r"[\d.]+ [KMGT]?B", "SIZE", show.stderr.strip()) == said and show.stdout == ""
    dx_exp, dx_args = (args[1], args[2:]) if args[0] == "--dataset" else (None, args)
    check = refused("doctor", *(["--dataset", dx_exp] if dx_exp else []), *dx_args)
    assert check.returncode == 1 and "would stop a job" in check.stderr
    found = [line for line in check.stdout.splitlines() if line[6:].startswith("experiment")]
    assert len(found) == 1 and found[0].startswith("fail"), check.stdout
    assert re.sub(r"[\d.]+ [KMGT]?B", "SIZE", found[0]).endswith(said[len("Error: ") :]), (found, said)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in tmp_path.iterdir() if p.suffix == ".npz"
    )  # no run folder


@pytest.mark.parametrize("name", sorted(group.commands))
def test_every_command_shows_an_example_in_its_help(name):
    command = group.commands[name]
    text = command.get_help(command.make_context(name, ["--help"], resilient_parsing=True))
    assert "Examples:" in text and f"gnnbridge {name}" in text


def test_shell_completion_completes_commands_and_options():
    env = {**os.environ, "_GNNBRIDGE_COMPLETE": "bash_complete", "COMP_WORDS": "gnnbridge port --t", "COMP_CWORD": "2"}
    done = subprocess.run([sys.executable, "-m", "gnnbridge"], env=env, capture_output=True, text=True, check=False)
    assert "plain,--to" in done.stdout.splitlines()
