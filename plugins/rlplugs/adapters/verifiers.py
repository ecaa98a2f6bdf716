"""verifiers v1 classes built from an :class:`~rlplugs.envspec.EnvSpec` (prime-rl and ``vf-eval``).

verifiers finds a taskset by importing the module named after its id (``factorio-build`` ->
``factorio_build``) and taking the one ``Taskset`` subclass in its ``__all__`` (plus an ``Env``
and a ``Harness`` if exported). An rlplugs environment package serves those names lazily, so
importing it never needs verifiers (installed only with the ``verifiers`` extra)::

    __all__ = ["FactorioBuildTaskset", "FactorioBuildHarness"]   # + "FactorioBuildEnv" if multi-turn

    def __getattr__(name):  # verifiers classes are built on first use
        from rlplugs.adapters.verifiers import verifiers_export
        return verifiers_export("factorio-build", name)

What the classes do:

- **Taskset** (``<Name>Taskset``): its config is ``vf.TasksetConfig`` plus the env's own options
  and ``split``, so ``[env.taskset] id = "factorio-build", rows = 64, split = "train"`` in TOML
  validates against the env's StrictConfig. Each dataset row becomes one task; the row rides on
  the task data (with the env options) so an env-server rebuilds scoring from the wire alone.
- **Task**: one ``async @vf.reward`` method per (non-group) reward component of a single-turn
  env, named after it and weighted by its weight. All components are computed once per trace
  through :meth:`EnvSpec.ascore <rlplugs.envspec.EnvSpec.ascore>`. ``[env.taskset.task.rewards]
  brevity = { weight = 0.1 }`` reweights any component from TOML: verifiers applies it to a
  method, the Env to what it records itself (group components, and every component of a
  multi-turn env, scored once the episode is over: :func:`reward_weights`). A name that is no
  component and plugs no ``fn`` is refused when the config is read, with the closest names.
- **Env** (``<Name>Env``): multi-turn envs, and single-turn envs with group components. Seats
  are agents: ``agent`` plays every trained seat (self-play when all seats are trained),
  ``opponent`` the others (its traces are not trainable). Each seat's trace is named after the
  seat (``trace.agent.name``, what prime-rl's RAE keys its baselines by), except the one
  ``player`` seat of single-agent envs, which keeps the agent's name. ``n`` sibling attempts per episode
  (BestOfN-style) let group components (diversity, ...) compare siblings; with prime-rl's
  ``group_size = 1`` the siblings are the GRPO group.
- **Harness** (``<Name>Harness``): verifiers' ``null`` chat loop, started with this Python when
  the runtime is the local ``subprocess`` one and the chat program's packages are installed
  here, instead of bootstrapping ``uv`` and downloading them; remote runtimes behave as ``null``.

**Unscored rewards.** verifiers v1 reads ``trace.rewards[name] = None`` as "scoring didn't
run" and sums only the recorded rewards, and a reward method that raises fails the whole trace
(``task_error``, excluded from training). rlplugs maps its rule onto that: an unscored component
stays ``None`` on the trace with its reason in ``trace.info["unscored"]`` (the other components
still count, as TRL's NaN-excluding sum does), a scored one's reason, where its scorer gave one
(an abort's), goes to ``trace.info["reasons"]``, and a trace on which no component with a nonzero weight
could be scored is an errored trace (``trace.record_error``) rather than a reward of 0. Episodes
are played guarded (:func:`rlplugs.episode.guard`): an environment error in ``step``, a seat cut
off by its turn or token limit, or the ``max_turns`` cap stops that sibling attempt alone, and
its traces error with the reason while the other siblings are scored. A row whose episode cannot
start at all errors its verifiers episode with the reason (there is no trace to score).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import importlib.util
import json
import sys
import types
from collections.abc import Iterator
from typing import Any, ClassVar, Literal, get_origin

import verifiers.v1 as vf
from pydantic import BaseModel, Field, create_model, model_validator
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

from rlplugs.envspec import EnvSpec
from rlplugs.episode import GuardedEpisode, last_reply, start_episode, stop_reason
from rlplugs.config import field_kinds, nested_model, unknown_keys, unknown_options_message, validate_options
from rlplugs.errors import UsageError, did_you_mean
from rlplugs.registry import env_for_module, get_registry, make_env
from rlplugs.rewards import Sample, Score, Unscorable

# --- names and specs ------------------------------------------------------------------------


def class_prefix(env_name: str) -> str:
    """``factorio-build`` -> ``FactorioBuild`` (the prefix of every exported class name)."""
    return "".join(part.capitalize() for part in env_name.replace("_", "-").split("-") if part)


@functools.cache
def _spec(env_name: str, options_json: str) -> EnvSpec:
    return make_env(env_name, json.loads(options_json))


def spec_for(env_name: str, options: dict[str, Any]) -> EnvSpec:
    """The EnvSpec for these options, built once per process (scoring runs per trace)."""
    return _spec(env_name, json.dumps(options, sort_keys=True, default=str))


def split_system(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat messages as verifiers wants them: system text apart, the rest as the prompt."""
    system = "\n\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    rest = [m for m in messages if m.get("role") != "system"]
    return (system or None), rest


