"""Resume a transformers/TRL run from a checkpoint's weights with a *fresh* optimizer.

Why: optimizer state is the part of a checkpoint that breaks. It is lost (weights-only saves),
corrupt, or no longer matches the parameters (a LoRA target list or a frozen tower changed), and
``Trainer`` then refuses to resume at all. Restarting from step 0 instead would also reset the
LR schedule, the RNG streams and the data order. This module keeps everything but the optimizer:

- :func:`strip_optimizer` makes a weights-only copy of a ``checkpoint-N`` folder (hard links, so
  it costs no disk), marked with ``rlplugs_fresh_optimizer.json``. ``Trainer`` resumed from it
  restores weights (full model or PEFT adapter), ``global_step``, RNG state and the data position,
  but, finding no ``optimizer.pt``, also skips ``scheduler.pt``;
- :class:`FreshOptimizerCallback` then puts the LR schedule back at ``global_step`` and makes sure
  the optimizer starts empty (clearing it if a loadable ``optimizer.pt`` was resumed on purpose).

What a fresh Adam(W) state changes, exactly: the moments restart at zero and the per-parameter
step count at 0, so the first resumed update is ``lr * g / (|g| + eps)``, about ``lr`` per element
(sign-like) instead of ``lr * m_hat / (sqrt(v_hat) + eps)``; bias correction then warms up again as
at the start of training. Every later step differs through those moments. An optimizer without
state (SGD without momentum) resumes bit-identically to an uninterrupted run; the tests prove both.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from transformers import TrainerCallback

log = logging.getLogger(__name__)

MARKER = "rlplugs_fresh_optimizer.json"


class ResumeError(RuntimeError):
    """The checkpoint or schedule cannot be resumed with a fresh optimizer."""


def _is_optimizer_state(name: str) -> bool:
    # transformers: optimizer.pt / optimizer.bin; FSDP/DeepSpeed: optimizer_0/ folders.
    return name.startswith("optimizer")


def strip_optimizer(checkpoint: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """A copy of ``checkpoint`` without optimizer state, at ``out`` (default ``<checkpoint>-fresh-optimizer``).

    Files are hard-linked where the filesystem allows (a checkpoint is gigabytes); the copy is
    built in a temporary folder and renamed into place, so ``out`` never exists half-made.
    """
    checkpoint = Path(checkpoint)
    check_resumable(checkpoint)
    out = Path(out) if out is not None else checkpoint.with_name(f"{checkpoint.name}-fresh-optimizer")
    if out.exists():
        raise ResumeError(f"{out} already exists; remove it or pass another output folder")
    dropped = sorted(p.name for p in checkpoint.iterdir() if _is_optimizer_state(p.name))
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    except OSError as exc:
        raise ResumeError(f"cannot write {out} ({exc.strerror or exc} in {out.parent}); pass --out in a writable "
                          "folder") from None
    try:
        for src in checkpoint.iterdir():
            if src.name in dropped:
                continue
            if src.is_dir():
                shutil.copytree(src, staging / src.name, copy_function=_link_or_copy)
            else:
                _link_or_copy(src, staging / src.name)
        (staging / MARKER).write_text(json.dumps({"source": str(checkpoint.resolve()), "dropped": dropped}, indent=2))
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("weights-only copy of %s at %s (dropped %s)", checkpoint, out, dropped or "nothing")
    return out


def check_resumable(checkpoint: Path) -> None:
    """Refuse, before anything is written, a checkpoint ``Trainer`` could not resume from
    (:func:`rlplugs.unresumable` says why)."""
    from rlplugs import unresumable

    if reason := unresumable(checkpoint):
        raise ResumeError(reason)


def _link_or_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class FreshOptimizerCallback(TrainerCallback):
    """On a resumed run: empty optimizer state, LR schedule at ``global_step``.

    ``on_train_begin`` runs after ``Trainer`` has loaded the checkpoint and built the optimizer and
    scheduler, and before the first batch, which is the one moment both can be corrected.
    """

    def __init__(self) -> None:
        self.cleared_states = 0  # how many per-parameter states a loaded optimizer.pt had

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        if state.global_step == 0 or optimizer is None:
            return
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
        self.cleared_states = sum(1 for s in opt.state.values() if s)
        opt.state.clear()
        sched = getattr(lr_scheduler, "scheduler", lr_scheduler)
        if not hasattr(sched, "last_epoch") or not hasattr(sched, "get_last_lr"):
            raise ResumeError(f"fresh-optimizer resume needs a step-indexed LR schedule, got {type(sched).__name__}")
        if sched.last_epoch == 0:
            with warnings.catch_warnings():  # "scheduler.step() before optimizer.step()": intended here
                warnings.simplefilter("ignore")
                for _ in range(state.global_step):
                    sched.step()
        elif sched.last_epoch != state.global_step:
            raise ResumeError(f"LR schedule is at step {sched.last_epoch} but the run resumes at {state.global_step}")
        for group, lr in zip(opt.param_groups, sched.get_last_lr(), strict=True):
            group["lr"] = lr
        log.info(
            "fresh optimizer at step %d (cleared %d loaded parameter states); LR schedule at step %d, lr=%s",
            state.global_step,
            self.cleared_states,
            sched.last_epoch,
            sched.get_last_lr(),
        )
