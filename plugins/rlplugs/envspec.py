"""The EnvSpec contract: everything a trainer adapter needs to know about one environment.

An environment plugin returns an :class:`EnvSpec` from its registered factory. Adapters (TRL,
verifiers v1, the eval and SFT commands) read only this object, so an environment never imports a
trainer and a trainer adapter never names an environment.

Two ways to play, one way to score:

- **single-turn** (``episodes is None``): the dataset's ``prompt`` is sent once and the reward
  components score each completion;
- **multi-turn** (``episodes`` set): ``episodes(row)`` starts an :class:`~rlplugs.episode.Episode`
  that the adapter plays with the policy; components score the finished episode
  (``Sample.episode``).

Either way the reward is the list of components, scored by :func:`rlplugs.rewards.score_components`
(per sample, per group, or one call per batch for components that share a batch function).

``preflight()`` computes every reward component on real samples the environment supplies and
fails naming each component that cannot compute (and the env option that switches it off, where
the env declares one in ``component_switches``), so a reward that never computes stops a run
before step 0 instead of training on a constant.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from rlplugs.config import StrictConfig
from rlplugs.episode import EpisodeFactory, Policy
from rlplugs.errors import UnknownNameError, repeated
from rlplugs.rewards import RewardComponent, Sample, Score, UnscoredLedger, run_sync, score_components


#: The bounds of the sampling settings, wherever a config takes them: an evaluation protocol,
#: every command's policy (:class:`~rlplugs.HFPolicy`), guidance's candidates.
Temperature = Annotated[float, Field(ge=0)]
TopP = Annotated[float, Field(gt=0, le=1)]


class Sampling(StrictConfig):
    """How a policy samples its replies."""

    temperature: Temperature = Field(0.6, description="0: greedy")
    top_p: TopP = 1.0
    max_new_tokens: int = Field(1024, ge=1)


class EvalProtocol(Sampling):
    """How an environment is evaluated (the model card's protocol)."""

    splits: tuple[str, ...] = ("validation",)
    rows: int = Field(16, ge=1, description="rows per split")
    samples_per_row: int = Field(4, ge=1)
    enable_thinking: bool = False
    report_by: tuple[str, ...] = Field((), description="row columns to break results down by (e.g. family)")
    success_component: str | None = Field(None, description="component whose mean is the headline success rate")


class PreflightError(RuntimeError):
    """At least one reward component could not compute on a real sample."""


@dataclass
class EnvSpec:
    """One environment, as trainers and tools see it.

    ``name`` is not the env's to write: :func:`rlplugs.make_env` sets it to the name the
    :class:`~rlplugs.Registration` gives (so the two cannot disagree); a spec built by calling a
    factory directly has no name unless the caller gives one.
    """

    description: str
    datasets: dict[str, Callable[[], Any]]
    components: list[RewardComponent]
    preflight_samples: Callable[[], list[Sample]]
    name: str = ""
    episodes: EpisodeFactory | None = None
    eval: EvalProtocol = field(default_factory=EvalProtocol)
    # What the environment recommends to the TRL adapter, in TRL's option names (the only adapter
    # that reads them; prime-rl configs are the user's). Applied beneath the user's YAML and
    # command line, and checked before launch: a name no rlplugs TRL command has is an error.
    # trainer_defaults: GRPOConfig/SFTConfig options (num_generations, temperature, ...), chat-template
    # options as chat_template_kwargs={"enable_thinking": ...}, episode limits as max_episode_turns.
    trainer_defaults: dict[str, Any] = field(default_factory=dict)
    # model_defaults: TRL ModelConfig options (lora_target_modules, lora_r, dtype, ...).
    model_defaults: dict[str, Any] = field(default_factory=dict)
    sft_datasets: dict[str, Callable[[], Any]] = field(default_factory=dict)
    reference_policy: Policy | None = None
    render: Callable[[Sample, Any], list[Any]] | None = None  # (sample, out_dir) -> written files
    #: component name -> the env options (name: value) that switch it off, for preflight's message
    component_switches: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if dupes := repeated([c.name for c in self.components]):
            raise ValueError(f"env '{self.name}': duplicate reward components {dupes}")
        if not self.components:
            raise ValueError(f"env '{self.name}' declares no reward components")

    @property
    def multi_turn(self) -> bool:
        return self.episodes is not None

    @property
    def weights(self) -> dict[str, float]:
        return {c.name: c.weight for c in self.components}

    def check_split(self, split: str) -> str:
        """``split`` if the env has it, else an error naming the splits it has."""
        if split not in self.datasets:
            raise UnknownNameError(f"env '{self.name}' has no split '{split}'; splits: {', '.join(self.datasets)}")
        return split

    def dataset(self, split: str):
        """The dataset of ``split`` (built on demand)."""
        return self.datasets[self.check_split(split)]()

    def sft_dataset_name(self, name: str | None = None) -> str:
        """``name``, or the first SFT dataset when None; an error naming the choices otherwise."""
        if not self.sft_datasets:
            raise UnknownNameError(f"env '{self.name}' has no SFT dataset")
        name = name or next(iter(self.sft_datasets))
        if name not in self.sft_datasets:
            raise UnknownNameError(f"env '{self.name}' has no SFT dataset '{name}'; choose from {', '.join(self.sft_datasets)}")
        return name

    def sft_dataset(self, name: str | None = None):
        return self.sft_datasets[self.sft_dataset_name(name)]()

    def with_components(self, extra: Sequence[RewardComponent]) -> EnvSpec:
        """A copy with more components (e.g. registered ones named on the command line)."""
        from dataclasses import replace

        return replace(self, components=[*self.components, *extra])

    async def ascore(self, samples: Sequence[Sample], ledger: UnscoredLedger | None = None) -> list[dict[str, Score]]:
        """Score samples with every component (a stopped episode's sample is unscored with its reason)."""
        return await score_components(self.components, samples, ledger)

    def score(self, samples: Sequence[Sample], ledger: UnscoredLedger | None = None) -> list[dict[str, Score]]:
        return run_sync(self.ascore(samples, ledger))

    def preflight(self) -> dict[str, Any]:
        """Compute every component on the environment's real samples; raise naming dead ones."""
        samples = self.preflight_samples()
        if not samples:
            raise PreflightError(f"env '{self.name}' supplied no preflight samples")
        results = self.score(samples)
        report: dict[str, Any] = {}
        dead, remedies = [], []
        for c in self.components:
            got = [r.get(c.name) for r in results]
            scored = [s.value for s in got if s is not None and s.scored]
            reasons = sorted({s.reason for s in got if s is not None and not s.scored and s.reason})
            report[c.name] = {"scored": len(scored), "of": len(samples), "values": scored, "reasons": reasons}
            if not scored:
                dead.append(f"'{c.name}' ({'; '.join(reasons) or 'no value'})")
                remedies.append(self._remedy(c.name))
        if dead:
            raise PreflightError(
                f"env '{self.name}': reward component{'s' if len(dead) > 1 else ''} {', '.join(dead)} "
                f"could not compute on any of {len(samples)} real samples. Training would optimise a constant; "
                f"before step 0, {'; '.join(remedies)}."
            )
        return report

    def _remedy(self, component: str) -> str:
        """What a user does about a dead component: the env options that switch it off, if any."""
        switch = self.component_switches.get(component)
        if not switch:
            return (f"fix '{component}' (it has no switch; a component added with extra_rewards is switched off "
                    "by leaving it out)")
        as_json = json.dumps(switch)
        as_yaml = ", ".join(f"{k}: {json.dumps(v)}" for k, v in switch.items())
        return f"fix '{component}' or switch it off with --env_args '{as_json}' (YAML: env_args: {{{as_yaml}}})"
