"""A run's segments: the stretches of training between a start or resume and the checkpoint the next one
goes on from (or the end). Each checkpoint carries the segments so far in its ``trainer_state.json``
(a Trainer ``ExportableState``), so a resumed run's time, speed and training loss are its whole run's."""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

TRAINER_STATE = "trainer_state.json"


class RunSegments(TrainerCallback, ExportableState):
    """Times and sums the steps of this segment; ``earlier``: the segments before the checkpoint resumed.

    A segment: ``{"from_step", "to_step", "train_seconds", "loss_sum"}`` (``loss_sum``: the training losses
    of its steps added up; ``None`` where a checkpoint of an older version recorded no segments)."""

    def __init__(self, earlier: list[dict] | None = None):
        self.earlier = list(earlier or [])
        self.loss_sum = 0.0  # added to by the trainer at every step (`add_loss`)
        self._started, self._first_step, self._step = time.time(), 0, 0

    @classmethod
    def resuming(cls, checkpoint: str | None) -> RunSegments:
        """The segments of a run going on from ``checkpoint`` (None: a new run)."""
        if checkpoint is None:
            return cls()
        state = json.loads((Path(checkpoint) / TRAINER_STATE).read_text(encoding="utf-8"))
        stored = state.get("stateful_callbacks", {}).get(cls.__name__)
        if stored is None:  # a checkpoint written before runs recorded their segments
            unknown = {"from_step": 0, "to_step": state["global_step"], "train_seconds": None, "loss_sum": None}
            return cls([unknown])
        return cls(stored["attributes"]["segments"])

    def add_loss(self, loss: float) -> None:
        self.loss_sum += loss

    def on_train_begin(self, args, state, control, **kwargs):
        self._started, self._first_step = time.time(), state.global_step
        self._step = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        self._step = state.global_step

    def current(self) -> dict:
        """This segment so far."""
        seconds = time.time() - self._started
        return {
            "from_step": self._first_step,
            "to_step": self._step,
            "train_seconds": seconds,
            "loss_sum": self.loss_sum,
        }

    def state(self) -> dict:  # what a checkpoint saves: restored by `resuming`, not by the Trainer
        return {"args": {}, "attributes": {"segments": [*self.earlier, self.current()]}}

    def whole_run(self, wall_seconds: float, examples_per_step: int) -> dict:
        """The run's record at its end: every segment, and the whole run's wall time (the earlier segments'
        training time up to their checkpoint plus this process's ``wall_seconds``), training examples per
        second and mean training loss; ``None`` for a sum that an earlier segment does not know."""
        segments = [*self.earlier, {**self.current(), "wall_seconds": wall_seconds}]
        earlier_seconds = [s["train_seconds"] for s in self.earlier]
        train_seconds = [s["train_seconds"] for s in segments]
        losses = [s["loss_sum"] for s in segments]
        steps = segments[-1]["to_step"]
        known = None not in train_seconds
        return {
            "segments": segments,
            "resumed": len(segments) > 1,
            "wall_seconds": sum(earlier_seconds) + wall_seconds if known else None,
            "train_examples_per_second": steps * examples_per_step / sum(train_seconds) if known else None,
            "train_loss": sum(losses) / steps if None not in losses and steps else None,
        }

    def run_record(self, wall_seconds: float, batch_size: int, log_history: list[dict]) -> dict:
        """`whole_run` for ``results.json``; the Trainer's last training entry (of this segment alone after a
        resume) corrected to the whole run's where that is known."""
        record = self.whole_run(wall_seconds, batch_size)
        final = next((entry for entry in reversed(log_history) if "train_runtime" in entry), None)
        if record["resumed"] and final is not None:
            final["segments"] = len(record["segments"])
            for key in ("train_loss", "train_examples_per_second"):
                if record[key] is not None:
                    final[key] = record[key]
            if record["wall_seconds"] is not None:
                final["train_runtime"] = sum(s["train_seconds"] for s in record["segments"])
        if record["wall_seconds"] is None:  # a checkpoint of an older version: the time before it is unknown
            record["wall_seconds"] = wall_seconds
        return record