class RowData(vf.TaskData):
    """One dataset row, with what rebuilds its EnvSpec on any worker."""

    env: str
    split: str
    env_options: dict[str, Any] = Field(default_factory=dict)
    row: dict[str, Any] = Field(default_factory=dict)


def _sample(data: RowData, completion: str, episode: Any = None, group: int | None = None, seat: str | None = None) -> Sample:
    row = dict(data.row) if seat is None else {**data.row, "seat": seat}
    return Sample(prompt=data.row.get("prompt"), completion=completion, row=row, episode=episode, group=group)


def reward_weights(spec: EnvSpec, config: vf.TaskConfig) -> dict[str, float]:
    """The components' weights with the run's ``[env.taskset.task.rewards] NAME = { weight = W }``
    applied: verifiers applies it to a task's reward methods, this to the rewards the Env records."""
    changed = {name: entry.weight for name, entry in config.rewards.items() if name in spec.weights and entry.weight is not None}
    return {**spec.weights, **changed}


def record_scores(trace: vf.Trace, scores: dict[str, Score], weights: dict[str, float]) -> None:
    """Put one sample's component scores on its trace; unscored ones stay ``None`` with a reason."""
    for name, score in scores.items():
        if score.scored:
            trace.record_reward(name, score.value, weights.get(name, 1.0))
        else:
            trace.rewards[name] = None
            trace.info.setdefault("unscored", {})[name] = score.reason
    record_reasons(trace, scores)


def record_reasons(trace: vf.Trace, scores: dict[str, Score]) -> None:
    """Why a scored component scored what it did, where the scorer said (an abort's reason behind a
    0), in ``trace.info["reasons"]``: what a TRL run logs and an evaluation report shows."""
    for name, score in scores.items():
        if score.scored and score.reason:
            trace.info.setdefault("reasons", {})[name] = score.reason


def _without_reward(trace: vf.Trace, env_name: str, weights: dict[str, float]) -> Unscorable | None:
    """The error for a trace on which no component with a nonzero weight was scored (weight-0
    metrics are reported, not rewarded); ``None`` when the trace has a reward."""
    if any(r is not None and weights.get(name) for name, r in trace.rewards.items()):
        return None
    by_reason: dict[str, list[str]] = {}
    for name, reason in trace.info.get("unscored", {}).items():
        by_reason.setdefault(str(reason), []).append(name)
    reasons = "; ".join(f"{reason} ({', '.join(names)})" for reason, names in by_reason.items())
    return Unscorable(f"env '{env_name}': no weighted reward component could be scored: {reasons}")


def _error_without_reward(trace: vf.Trace, env_name: str, weights: dict[str, float]) -> None:
    """Error this trace alone when it has no reward (its siblings in the episode stay scored)."""
    error = _without_reward(trace, env_name, weights)
    if error is not None:
        trace.record_error(error)


# --- task -----------------------------------------------------------------------------------


