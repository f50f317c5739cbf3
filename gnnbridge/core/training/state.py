"""Where training stands besides the weights: what a checkpoint carries so that a continued run
stops, picks its best epoch and reports exactly as the uninterrupted one would."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TrainState:
    """Where training stands besides the weights: the epochs done (their history) and the
    monitor's memory, which early stopping reads. A checkpoint carries it, so a resumed run
    stops exactly when the uninterrupted one would."""

    history: list[dict] = field(default_factory=list)
    best_value: float | None = None
    best_epoch: int | None = None
    bad_epochs: int = 0
    restarts: list[dict] = field(default_factory=list)  # each restart that continued this run (see app.plan)

    @property
    def next_epoch(self) -> int:
        return self.history[-1]["epoch"] + 1 if self.history else 0

    def record(self, stats: dict, monitor: str, is_better=None) -> bool:
        """Add an epoch; True when its monitor value beats every earlier one (ties do not).
        ``is_better(monitor, value, best)``: the target's order (a higher value by default; a
        regression's errors are better lower)."""
        self.history.append(stats)
        value = stats.get(monitor)  # None: ROC-AUC of a split holding one class only
        better = is_better or (lambda _, v, best: best is None or v > best)
        if value is not None and better(monitor, value, self.best_value):
            self.best_value, self.best_epoch, self.bad_epochs = value, stats["epoch"], 0
            return True
        self.bad_epochs += 1
        return False

    def should_stop(self, patience: int) -> bool:
        return patience > 0 and self.bad_epochs >= patience

    def monitor_state(self) -> dict:
        return {"best": self.best_value, "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs}

    def best_summary(self, monitor: str) -> dict:
        return {"monitor": monitor, "epoch": self.best_epoch, "value": self.best_value}

    def stopping_summary(self, patience: int) -> dict:
        stopped = self.should_stop(patience)
        return {
            "patience": patience,
            "stopped": stopped,
            "stopped_after_epoch": self.history[-1]["epoch"] if stopped else None,
        }

    @classmethod
    def from_checkpoint(cls, state: dict) -> TrainState:
        monitor = state["monitor"]
        return cls(
            list(state["history"]),
            monitor["best"],
            monitor["best_epoch"],
            monitor["bad_epochs"],
            list(state.get("restarts", [])),
        )
