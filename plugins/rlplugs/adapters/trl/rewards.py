"""An EnvSpec's reward components as TRL reward functions.

TRL logs ``rewards/<function name>/mean`` per reward function and weights them with
``GRPOConfig.reward_weights``, so each component becomes its own function named after it. The
environment, though, may score a batch in one call (a simulator run scores several components at
once: ``RewardComponent.from_batch``), so all functions share one scoring call per batch: the first
function TRL calls scores the batch with :func:`rlplugs.rewards.score_components` and caches the
result; the others read from the cache.

Unscored values (``Score(None, reason)``) are returned as ``None``, which TRL turns into NaN and
excludes; their share is logged as ``unscored/<component>`` and the reasons go to the completions
table (``unscored_reason/<component>``) and the log.

Group components (``RewardComponent.group``) must see every completion of a prompt. TRL repeats
each prompt ``num_generations`` times contiguously in the *global* batch and may split a group
over processes, so group components are scored on the gathered batch and each process keeps its
own slice.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from rlplugs.envspec import EnvSpec
from rlplugs.rewards import RewardComponent, Sample, Score, UnscoredLedger, run_sync, score_components

log = logging.getLogger(__name__)

# Keyword arguments TRL passes to reward functions that are not dataset columns.
_TRL_KWARGS = {"trainer_state", "log_extra", "log_metric", "environments", "episode"}


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        content = message.get("content", "")
        if isinstance(content, list):  # typed content blocks
            content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
        parts.append(content or "")
    return "".join(parts)


class EnvRewardFunctions:
    """One TRL reward function per component of ``spec``, sharing one scoring call per batch.

    ``bind(trainer)`` (done by :class:`rlplugs.adapters.trl.trainer.EnvGRPOTrainer`) tells the functions
    the process layout and group size; unbound, they score as a single process.
    """

    def __init__(self, spec: EnvSpec):
        self.spec = spec
        self.ledger = UnscoredLedger()
        self.trainer = None
        self._cache_key: Any = None
        self._cache: list[dict[str, Score]] = []
        self.functions = [self._function_for(c) for c in spec.components]

    @property
    def weights(self) -> list[float]:
        return [c.weight for c in self.spec.components]

    def bind(self, trainer) -> None:
        self.trainer = trainer

    def _function_for(self, component: RewardComponent):
        def reward(prompts, completions, completion_ids, **kwargs) -> list[float | None]:
            scores = self.score_batch(prompts, completions, completion_ids, kwargs)
            mine = [s[component.name] for s in scores]
            log_metric = kwargs.get("log_metric")
            unscored = [s for s in mine if not s.scored]
            if log_metric is not None:
                log_metric(f"unscored/{component.name}", len(unscored) / max(len(mine), 1))
            log_extra = kwargs.get("log_extra")
            if log_extra is not None:
                log_extra(f"unscored_reason/{component.name}", [None if s.scored else s.reason for s in mine])
            if unscored:
                reasons = Counter(s.reason for s in unscored).most_common(3)
                log.warning("reward %s: %d of %d unscored (%s)", component.name, len(unscored), len(mine), reasons)
            return [s.value for s in mine]

        reward.__name__ = component.name
        reward.__qualname__ = component.name
        reward.bind = self.bind  # EnvGRPOTrainer binds every reward function that has this
        return reward

    def score_batch(self, prompts, completions, completion_ids, kwargs: dict[str, Any]) -> list[dict[str, Score]]:
        """Scores of every component for this batch, computed once per batch."""
        key = (id(completion_ids), tuple(tuple(ids) for ids in completion_ids))
        if key != self._cache_key:
            self._cache = self._score(self._samples(prompts, completions, kwargs))
            self._cache_key = key
        return self._cache

    def _samples(self, prompts, completions, kwargs: dict[str, Any]) -> list[Sample]:
        columns = {k: v for k, v in kwargs.items() if k not in _TRL_KWARGS}
        episodes = kwargs.get("episode") or [None] * len(prompts)
        offset, group_size = self._layout(len(prompts))
        return [
            Sample(
                prompt=prompt,
                completion=completion_text(completion),
                row={k: v[i] for k, v in columns.items()},
                episode=episodes[i],
                group=(offset + i) // group_size,
            )
            for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
        ]

    def _layout(self, local_size: int) -> tuple[int, int]:
        """(global index of this process's first row, group size)."""
        if self.trainer is None:
            return 0, local_size
        t = self.trainer
        group_size = t.num_generations if t.model.training else t.num_generations_eval
        return t.accelerator.process_index * local_size, group_size

    def _score(self, samples: list[Sample]) -> list[dict[str, Score]]:
        group_components = [c for c in self.spec.components if c.group]
        local = [c for c in self.spec.components if not c.group]
        results: list[dict[str, Score]] = [{} for _ in samples]
        if local:
            results = run_sync(score_components(local, samples, self.ledger))
        if group_components:
            for mine, scored in zip(results, self._score_groups(group_components, samples)):
                mine.update(scored)
        return results

    def _score_groups(self, components: list[RewardComponent], samples: list[Sample]) -> list[dict[str, Score]]:
        """Score group components on the whole (gathered) batch; return this process's rows."""
        if self.trainer is None or self.trainer.accelerator.num_processes == 1:
            return run_sync(score_components(components, samples, self.ledger))
        from accelerate.utils import gather_object

        everyone = gather_object(samples)
        start = self.trainer.accelerator.process_index * len(samples)
        # Every process scores the gathered batch (same inputs, same order), so no second exchange
        # is needed; only this process's rows are recorded in its ledger.
        scored = run_sync(score_components(components, everyone))
        mine = scored[start : start + len(samples)]
        for row in mine:
            for name, score in row.items():
                self.ledger.record(name, score)
        return mine
