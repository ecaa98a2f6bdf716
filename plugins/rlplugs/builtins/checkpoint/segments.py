"""Segment bookkeeping: one record per stretch of training between two (re)starts.

Why: a long RL run is rarely one process. It crashes, is stopped by a guard, is resumed from
weights with a fresh optimizer, and after a few of those nobody can say which steps shared an
optimizer state, which is what decides whether two stretches of the reward curve are comparable.
Each segment records where it started and ended, why it ended and whether the optimizer state was
carried in, in ``<output_dir>/rlplugs_segments.json``, and :func:`format_chain` prints the chain.

Writers: :class:`SegmentCallback` for transformers/TRL (automatic), and ``rlplugs ckpt segments
RUN_DIR --begin/--end`` for trainers without hooks (prime-rl: call it around each launch).
A segment that is still open when the next one begins ended without saying so (crash, kill, node
loss); it is closed as ``interrupted`` at the last step it reported.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from transformers import TrainerCallback

SEGMENTS_FILE = "rlplugs_segments.json"
#: Key a guard appends to ``TrainerState.log_history`` to say why it stopped training.
STOP_REASON_KEY = "rlplugs/stop_reason"
#: How a segment's ``end_reason`` begins when a guard stopped it (the guard's message follows).
GUARD_STOP = "stopped: "


def stop_training(state, control, guard: str, reason: str) -> None:
    """End the run from a guard's callback, its reason left in ``state.log_history``: where the
    segment log and the trainer state saved beside the model find it."""
    state.log_history.append({"step": state.global_step, STOP_REASON_KEY: f"{guard}: {reason}"})
    control.should_training_stop = True


@dataclass
class Segment:
    start_step: int
    optimizer_carried: bool | None  # None: not known (recorded by hand without saying)
    resumed_from: str | None = None
    end_step: int | None = None  # None while running
    last_step: int | None = None  # last step the segment reported (checkpoint or log)
    end_reason: str | None = None
    started_at: float = 0.0
    ended_at: float | None = None

    @property
    def open(self) -> bool:
        return self.end_reason is None


class SegmentLog:
    """The segment records of one output directory, rewritten atomically on every change."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.path = Path(run_dir) / SEGMENTS_FILE
        self.segments = self._read() if self.path.exists() else []

    def _read(self) -> list[Segment]:
        try:
            records = json.loads(self.path.read_text())
            if not isinstance(records, list):
                raise TypeError(f"a list of segments, not a {type(records).__name__}")
            return [Segment(**r) for r in records]
        except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError; wrong keys a TypeError
            raise ValueError(f"{self.path}: not a segments file ({exc}); move it away to start a new chain") from None

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{SEGMENTS_FILE}-", dir=self.path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump([asdict(s) for s in self.segments], f, indent=2)
        os.replace(tmp, self.path)

    def begin(self, start_step: int, optimizer_carried: bool | None, resumed_from: str | None = None) -> Segment:
        """Open a segment; an open predecessor is closed as interrupted at its last reported step."""
        if start_step < 0:
            raise ValueError(f"a segment cannot begin at step {start_step}; steps count from 0")
        if self.segments and self.segments[-1].open:
            prev = self.segments[-1]
            prev.end_step = prev.last_step if prev.last_step is not None else prev.start_step
            prev.end_reason = "interrupted (ended without closing its segment: crash or kill)"
        seg = Segment(start_step, optimizer_carried, resumed_from, last_step=start_step, started_at=time.time())
        self.segments.append(seg)
        self._save()
        return seg

    def heartbeat(self, step: int) -> None:
        if self.segments and self.segments[-1].open:
            self.segments[-1].last_step = step
            self._save()

    def end(self, end_step: int, reason: str) -> None:
        if not self.segments or not self.segments[-1].open:
            raise ValueError(f"{self.path}: no open segment to end")
        seg = self.segments[-1]
        if end_step < seg.start_step:
            raise ValueError(f"the open segment began at step {seg.start_step}; it cannot end at step {end_step}")
        seg.end_step = seg.last_step = end_step
        seg.end_reason = reason
        seg.ended_at = time.time()
        self._save()


def format_chain(segments: list[Segment]) -> list[str]:
    """One line per segment: ``#2  steps 40 -> 75  optimizer fresh  ended: stopped by ...``."""
    lines = []
    for i, s in enumerate(segments, 1):
        carried = {True: "carried", False: "fresh", None: "unknown"}[s.optimizer_carried]
        end = s.end_step if s.end_step is not None else f"{s.last_step}+ (running)"
        line = f"#{i}  steps {s.start_step} -> {end}  optimizer {carried}  ended: {s.end_reason or 'still running'}"
        if s.resumed_from:
            line += f"  (from {s.resumed_from})"
        lines.append(line)
    return lines


class SegmentCallback(TrainerCallback):
    """Records the segment of a transformers/TRL run in its ``output_dir``.

    Whether optimizer state was carried in is read from the optimizer itself at the first step,
    after every ``on_train_begin`` (a fresh-optimizer resume clears it there) and before it steps.
    """

    def __init__(self) -> None:
        self.log: SegmentLog | None = None

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        if self.log is not None or not state.is_world_process_zero:
            return
        opt = getattr(optimizer, "optimizer", optimizer)
        carried = state.global_step > 0 and opt is not None and any(opt.state.values())
        resumed = args.resume_from_checkpoint if isinstance(args.resume_from_checkpoint, str) else None
        self.log = SegmentLog(args.output_dir)
        self.log.begin(state.global_step, carried, resumed if state.global_step > 0 else None)

    def on_save(self, args, state, control, **kwargs):
        if self.log is not None:
            self.log.heartbeat(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.log is None:
            return
        start = self.log.segments[-1].start_step  # log_history also holds earlier segments' entries
        stops = [h[STOP_REASON_KEY] for h in state.log_history if STOP_REASON_KEY in h and h.get("step", 0) > start]
        if stops:
            reason = GUARD_STOP + stops[-1]
        elif state.global_step >= state.max_steps:
            reason = "completed"
        else:
            reason = "stopped early"
        self.log.end(state.global_step, reason)
        self.log = None