class RowTask(vf.Task[RowData, vf.State, vf.TaskConfig]):
    """Scores a single-turn completion with the env's components (see module doc)."""

    _scores: dict[str, dict[str, Score]]
    #: components the Env records (no reward method): a TOML weight for one is the Env's to apply
    RECORDED_BY_ENV: ClassVar[frozenset[str]] = frozenset()

    def hooks(self, attr: str) -> list[Any]:
        """verifiers' hooks, less the reweighting entries of components the Env records (verifiers
        would look for a reward method of that name and fail every trace)."""
        rewards = self.config.rewards
        kept = {name: entry for name, entry in rewards.items() if name not in self.RECORDED_BY_ENV}
        if attr != "reward" or len(kept) == len(rewards):
            return super().hooks(attr)
        view = copy.copy(self)
        view.config = self.config.model_copy(update={"rewards": kept})
        return vf.Task.hooks(view, attr)

    async def score(self, trace: vf.Trace, runtime: Any = None) -> None:
        data = self.data
        spec = spec_for(data.env, data.env_options)
        if spec.multi_turn:  # the env's run() scores whole episodes
            return await super().score(trace, runtime)
        cache = self.__dict__.setdefault("_scores", {})
        own = [c for c in spec.components if not c.group]
        scored = (await spec.ascore([_sample(data, trace.last_reply)]))[0] if own else {}
        cache[trace.id] = {c.name: scored[c.name] for c in own}  # group components: see EpisodeEnv.finalize
        try:
            await super().score(trace, runtime)  # the decorated/plugged rewards read the cache
        finally:
            scores = cache.pop(trace.id)
        weights = reward_weights(spec, self.config)
        record_scores(trace, {n: s for n, s in scores.items() if not s.scored}, weights)
        record_reasons(trace, scores)  # the scored ones' values came through the reward methods
        if own and not any(c.group for c in spec.components):
            error = _without_reward(trace, data.env, weights)
            if error is not None:
                raise error


def _component_reward(name: str, weight: float):
    async def reward(self: RowTask, trace: vf.Trace) -> float | dict:
        score = self._scores[trace.id][name]
        return score.value if score.scored else {}  # {} records nothing; score() marks it unscored

    reward.__name__ = reward.__qualname__ = name
    return vf.reward(reward, weight=weight)


def _task_class(env_name: str, spec: EnvSpec) -> type[RowTask]:
    methods = {} if spec.multi_turn else {c.name: _component_reward(c.name, c.weight) for c in spec.components if not c.group}
    recorded = frozenset(c.name for c in spec.components) - set(methods)
    return type(f"{class_prefix(env_name)}Task", (RowTask,), {"__module__": __name__, "RECORDED_BY_ENV": recorded, **methods})


# --- taskset --------------------------------------------------------------------------------


class EnvOptionsConfig(vf.TasksetConfig):
    """``vf.TasksetConfig`` plus an env's options: unknown keys fail with suggestions, and the
    options are checked by the env's own config (its validators too: a field's type alone took
    ``games = ["wordl"]``, which then failed as a traceback when the tasks loaded). A check that
    needs a service up (matrl's ``judge_url``) waits for the tasks' build."""

    ENV_NAME: ClassVar[str] = ""
    ENV_CONFIG: ClassVar[type[BaseModel] | None] = None
    OPTION_NAMES: ClassVar[dict[str, str]] = {}  # taskset config key -> env option name
    COMPONENTS: ClassVar[tuple[str, ...]] = ()  # the env's reward components
    MULTI_TURN: ClassVar[bool] = False
    RECORDED_BY_ENV: ClassVar[frozenset[str]] = frozenset()  # those without a task method

    def env_options(self) -> dict[str, Any]:
        values = self.model_dump(mode="json")
        return {option: values[key] for key, option in self.OPTION_NAMES.items()}

    @model_validator(mode="after")
    def _env_accepts_options(self) -> EnvOptionsConfig:
        if self.ENV_CONFIG is not None:
            typed = {option: key for key, option in self.OPTION_NAMES.items() if key != option}
            validate_options(self.ENV_CONFIG, self.env_options(), owner=self.ENV_NAME, parsing=True, keys=typed)
        return self

    @model_validator(mode="after")
    def _rewards_name_components(self) -> EnvOptionsConfig:
        """``task.rewards`` entries: a component's new weight, or a plugged ``fn`` under a new name
        (one of a component the Env records would be overwritten by it: refused)."""
        for name, entry in self.task.rewards.items():
            if name not in self.COMPONENTS and not entry.fn:
                raise ValueError(f"task.rewards: {did_you_mean([name], self.COMPONENTS)} is no reward component of "
                                 f"'{self.ENV_NAME}' and plugs no fn; components: {', '.join(self.COMPONENTS)}")  # fmt: skip
            if name in self.RECORDED_BY_ENV and entry.fn:
                raise ValueError(f"task.rewards.{name}: '{self.ENV_NAME}' records {name!r} once its episodes are scored, "
                                 f"so a plugged fn cannot replace it; plug yours under another name")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _system_prompt_is_used(self) -> EnvOptionsConfig:
        if self.MULTI_TURN and self.system_prompt is not None:  # the Env would play without it
            raise ValueError(f"system_prompt: '{self.ENV_NAME}' is multi-turn, and its episodes write each seat's "
                             "system prompt themselves (the game's rules); leave system_prompt unset")  # fmt: skip
        return self

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if found := unknown_keys(cls, data):
                raise ValueError(unknown_options_message(*found, owner="env.taskset"))
            return json_tuples(cls, data)
        return data


