"""The optimizer and learning-rate schedule a config chooses (core/training/optim.py): each
optimizer trains, the learning rate follows the schedule epoch by epoch, a restored schedule
continues where it stopped, and a bad value is one line naming it and the choices."""

import math

import pytest
import torch

import gnnbridge
from gnnbridge.core.config import TrainConfig, from_dict
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.training import optim


def lrs(cfg: TrainConfig, epochs: int | None = None) -> list[float]:
    """The learning rate of each epoch, stepping the schedule as the trainer does."""
    opt = optim.build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
    schedule = optim.build_schedule(opt, cfg)
    out = []
    for _ in range(epochs or cfg.epochs):
        out.append(optim.current_lr(opt))
        opt.step()
        if schedule is not None:
            schedule.step()
    return out


def test_the_default_is_adam_at_a_constant_rate():
    cfg = TrainConfig()
    opt = optim.build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
    assert type(opt) is torch.optim.Adam and optim.build_schedule(opt, cfg) is None
    assert lrs(cfg) == [0.01] * cfg.epochs


@pytest.mark.parametrize(
    "name, cls", [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW), ("sgd", torch.optim.SGD)]
)
def test_each_optimizer_is_torchs(name, cls):
    cfg = TrainConfig(optimizer=name, weight_decay=0.01, momentum=0.9 if name == "sgd" else 0.0)
    opt = optim.build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
    assert type(opt) is cls and opt.param_groups[0]["weight_decay"] == 0.01
    if name == "sgd":
        assert opt.param_groups[0]["momentum"] == 0.9


def test_warm_up_then_cosine_epoch_by_epoch():
    cfg = TrainConfig(epochs=8, lr=0.1, schedule="cosine", warmup_epochs=2, min_lr=0.001)
    got = lrs(cfg)
    want = [0.1 / 3, 0.2 / 3] + [0.001 + (0.1 - 0.001) * (1 + math.cos(math.pi * t / 6)) / 2 for t in range(6)]
    assert got == pytest.approx(want, rel=1e-12)
    assert got[2] == pytest.approx(0.1) and all(a > b for a, b in zip(got[2:], got[3:], strict=False))


def test_step_decays_every_step_size_epochs():
    cfg = TrainConfig(epochs=7, lr=0.1, schedule="step", step_size=3, gamma=0.5)
    assert lrs(cfg) == pytest.approx([0.1] * 3 + [0.05] * 3 + [0.025])


def test_warm_up_alone_then_constant():
    assert lrs(TrainConfig(epochs=5, lr=0.4, warmup_epochs=3)) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4])


def _stopped(cfg: TrainConfig, epochs_done: int) -> dict:
    """What a checkpoint holds of the optimizer and schedule after ``epochs_done`` epochs."""
    opt = optim.build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
    schedule = optim.build_schedule(opt, cfg)
    for _ in range(epochs_done):
        opt.step()
        schedule.step()
    return {"epoch": epochs_done - 1, "optimizer": opt.state_dict(), "scheduler": schedule.state_dict()}


@pytest.mark.parametrize("saved_state", [True, False])
def test_a_restored_schedule_continues_exactly(saved_state):
    cfg = TrainConfig(epochs=9, lr=0.1, schedule="cosine", warmup_epochs=2)
    state = _stopped(cfg, 4)
    if not saved_state:  # a checkpoint without one (schedule none then): the schedule is stepped to the epoch
        state["scheduler"] = None
    opt = optim.build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
    schedule = optim.restore(opt, cfg, state, {"lr": 0.1, "epochs": 9, "schedule": "cosine", "warmup_epochs": 2})
    rest = []
    for _ in range(5):
        rest.append(optim.current_lr(opt))
        schedule.step()
    assert rest == lrs(cfg)[4:]


def test_a_changed_schedule_follows_the_config_on_resume():
    state = _stopped(TrainConfig(epochs=4, lr=0.1, schedule="cosine"), 4)
    longer = TrainConfig(epochs=8, lr=0.1, schedule="cosine")
    opt = optim.build_optimizer([torch.nn.Parameter(torch.zeros(1))], longer)
    optim.restore(opt, longer, state, {"lr": 0.1, "epochs": 4, "schedule": "cosine"})
    assert optim.current_lr(opt) == lrs(longer)[4]


def test_a_changed_momentum_follows_the_config_on_resume():
    """The saved SGD state holds its momentum; the resumed run's config.yaml says the new one."""
    state = _stopped(TrainConfig(epochs=4, optimizer="sgd", momentum=0.5, schedule="step"), 2)
    resumed = TrainConfig(epochs=4, optimizer="sgd", momentum=0.9, schedule="step")
    opt = optim.build_optimizer([torch.nn.Parameter(torch.zeros(1))], resumed)
    optim.restore(opt, resumed, state, {"optimizer": "sgd", "momentum": 0.5, "schedule": "step"})
    assert opt.param_groups[0]["momentum"] == 0.9


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd"])
def test_each_optimizer_trains_a_built_in_experiment(tmp_path, name):
    extra = ["train.momentum=0.9", "train.lr=0.05"] if name == "sgd" else []
    overrides = [f"train.optimizer={name}", "train.epochs=6", "train.schedule=cosine", "train.warmup_epochs=1", *extra]
    result = gnnbridge.run(
        "karate-sage", backend="pyg", nproc=1, out=tmp_path / "run", progress=False, overrides=overrides
    )
    losses = [h["loss"] for h in result["history"]]
    assert losses[-1] < losses[0]
    assert [h["lr"] for h in result["history"]] == pytest.approx(
        lrs(
            from_dict(
                {
                    "train": {
                        "epochs": 6,
                        "schedule": "cosine",
                        "warmup_epochs": 1,
                        "lr": 0.05 if name == "sgd" else 0.01,
                    }
                }
            ).train
        )
    )


@pytest.mark.parametrize(
    "train, line",
    [
        (
            {"optimizer": "adamm"},
            "train.optimizer='adamm' is not an optimizer (did you mean 'adam'?); choose one of: adam, adamw, sgd.",
        ),
        (
            {"schedule": "cosin"},
            "train.schedule='cosin' is not a learning-rate schedule (did you mean 'cosine'?); "
            "choose one of: none, cosine, step.",
        ),
        (
            {"momentum": 0.9},
            "train.momentum=0.9 applies to train.optimizer=sgd only, but it is 'adam'; drop "
            "train.momentum (its default is 0.0) or set train.optimizer=sgd.",
        ),
        ({"optimizer": "sgd", "momentum": 1.5}, "train.momentum=1.5 is out of range; expected 0 <= momentum < 1"),
        ({"warmup_epochs": 10}, "train.warmup_epochs=10 must be less than train.epochs=10"),
        ({"warmup_epochs": -1}, "train.warmup_epochs=-1 is out of range; expected an integer >= 0 (0: no warm-up)"),
        ({"step_size": 0}, "train.step_size=0 is out of range; expected a positive integer, e.g. train.step_size=10."),
        ({"gamma": 0}, "train.gamma=0.0 is out of range; expected 0 < gamma <= 1"),
        (
            {"schedule": "cosine", "min_lr": 0.5},
            "train.min_lr=0.5 is out of range; expected 0 <= min_lr < train.lr=0.01.",
        ),
    ],
)
def test_bad_values_are_one_line_naming_the_value_and_the_choices(train, line):
    with pytest.raises(ConfigError) as err:
        from_dict({"train": train})
    assert line in str(err.value) and "\n" not in str(err.value)
