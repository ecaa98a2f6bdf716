"""Truncation monitor: the share of completions clipped at the completion limit, per environment.

Why: a policy that learns to ramble hits ``max_completion_length`` more and more often; clipped
completions usually score low or are masked out, so the reward curve sags for a reason the reward
curve cannot show. A run seen in practice went from 1.6% clipped to 38% without anyone noticing.
TRL computes the share each step (``completions/clipped_ratio``: the last token is neither EOS nor
padding); this callback reads it from every log entry, keeps a per-environment history in
``<output_dir>/rlplugs_truncation.jsonl`` and warns, naming the rise, when it crosses a threshold.
Log every step (``logging_steps=1``) to see every step.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import TrainerCallback

log = logging.getLogger(__name__)

TRUNCATION_FILE = "rlplugs_truncation.jsonl"


class TruncationMonitor(TrainerCallback):
    def __init__(self, env: str, threshold: float = 0.1, metric: str = "completions/clipped_ratio"):
        self.env = env
        self.threshold = threshold
        self.metric = metric
        self.history: list[tuple[int, float]] = []  # (step, clipped share)
        self.warnings: list[str] = []
        self._above = False

    def on_train_begin(self, args, state, control, **kwargs):
        if args.logging_steps != 1:
            log.warning("truncation[%s]: logging_steps=%s, so the clipped share is seen only at logged steps; "
                        "set logging_steps=1 to see every step", self.env, args.logging_steps)  # fmt: skip

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or logs.get(self.metric) is None or not state.is_world_process_zero:  # None: no valid value
            return
        share = float(logs[self.metric])
        step = state.global_step
        self.history.append((step, share))
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
        with (Path(args.output_dir) / TRUNCATION_FILE).open("a") as f:
            f.write(json.dumps({"step": step, "env": self.env, "clipped_ratio": share}) + "\n")
        log.info("truncation[%s] step %d: %.1f%% of completions clipped", self.env, step, 100 * share)
        above = share > self.threshold
        if above and not self._above:
            first_step, first = self.history[0]
            msg = (
                f"truncation[{self.env}]: {100 * share:.1f}% of completions were clipped at the completion limit at "
                f"step {step} (threshold {100 * self.threshold:.1f}%; {100 * first:.1f}% at step {first_step}). "
                "Clipped completions score low or are masked; raise max_completion_length, penalise length, or "
                "check for repetition loops."
            )
            self.warnings.append(msg)
            log.warning(msg)
        self._above = above