def json_tuples(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the JSON text given to a tuple field (of ``model`` or a model nested in it)
    parsed: verifiers' command line parses JSON only for list and dict fields and hands a tuple
    option its text, so ``vf-eval clembench-games --env.taskset.games '["wordle"]'`` failed."""
    parsed = dict(data)
    for name, value in data.items():
        annotation = model.model_fields[name].annotation if name in model.model_fields else None
        kinds, nested = field_kinds(annotation), nested_model(annotation)
        if isinstance(value, str) and any(get_origin(k) is tuple for k in kinds) and value.lstrip().startswith("["):
            try:
                parsed[name] = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{name}: {value!r} is not a JSON list ({exc}); e.g. '[\"a\", \"b\"]'") from None
        elif isinstance(value, dict) and nested is not None:
            parsed[name] = json_tuples(nested, value)
    return parsed


class RowTaskset(vf.Taskset):
    """Yields one task per dataset row of the configured split."""

    ENV_NAME: str = ""
    TASK_CLASS: type[RowTask] = RowTask

    def split(self, spec: EnvSpec) -> str:
        return spec.check_split(self.config.split or ("train" if "train" in spec.datasets else next(iter(spec.datasets))))

    def load(self) -> Iterator[RowTask]:
        options = self.config.env_options()
        try:
            spec = spec_for(self.ENV_NAME, options)
        except UsageError as exc:  # what only the build checks (a judge service that must answer): one line, not a traceback
            raise SystemExit(f"error: {exc}") from None
        split = self.split(spec)
        for i, row in enumerate(spec.dataset(split)):
            row = dict(row)
            system, prompt = split_system(list(row.get("prompt") or []))
            data = RowData(
                name=f"{self.ENV_NAME}/{split}#{i}", prompt=prompt or None, system_prompt=system,
                env=self.ENV_NAME, split=split, env_options=options, row=row,
            )
            yield self.TASK_CLASS(data, self.config.task)


@functools.cache
def taskset_class(env_name: str) -> type[vf.Taskset]:
    """The ``vf.Taskset`` subclass for registered env ``env_name`` (config = env options + split)."""
    registration = get_registry().get("environment", env_name)
    spec = make_env(env_name)
    prefix = class_prefix(env_name)
    env_fields: dict[str, Any] = {}
    option_names: dict[str, str] = {}
    if registration.config is not None:
        for name, field in registration.config.model_fields.items():
            # An option named like a verifiers taskset key (`task`, `id`, ...) is `env_<name>` here.
            key = f"env_{name}" if name in vf.TasksetConfig.model_fields or name == "split" else name
            option_names[key] = name
            env_fields[key] = (field.annotation, field)
    config = create_model(
        f"{prefix}TasksetConfig",
        __base__=EnvOptionsConfig,
        __module__=__name__,
        # the splits as a Literal: a wrong one fails in verifiers' config error, before any task loads
        split=(Literal[tuple(spec.datasets)] | None, Field(None, description="dataset split (default 'train')")),
        **env_fields,
    )
    task = _task_class(env_name, spec)
    config.ENV_NAME, config.ENV_CONFIG, config.OPTION_NAMES = env_name, registration.config, option_names
    config.COMPONENTS, config.RECORDED_BY_ENV = tuple(c.name for c in spec.components), task.RECORDED_BY_ENV
    config.MULTI_TURN = spec.multi_turn
    body = {"__module__": __name__, "ENV_NAME": env_name, "TASK_CLASS": task, "__doc__": spec.description}
    return types.new_class(f"{prefix}Taskset", (RowTaskset, vf.Taskset[task, config]), exec_body=lambda ns: ns.update(body))


# --- env ------------------------------------------------------------------------------------

#: The Episode protocol's one seat of a single-agent env: its trace keeps the agent's name.
SINGLE_SEAT = "player"


def _seat_name(seat: str):
    """``on_trace`` hook naming a seat's trace after the seat (``trace.agent.name``).

    prime-rl keys its per-role baselines (``algo.type = "rae"``) and its per-agent metrics by
    ``trace.agent.name``, which verifiers stamps with the agent's config field. Every trained
    seat is played by the one ``agent``, so without this all seats of all games shared one
    baseline. verifiers re-stamps a trace it re-mints on a retry and then calls this hook
    again, so the name holds for the trace that joins the episode."""
    if seat == SINGLE_SEAT:
        return None

    def name(trace: vf.Trace) -> None:
        if trace.agent is not None:
            trace.agent.name = seat

    return name


class EpisodeEnv(vf.Env):
    """Plays an rlplugs env's episodes with verifiers agents as seats (see module doc)."""

    ENV_NAME: str = ""

    async def setup(self, agents: vf.Agents) -> None:
        if hasattr(self.config, "opponent"):
            agents.opponent.trainable = False

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        data: RowData = task.data
        spec = spec_for(data.env, data.env_options)
        attempts = range(self.config.n)
        if not spec.multi_turn:
            await asyncio.gather(*(agents.agent.run(task) for _ in attempts))
            return
        played = await asyncio.gather(*(self.play(task, agents, spec) for _ in attempts))
        samples, traces = [], []
        for episode, seat_traces in played:
            for seat, trace in seat_traces.items():
                if seat in episode.trained_seats:
                    samples.append(_sample(data, last_reply(episode, seat), episode, 0, seat))
                    traces.append(trace)
        weights = reward_weights(spec, task.config)
        for trace, scores in zip(traces, await spec.ascore(samples)):
            record_scores(trace, scores, weights)
            _error_without_reward(trace, data.env, weights)

    async def play(self, task: vf.Task, agents: vf.Agents, spec: EnvSpec) -> tuple[GuardedEpisode, dict[str, vf.Trace]]:
        """One episode: each seat's first turn opens its interaction with the seat's opening
        observation as the prompt; later turns send only the messages new since its reply. An
        error in ``step``, a seat cut off before the end, or ``max_turns`` stops this attempt."""
        episode = start_episode(spec.episodes, dict(task.data.row))
        if (reason := stop_reason(episode)) is not None:  # it could not start: an errored episode in verifiers
            raise RuntimeError(reason)
        interactions: dict[str, vf.Interaction] = {}
        seen: dict[str, int] = {}
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(self.config.max_turns):
                if episode.done:
                    break
                seat = episode.current_seat
                observation = episode.observation()
                if seat not in interactions:
                    system, prompt = split_system(observation)
                    agent = agents.agent if seat in episode.trained_seats else agents.opponent
                    seat_task = copy.copy(task)  # the seat's own opening, validated as task data
                    seat_task.data = task.data.model_validate({**task.data.model_dump(), "prompt": prompt, "system_prompt": system})
                    interactions[seat] = await stack.enter_async_context(
                        agent.interaction(seat_task, on_trace=_seat_name(seat)))
                    segment = await interactions[seat].turn()
                else:
                    new = [m for m in observation[seen[seat]:] if m.get("role") != "system"]
                    if not new:
                        raise RuntimeError(f"env '{spec.name}': seat '{seat}' got no new message before its turn")
                    segment = await interactions[seat].turn(new)
                if segment.terminated:
                    episode.stop(f"seat '{seat}' stopped (turn or token limit) before the episode ended")
                    break
                # guarded: an environment error stops the episode. In a worker thread: a step may
                # wait on a judge (retries, a relaxation), and the agents' HTTP exchanges and the
                # sibling attempts share this event loop.
                await asyncio.to_thread(episode.step, segment.last_reply)
                seen[seat] = len(observation) + 1
            else:
                episode.stop(f"episode did not end within max_turns={self.config.max_turns}")
        return episode, {seat: i.trace for seat, i in interactions.items()}

    async def finalize(self, task: vf.Task, episode: vf.Episode) -> None:
        """Group components of single-turn envs, over the sibling attempts of this episode."""
        data: RowData = task.data
        spec = spec_for(data.env, data.env_options)
        group = [c for c in spec.components if c.group]
        if spec.multi_turn or not group:
            return
        traces = [t for t in episode.traces if t.ok]
        results = await spec.ascore([_sample(data, t.last_reply, group=0) for t in traces])
        weights = reward_weights(spec, task.config)
        for trace, scores in zip(traces, results):
            record_scores(trace, {c.name: scores[c.name] for c in group}, weights)
            _error_without_reward(trace, data.env, weights)


@functools.cache
def env_class(env_name: str) -> type[vf.Env]:
    """The ``vf.Env`` subclass for ``env_name``: seats as agents, ``n`` sibling attempts."""
    spec = make_env(env_name)
    prefix = class_prefix(env_name)
    # Seats default to the local subprocess runtime: the chat loop executes nothing, so a remote
    # sandbox (verifiers' default) would only add a tunnel and a Prime login.
    seat = vf.AgentConfig(runtime=SubprocessConfig())
    fields: dict[str, Any] = {
        "agent": (vf.AgentConfig, seat),
        "n": (int, Field(1, ge=1, description="sibling attempts per episode (group components compare them)")),
        "max_turns": (int, Field(100, ge=1, description="turn cap per episode (all seats together)")),
    }
    if spec.multi_turn:
        fields["opponent"] = (vf.AgentConfig, seat.model_copy())
    config = create_model(f"{prefix}EnvConfig", __base__=vf.EnvConfig, __module__=__name__, **fields)
    body = {"__module__": __name__, "ENV_NAME": env_name}
    return types.new_class(f"{prefix}Env", (EpisodeEnv, vf.Env[config]), exec_body=lambda ns: ns.update(body))


# --- harness --------------------------------------------------------------------------------

CHAT_PROGRAM_MODULES = ("openai", "mcp", "httpx", "httpx2", "tenacity", "certifi")


class _ThisInterpreter:
    """A local runtime whose PEP 723 scripts run with this Python (their packages are here).

    The script is shared by every rollout and named by its content, so it is written once and
    atomically (a temporary file renamed into place): rewritten in place per rollout, as the
    runtime's ``write`` does, it was empty or half-written while other rollouts' interpreters
    read it, and those rollouts ran nothing and scored 0 as if valid (4-5 of 16 at vf-eval's
    default concurrency)."""

    def __init__(self, runtime: SubprocessRuntime):
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script: str | bytes, env: dict[str, str] | None = None, *, activate: bool = True) -> list[str]:
        import hashlib
        import os
        import tempfile
        from pathlib import Path

        data = script.encode() if isinstance(script, str) else script
        path = Path(self._runtime.scripts_dir) / f"rlplugs-{hashlib.sha256(data).hexdigest()}.py"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        return [sys.executable, str(path)]


