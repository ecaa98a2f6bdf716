"""Entropy guard: stop a GRPO run whose policy grows unsure of its own completions.

Why: when updates break a policy, TRL's logged ``entropy`` (the policy's mean token entropy on the
completions it trains on) rises, long before a held-out evaluation would show the damage. The rollout reward falls too, but it also falls when the
environment scores a batch low for reasons of its own, and the entropy does not. Over the
thirteen factorio-build GRPO runs whose updates are logged (SmolLM2-135M, H200;
``benchmarks/results/factorio_repro_*.json``; a resumed phase counted apart, since the guard
takes its early level anew), the three that broke within a run passed 1.6 times their first
update's entropy at steps 11, 5 and 5 (holdout 0.973 -> 0.027; rollout reward 0.705 -> 0.167;
holdout 0.434 -> 0.000), each at the first update on the batch whose reward fell; the last of
them peaked at 1.70 and never passed 2. The ten others reached at most 1.45 times it, one of
them through a batch whose reward fell from 1.07 to 0.47 when the sandbox refused 226 of its 512
programs. So the default ratio is 1.6, between the two; both margins are thin. One of the ten
broke where the guard cannot see: a top_p 0.9 phase whose entropy fell while its policy broke at
top_p 1.0 (holdout at top_p 0.9 0.816 -> 0.408) showed it only at the next phase's first update,
the resumed run's own early level. Stopping at the break saves the rest of a lease for another run.

The guard takes the mean of the metric over the first ``baseline_steps`` log entries that carry it
and stops training, with the reason in the run's segments, at the first later entry above
``ratio`` times that; a resumed run takes that early level anew. TRL's entropy is a global mean
over all processes, so all stop together.
"""

from __future__ import annotations

import logging
from statistics import fmean

from transformers import TrainerCallback

from rlplugs.builtins.checkpoint.segments import stop_training

log = logging.getLogger(__name__)


class EntropyGuard(TrainerCallback):
    """Stops training when the logged entropy rises past ``ratio`` times its early level (defaults:
    ``EntropyGuardConfig``, the one place they are set)."""

    def __init__(self, ratio: float, baseline_steps: int, metric: str):
        self.ratio = ratio
        self.baseline_steps = baseline_steps
        self.metric = metric
        self.history: list[tuple[int, float]] = []  # (step, value) of every entry that carried the metric
        self.base: float | None = None  # the early level, once baseline_steps entries have carried the metric
        self.tripped: str | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or logs.get(self.metric) is None or self.tripped:  # None: no valid value in the entry
            return
        value, step = float(logs[self.metric]), state.global_step
        self.history.append((step, value))
        if self.base is None:
            if len(self.history) == self.baseline_steps:
                self.base = fmean(v for _, v in self.history)
            return
        if value <= self.ratio * self.base:
            return
        early = f"steps {self.history[0][0]}-{self.history[self.baseline_steps - 1][0]}"
        self.tripped = (
            f"the policy's {self.metric} on its completions rose to {value:.4g} at step {step}, {value / self.base:.2f} "
            f"times its level over {early} ({self.base:.4g}; limit {self.ratio:g}x): "
            f"updates are breaking the policy. Training stopped; go on from a checkpoint saved before step {step} "
            "with a lower learning rate, or raise the guard's ratio if the rise is expected."
        )
        log.error("entropy-guard stopped training: %s", self.tripped)
        stop_training(state, control, "entropy-guard", self.tripped)
