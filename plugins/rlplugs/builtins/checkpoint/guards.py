"""bf16 no-op-update guard: stop a run whose optimizer steps round away to nothing.

Why: with parameters stored in bf16 (8 significant bits) and no fp32 master copy, an update is
lost whenever it is smaller than half the spacing between neighbouring bf16 values: at a weight of
0.02 that spacing is about 1.2e-4, so AdamW at lr 1e-6 (updates of about 1e-6) changes almost
nothing, while the loss, gradients and LR all look healthy. Such a run burns its whole budget
training nothing. The guard measures, over the first optimizer steps, the share of parameter
elements with a non-zero gradient whose value actually changed, and stops training with the
cause and the fix when that share is tiny.

Cost: a fixed strided sample of each trainable tensor (``sample_per_tensor`` elements) is copied
before each checked step; after ``check_steps`` steps the guard is inert.
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback

from rlplugs.builtins.checkpoint.segments import stop_training

log = logging.getLogger(__name__)


class NoOpUpdateGuard(TrainerCallback):
    """Stops training when updates round away (see module docstring)."""

    def __init__(self, check_steps: int = 3, min_changed_fraction: float = 0.1, sample_per_tensor: int = 4096):
        self.check_steps = check_steps
        self.min_changed_fraction = min_changed_fraction
        self.sample_per_tensor = sample_per_tensor
        self.eligible = 0  # sampled elements that had a non-zero gradient and a non-zero lr
        self.changed = 0  # ... of which the optimizer step changed the stored value
        self.steps_checked = 0
        self._before: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (param, idx, old values)
        self._lr = 0.0
        self.tripped: str | None = None

    @property
    def changed_fraction(self) -> float | None:
        return self.changed / self.eligible if self.eligible else None

    def _sample(self, p: torch.Tensor) -> torch.Tensor:
        n = p.numel()
        return torch.linspace(0, n - 1, min(n, self.sample_per_tensor), device=p.device).long()

    def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.steps_checked >= self.check_steps or model is None:
            return
        self._lr = max(g["lr"] for g in getattr(optimizer, "optimizer", optimizer).param_groups)
        self._before = []
        for p in model.parameters():
            if p.requires_grad and p.grad is not None:
                idx = self._sample(p)
                has_grad = p.grad.detach().reshape(-1)[idx] != 0
                self._before.append((p, idx[has_grad], p.detach().reshape(-1)[idx[has_grad]].clone()))

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.steps_checked >= self.check_steps or not self._before:
            return
        if self._lr > 0:
            for p, idx, old in self._before:
                self.eligible += idx.numel()
                self.changed += int((p.detach().reshape(-1)[idx] != old).sum())
        self.steps_checked += 1
        if self.steps_checked == self.check_steps:
            self._judge(state, control)
        self._before = []

    def _judge(self, state, control) -> None:
        frac = self.changed_fraction
        if frac is None:
            log.warning("bf16-noop-guard: no sampled parameter had a non-zero gradient and lr > 0; cannot judge")
            return
        log.info(
            "bf16-noop-guard: %.1f%% of updated parameter elements changed over %d steps",
            100 * frac,
            self.steps_checked,
        )
        if frac >= self.min_changed_fraction:
            return
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p, _, _ in self._before})
        spacing = _typical_spacing([(p, idx) for p, idx, _ in self._before])
        self.tripped = (
            f"only {100 * frac:.2f}% of parameter elements with a non-zero gradient changed over the first "
            f"{self.steps_checked} optimizer steps (lr={self._lr:g}, parameters {'/'.join(dtypes)}). The updates are "
            f"smaller than the dtype's spacing (about {spacing:.1e} at the median |weight|) and round away: training "
            "is a no-op. Fix: keep fp32 master weights and optimizer state (load the model in float32, e.g. TRL "
            "--dtype float32, and let --bf16 autocast the compute), or use a learning rate well above that spacing."
        )
        log.error("bf16-noop-guard stopped training: %s", self.tripped)
        stop_training(state, control, "bf16-noop-guard", self.tripped)


def _typical_spacing(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """The gap between neighbouring representable values at the median sampled |weight|."""
    values = [p.detach().reshape(-1)[idx].abs().float() for p, idx in samples if idx.numel()]
    if not values:
        return float("nan")
    median = torch.cat(values).median().item()
    dtype = samples[0][0].dtype
    return median * torch.finfo(dtype).eps
