"""The inference path (core/inference/scorer.py): evaluate and predict score a checkpoint with
the run's parts and final evaluator alone, no optimizer, DDP wrapper or loggers, and their
numbers are the training run's final ones."""

import json

import gnnbridge
from gnnbridge.core.inference import assembly
from gnnbridge.core.training import optim, trainer


def test_evaluate_and_predict_build_no_optimizer_ddp_or_loggers(tmp_path, monkeypatch):
    gnnbridge.run(
        "karate-sage", backend="pyg", nproc=1, out=tmp_path / "run", progress=False, overrides=["train.epochs=3"]
    )
    final = json.loads((tmp_path / "run" / "results.json").read_text())["last"]["metrics"]

    def refuse(*args, **kwargs):
        raise AssertionError("inference built a part only training needs")

    for module, name in [(optim, "build_optimizer"), (trainer, "DistributedDataParallel"), (trainer, "RunLoggers")]:
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(trainer.Trainer, "__init__", refuse)
    built = []
    monkeypatch.setattr(assembly.RunParts, "__init__", _counting(assembly.RunParts.__init__, built))
    scored = gnnbridge.evaluate(tmp_path / "run", kind="latest")
    assert scored["metrics"] == final and built == [1]  # exactly the run's last epoch's scores
    gnnbridge.predict(tmp_path / "run", tmp_path / "preds.npz", kind="latest")
    assert built == [1, 1]


def _counting(init, built):
    def counted(self, *args, **kwargs):
        built.append(1)
        init(self, *args, **kwargs)

    return counted