def _runs_here(runtime: Any) -> bool:
    return isinstance(runtime, SubprocessRuntime) and all(importlib.util.find_spec(m) for m in CHAT_PROGRAM_MODULES)


class LocalNullHarness(NullHarness):
    """verifiers' ``null`` chat loop; on the local subprocess runtime it runs with this Python."""

    async def setup(self, runtime: Any) -> None:
        if not _runs_here(runtime):
            await super().setup(runtime)

    async def launch(self, ctx, trace, runtime, *args: Any, **kwargs: Any):
        return await super().launch(ctx, trace, _ThisInterpreter(runtime) if _runs_here(runtime) else runtime, *args, **kwargs)


@functools.cache
def harness_class(env_name: str) -> type[vf.Harness]:
    """The ``null`` harness under this env's name, so an unpinned seat gets a plain chat loop."""
    return type(f"{class_prefix(env_name)}Harness", (LocalNullHarness,), {"__module__": __name__})


# --- module exports -------------------------------------------------------------------------


def verifiers_export(module: str, attr: str) -> type:
    """Module ``__getattr__`` body for env packages, called as ``verifiers_export(__name__, name)``:
    ``<Name>Taskset``, ``<Name>Env`` or ``<Name>Harness`` of the env importable as ``module`` (an
    env id works too); anything else is an ``AttributeError``."""
    env_name = env_for_module(module)
    prefix = class_prefix(env_name)
    builders = {f"{prefix}Taskset": taskset_class, f"{prefix}Env": env_class, f"{prefix}Harness": harness_class}
    if attr not in builders:
        raise AttributeError(f"module for env '{env_name}' has no attribute {attr!r}")
    return builders[attr](env_name)


__all__ = ["taskset_class", "env_class", "harness_class", "verifiers_export"]
