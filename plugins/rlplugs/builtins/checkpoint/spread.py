"""No-spread stop: end a GRPO run once its rollouts leave it nothing to learn from.

Why: GRPO learns from the spread of rewards inside each group. When every group of a generation
batch scores alike, every advantage is 0 and the update learns nothing from the rewards (with
``filter_zero_spread_groups`` the trainer leaves every row out and skips its optimizer step); an
unchanged policy then draws the next batch from the same distribution. Session 36's
factorio-build run (SmolLM2-135M, top_p 0.9, ``benchmarks/results/factorio_repro_topp09_seed2.json``)
drew one program 512 times in each of its last three batches: 12 of its 20 updates learned nothing and took 284 of its 568 s.
One such batch is not taken as proof: the next is drawn with new random numbers and may differ.

The stop reads TRL's ``frac_reward_zero_std`` (the share of a generation batch's groups without
spread, logged at the step that drew the batch) and stops after ``batches`` consecutive batches at
1.0, with the reason in the run's segments. With ``logging_steps`` above 1 an entry averages the
batches since the last one, so the stop can only come later, never earlier.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

from rlplugs.builtins.checkpoint.segments import stop_training

log = logging.getLogger(__name__)


class NoSpreadStop(TrainerCallback):
    """Stops training after ``batches`` generation batches in a row without reward spread in any
    group (defaults: ``NoSpreadConfig``)."""

    def __init__(self, batches: int, metric: str):
        self.batches = batches
        self.metric = metric
        self.without_spread: list[int] = []  # steps of the latest batches in a row without spread
        self.tripped: str | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or logs.get(self.metric) is None or self.tripped:  # absent: no batch drawn at this step
            return
        if float(logs[self.metric]) < 1.0:
            self.without_spread = []
            return
        self.without_spread.append(state.global_step)
        if len(self.without_spread) < self.batches:
            return
        steps = ", ".join(map(str, self.without_spread))
        self.tripped = (
            f"no group had reward spread in the generation batches logged at steps {steps} "
            f"({self.metric} 1.0 in {self.batches} log entries in a row): every advantage is 0, so the updates "
            "learn nothing from the rewards. Training stopped; to go on, sample more widely (temperature, "
            "top_p) or train on rows the policy does not yet solve."
        )
        log.warning("no-spread-stop stopped training: %s", self.tripped)
        stop_training(state, control, "no-spread-stop", self.tripped)
