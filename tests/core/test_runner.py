"""The runner's promises around a run: nothing half-made is left, nothing of the user's is touched."""
import pytest

import gnnbridge
from gnnbridge import hookimpl
from gnnbridge.backends.pyg.backend import PygBackend
from gnnbridge.core.training import checkpoint
from gnnbridge.testing import registered_plugin


class BrokenModelBackend(PygBackend):
    name = "broken"
    description = "PyG with a model that fails on its first batch"

    def _model(self, spec, in_dim, out_dim):
        model = super()._model(spec, in_dim, out_dim)

        def fail(*args, **kwargs):
            raise RuntimeError("boom in forward")

        model.forward = fail
        return model


class FailsInSecondEpochBackend(PygBackend):
    name = "fails-later"
    description = "PyG with a model that fails on its second training batch"

    def _model(self, spec, in_dim, out_dim):
        model = super()._model(spec, in_dim, out_dim)
        forward, calls = model.forward, []

        def fail_later(*args, **kwargs):
            calls.append(model.training)
            if calls.count(True) == 2:
                raise RuntimeError("boom in epoch 2")
            return forward(*args, **kwargs)

        model.forward = fail_later
        return model


class BrokenPlugin:
    @hookimpl
    def register_backends(self, register):
        register(BrokenModelBackend())
        register(FailsInSecondEpochBackend())


@pytest.fixture
def broken_backend():
    with registered_plugin(BrokenPlugin(), "broken-test") as plugin:
        yield plugin


def test_a_failed_run_leaves_no_folder_but_keeps_the_users(tmp_path, broken_backend):
    with pytest.raises(RuntimeError, match="boom in forward"):
        gnnbridge.run("karate-sage", backend="broken", nproc=1, out=tmp_path / "a" / "b" / "out", progress=False)
    assert not (tmp_path / "a").exists()  # the parents it made go too
    (tmp_path / "mine").mkdir()
    with pytest.raises(RuntimeError, match="boom in forward"):
        gnnbridge.run("karate-sage", backend="broken", nproc=1, out=tmp_path / "mine", progress=False)
    assert (tmp_path / "mine").is_dir() and not any((tmp_path / "mine").iterdir())  # as the user left it


def test_a_failed_run_with_a_checkpoint_is_kept_for_resuming(tmp_path, broken_backend):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom in epoch 2"):
        gnnbridge.run("karate-sage", backend="fails-later", nproc=1, out=out, progress=False,
                      overrides=["train.batch_size=64"])
    assert (out / "config.yaml").exists() and not (out / "results.json").exists()
    assert checkpoint.load(checkpoint.path_in(out, "latest"))["epoch"] == 0


def test_default_run_folders_never_collide(tmp_path, monkeypatch):
    from gnnbridge.core.app.resolve import resolve_config
    from gnnbridge.core.app.rundir import make_run_dir, new_run_dir

    monkeypatch.chdir(tmp_path)
    config = resolve_config("karate-sage")
    first, _ = make_run_dir(new_run_dir(config, None), exclusive=True)
    second, _ = make_run_dir(new_run_dir(config, None), exclusive=True)  # same second, same name
    assert first.is_dir() and second.is_dir() and first != second


def test_graph_tasks_on_pyg_need_no_sampling_extension_for_the_native_loader():
    """PyG's graph DataLoader needs neither pyg-lib nor torch-sparse (its NeighborLoader does)."""
    from gnnbridge.core.app.preflight import preflight
    from gnnbridge.core.app.resolve import resolve_config

    config = preflight(resolve_config("gin-synthetic", backend="pyg", overrides=["sampler.kind=native"]))
    assert config.sampler.kind.value == "native"
