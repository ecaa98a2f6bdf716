"""Registers the checkpoint fixups and training guards, and the ``rlplugs ckpt`` command.

Each registration builds a :class:`Fixup`: a summary plus, where the tool applies to TRL, a
``trainer_callback(training_args, env_spec=None)`` that returns a ``transformers.TrainerCallback``.
The TRL adapter attaches them by name (``--fixups bf16-noop-guard truncation-monitor``). Tools that
act on checkpoints on disk (for prime-rl, which has no hooks) are ``rlplugs ckpt ...`` commands.
Nothing heavy is imported until a fixup is used, so ``rlplugs list`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from rlplugs import Registration, StrictConfig, hookimpl


@dataclass(frozen=True)
class Fixup:
    """What a checkpoint-fixup factory returns."""

    name: str
    summary: str
    make_callback: Callable[[Any, Any], Any] | None = None  # (training_args, env_spec) -> TrainerCallback
    command: str | None = None  # the ``rlplugs ckpt`` command, for tools that work on disk

    def trainer_callback(self, training_args: Any, env_spec: Any = None):
        if self.make_callback is None:
            raise TypeError(
                f"'{self.name}' works on checkpoints on disk and has no trainer callback; run `{self.command}`"
            )
        return self.make_callback(training_args, env_spec)


class FixDtypeConfig(StrictConfig):
    dtype: Literal["bfloat16", "float16", "float32"] = Field("bfloat16", description="dtype of the final export")
    subdir: str | None = Field(None, description="export folder under output_dir (default export-<dtype>)")


class NoOpGuardConfig(StrictConfig):
    check_steps: int = Field(3, ge=1, description="optimizer steps measured before judging")
    min_changed_fraction: float = Field(0.1, gt=0, le=1, description="stop below this share of changed elements")
    sample_per_tensor: int = Field(4096, ge=1, description="elements sampled per trainable tensor")


class EntropyGuardConfig(StrictConfig):
    ratio: float = Field(1.6, gt=1, description="stop when the metric exceeds this many times its early level")
    baseline_steps: int = Field(1, ge=1, description="log entries whose mean is the early level")
    metric: str = Field("entropy", description="logged metric holding the policy's mean token entropy")


class NoSpreadConfig(StrictConfig):
    batches: int = Field(2, ge=1, description="stop after this many log entries in a row without spread (one batch each at logging_steps 1)")
    metric: str = Field("frac_reward_zero_std", description="logged share of a batch's groups without spread")


class TruncationConfig(StrictConfig):
    threshold: float = Field(0.1, ge=0, le=1, description="warn when the clipped share rises above this")
    metric: str = Field("completions/clipped_ratio", description="logged metric holding the clipped share")


#: One line per tool, shown by ``rlplugs list`` and carried by the built :class:`Fixup`.
SUMMARIES = {
    "fix-dtype": "rewrite config dtype labels and cast safetensors shards (CLI; callback: final export)",
    "fresh-optimizer-resume": "resume from weights with a fresh optimizer, keeping step, LR schedule, RNG, data order",
    "repair-optimizer": "add missing optimizer state to a DCP checkpoint so a strict load succeeds (prime-rl)",
    "segments": "record training segments (start/end step, why it ended, optimizer carried)",
    "bf16-noop-guard": "stop a run whose optimizer updates round away in bf16",
    "entropy-guard": f"stop a GRPO run whose policy entropy on its completions rises past "
    f"{EntropyGuardConfig.model_fields['ratio'].default:g}x its first step's",
    "no-spread-stop": f"stop a GRPO run after {NoSpreadConfig.model_fields['batches'].default} generation batches "
    "in a row in which no group had reward spread",
    "truncation-monitor": "per-env share of completions clipped at the limit, warned above a threshold",
}


def _fix_dtype(cfg: FixDtypeConfig) -> Fixup:
    def make(training_args, env_spec):
        from rlplugs.builtins.checkpoint.export import DtypeExportCallback

        return DtypeExportCallback(cfg.dtype, cfg.subdir)

    return Fixup("fix-dtype", SUMMARIES["fix-dtype"], make, "rlplugs ckpt fix-dtype DIR")


def _fresh_optimizer_resume() -> Fixup:
    def make(training_args, env_spec):
        from rlplugs.builtins.checkpoint.resume import FreshOptimizerCallback

        return FreshOptimizerCallback()

    name = "fresh-optimizer-resume"
    return Fixup(name, SUMMARIES[name], make, "rlplugs ckpt strip-optimizer CHECKPOINT")


def _repair_optimizer() -> Fixup:
    name = "repair-optimizer"
    return Fixup(name, SUMMARIES[name], command="rlplugs ckpt repair-optimizer STEP_DIR")


def _segments() -> Fixup:
    def make(training_args, env_spec):
        from rlplugs.builtins.checkpoint.segments import SegmentCallback

        return SegmentCallback()

    return Fixup("segments", SUMMARIES["segments"], make, "rlplugs ckpt segments RUN_DIR")


def _noop_guard(cfg: NoOpGuardConfig) -> Fixup:
    def make(training_args, env_spec):
        from rlplugs.builtins.checkpoint.guards import NoOpUpdateGuard

        return NoOpUpdateGuard(cfg.check_steps, cfg.min_changed_fraction, cfg.sample_per_tensor)

    return Fixup("bf16-noop-guard", SUMMARIES["bf16-noop-guard"], make)


def _entropy_guard(cfg: EntropyGuardConfig) -> Fixup:
    def make(training_args, env_spec):
        from rlplugs.builtins.checkpoint.entropy import EntropyGuard

        return EntropyGuard(cfg.ratio, cfg.baseline_steps, cfg.metric)

    return Fixup("entropy-guard", SUMMARIES["entropy-guard"], make)


def _no_spread_stop(cfg: NoSpreadConfig) -> Fixup:
    def make(training_args, env_spec):
        from rlplugs.builtins.checkpoint.spread import NoSpreadStop

        return NoSpreadStop(cfg.batches, cfg.metric)

    return Fixup("no-spread-stop", SUMMARIES["no-spread-stop"], make)


def _truncation_monitor(cfg: TruncationConfig) -> Fixup:
    def make(training_args, env_spec):
        from rlplugs.builtins.checkpoint.truncation import TruncationMonitor

        return TruncationMonitor(getattr(env_spec, "name", None) or "default", cfg.threshold, cfg.metric)

    return Fixup("truncation-monitor", SUMMARIES["truncation-monitor"], make)


_FACTORIES: dict[str, tuple[Callable[..., Fixup], type | None]] = {
    "fix-dtype": (_fix_dtype, FixDtypeConfig),
    "fresh-optimizer-resume": (_fresh_optimizer_resume, None),
    "repair-optimizer": (_repair_optimizer, None),
    "segments": (_segments, None),
    "bf16-noop-guard": (_noop_guard, NoOpGuardConfig),
    "entropy-guard": (_entropy_guard, EntropyGuardConfig),
    "no-spread-stop": (_no_spread_stop, NoSpreadConfig),
    "truncation-monitor": (_truncation_monitor, TruncationConfig),
}


@hookimpl
def rlplugs_register_checkpoint_fixups() -> list[Registration]:
    return [Registration(name, factory, SUMMARIES[name], config) for name, (factory, config) in _FACTORIES.items()]


@hookimpl
def rlplugs_add_cli_commands(subparsers) -> None:
    from rlplugs.builtins.checkpoint.cli import add_ckpt_command

    add_ckpt_command(subparsers)
