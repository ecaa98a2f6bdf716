"""Registers the ``matrl`` environment and its judge-backed reward components with rlplugs.

Read top to bottom: config -> judges (built once per process, lazily) -> datasets -> episodes ->
preflight -> EnvSpec -> registrations and CLI commands.
"""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, TypeAdapter, ValidationInfo, field_validator, model_validator

import rlplugs
from matrl.datafiles import MEGNET_BANDGAP
from rlplugs import EnvSpec, EvalProtocol, Registration, RetryPolicy, Sample, StrictConfig, only_parsing


def _torch_device(value: str, info: ValidationInfo) -> str:
    """A device torch knows, and with CUDA a GPU here (it failed every episode's first relaxation)."""
    import torch

    try:
        device = torch.device(value)
    except RuntimeError:
        raise ValueError(f"{value!r} is not a torch device; give cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not only_parsing(info) and not torch.cuda.is_available():
        raise ValueError(f"{value!r}: torch sees no CUDA GPU here; give cpu")
    return value


def _band_gap_folder(value: str) -> str:
    """A MatGL-format MEGNet folder, checked before any model loads (the judge service found a missing
    one only after it had started and loaded CHGNet)."""
    missing = [name for name in ("model.json", "state.pt") if not Path(value, name).is_file()]
    if missing:
        what = "no such folder" if not Path(value).is_dir() else f"no {' or '.join(missing)} in it"
        raise ValueError(f"{value!r}: {what}; give a MatGL-format MEGNet folder (model.json + "
                         "state.pt), leave it out for the shipped weights, or set it to null (None on vf-eval's "
                         "command line) to switch band-gap rewards off")
    return value


#: What a judge runs on and how it relaxes a structure; the env's own judges and the judge service
#: (``JudgeOptions``) take each.
TorchDevice = Annotated[str, AfterValidator(_torch_device)]
BandGapFolder = Annotated[str, AfterValidator(_band_gap_folder)]
RelaxSteps = Annotated[int, Field(ge=1, description="FIRE steps per relaxation")]
Fmax = Annotated[float, Field(gt=0, description="force convergence threshold (eV/Å)")]


class MatrlConfig(StrictConfig):
    """Options of the ``matrl`` environment (``--env_args``, YAML ``env_args``, TOML ``env.taskset``)."""

    task_mix: dict[str, float] = Field(default_factory=lambda: dict(_default_mix()), validate_default=True,
                                       description="share of each task kind; must sum to 1")
    rows: int = Field(2048, ge=1, description="rows in the train split")
    eval_rows: int = Field(128, ge=1, description="rows in the validation and test splits")
    prompt_csv: str | None = Field(None, description="MP-20-style CSV whose formulas/elements/gaps/space groups become tasks")
    reference_csvs: list[str] = Field(default_factory=list, description="MP-20-style CSVs (cif column) for novelty; "
                                                                        "default: the embedded prototypes")
    hull_reference: str | None = Field(None, description="hull reference JSON; default: the embedded approximate hull")
    max_turns: int = Field(10, ge=1, description="agent turns per episode")
    max_evaluations: int = Field(8, ge=0, description="evaluate_structure calls per episode (0: submit unevaluated)")
    max_atoms: int = Field(20, ge=1, description="atoms per cell a structure may have")
    relax_steps: RelaxSteps = 20
    fmax: Fmax = 0.1
    device: TorchDevice = "cpu"
    mlip: Literal["chgnet", "sevenn"] = Field("chgnet", description="chgnet = reward MLIP; sevenn = held-out judge")
    sevenn_model: str = "7net-0"
    band_gap_model: BandGapFolder | None = Field(str(MEGNET_BANDGAP), description="MatGL-format MEGNet folder (model.json + "
                                      "state.pt); default: the shipped MatGL weights; null switches band-gap tasks "
                                      "and rewards off")
    elastic_judge: bool = Field(True, description="false switches bulk-modulus tasks and rewards off")
    judge_url: str | None = Field(None, description="use a running judge service (rlplugs matrl serve-judges)")
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    cache_size: int = Field(4096, ge=1, description="LRU size of the relaxation and novelty caches")
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _no_tasks_for_judges_switched_off(cls, data):
        """A judge switched off takes its task kind out of the default mix (the other shares grow
        in proportion); a mix of the user's own must not ask for that kind. (Adapters that pass
        every field, as the verifiers taskset config does, pass the default mix explicitly.)"""
        if not isinstance(data, dict):
            return data
        off = [kind for kind, (option, value, _) in JUDGE_SWITCHES.items()
               if option in data and _as_field(cls, option, data[option]) == value]
        if not off:
            return data
        mix = data.get("task_mix", _default_mix())
        if not isinstance(mix, dict):
            return data  # the field's own validation reports it
        if mix != _default_mix():
            asked = [k for k in off if mix.get(k, 0) > 0]
            if asked:
                option, value, _ = JUDGE_SWITCHES[asked[0]]
                raise ValueError(f"task_mix asks for {asked[0]} tasks but {option} is {json.dumps(value)} (that judge "
                                 f"is off): set task_mix {asked[0]} to 0, or switch the judge back on")
            return data
        kept = {k: v for k, v in _default_mix().items() if k not in off}
        return {**data, "task_mix": {k: v / sum(kept.values()) for k, v in kept.items()}}

    @field_validator("task_mix")
    @classmethod
    def _mix(cls, value):
        from matrl.tasks import validate_mix

        return validate_mix(value)

    @field_validator("hull_reference")
    @classmethod
    def _hull_file(cls, value):
        if value is not None and not Path(value).is_file():
            raise ValueError(f"{value!r}: no such file; give a hull JSON written by "
                             "`python -m matrl.build_reference`, or leave it out for the shipped approximate hull")
        return value

    @field_validator("prompt_csv", "reference_csvs")
    @classmethod
    def _mp20_csvs(cls, value):
        from matrl.tasks import check_mp20_csv

        for path in [value] if isinstance(value, str) else value or []:
            check_mp20_csv(path)
        return value

    @field_validator("judge_url")
    @classmethod
    def _judge_service_answers(cls, value, info: ValidationInfo):
        if value is not None:
            if not value.startswith(("http://", "https://")):
                raise ValueError(f"{value!r} is not an http(s) URL; give e.g. http://127.0.0.1:8765")
            if not only_parsing(info):  # a trainer may parse its TOML before the service is up
                check_judge_service(value)
        return value


#: Judges a config can switch off: task kind -> (option, the value that switches it off, the reward
#: component that the judge feeds and that goes with it).
JUDGE_SWITCHES = {"band_gap": ("band_gap_model", None, "band_gap_target"),
                  "bulk_modulus": ("elastic_judge", False, "bulk_modulus_target")}


def judges_off(config: MatrlConfig) -> set[str]:
    """Task kinds whose judge the config switched off."""
    return {kind for kind, (option, value, _) in JUDGE_SWITCHES.items() if getattr(config, option) == value}


def check_judge_service(url: str, wait_s: float = 30.0) -> None:
    """Raise ``ValueError`` unless a matrl judge service answers ``GET {url}/health`` within
    ``wait_s`` (a service that is still starting answers ``/health`` at once and ``/ready`` once
    its models are in; the client waits for that at its first call)."""
    import httpx

    from matrl.judge_client import wait_for_service
    from matrl.judges import JudgeUnavailable

    try:
        with httpx.Client(base_url=url, timeout=5.0) as http:
            wait_for_service(http, "/health", wait_s, ready=lambda health: health.get("alive") is True)
    except JudgeUnavailable as exc:
        raise ValueError(f"{exc}, or leave judge_url out to run the judges in this process") from None


def _as_field(model: type[StrictConfig], option: str, value):
    """``value`` as the field ``option`` will hold it ("false" -> False); unchanged when invalid
    (the field's own validation then reports it)."""
    try:
        return TypeAdapter(model.model_fields[option].annotation).validate_python(value)
    except ValueError:
        return value


def _default_mix():
    from matrl.tasks import DEFAULT_TASK_MIX

    return DEFAULT_TASK_MIX


_JUDGES_LOCK = threading.Lock()


def judge_set(config: MatrlConfig):
    """The process-wide judges for one config (models load once, on first use, even when many
    episodes start at once on several threads)."""
    with _JUDGES_LOCK:
        return _judge_set(config.model_dump_json())


@functools.lru_cache(maxsize=4)
def _judge_set(config_json: str):
    config = MatrlConfig.model_validate_json(config_json)
    from matrl.evaluation import JudgeSet
    from matrl.hull import DEFAULT_REFERENCE, RejudgedHull, load_hull_reference
    from matrl.judges import CHGNetJudge, EOSElasticJudge, MEGNetBandGapJudge, SevenNetJudge, SwitchedOff
    from matrl.novelty import NoveltyReference
    from matrl.judge_client import HttpJudges
    from matrl.structures import parse_structure

    reference = load_hull_reference(config.hull_reference or DEFAULT_REFERENCE)
    if config.judge_url:
        mlip = band_gap = elastic = HttpJudges.for_policy(config.judge_url, config.retry)
    else:
        if config.mlip == "chgnet":
            mlip = CHGNetJudge(config.device, config.relax_steps, config.fmax, config.cache_size)
        else:
            mlip = SevenNetJudge(config.sevenn_model, config.device, config.relax_steps, config.fmax, config.cache_size)
        band_gap = MEGNetBandGapJudge(config.band_gap_model) if config.band_gap_model else SwitchedOff("band-gap")
        elastic = EOSElasticJudge(mlip) if config.elastic_judge else SwitchedOff("bulk-modulus (elastic)")
    hull = reference if mlip.scale == reference.scale else RejudgedHull(reference, mlip)
    if config.reference_csvs:
        from matrl.tasks import load_mp20_csv

        known = [(r.material_id, r.structure) for path in config.reference_csvs for r in load_mp20_csv(path)]
        source = ", ".join(Path(p).name for p in config.reference_csvs)
    else:
        known = [(f"{e.formula} ({e.label})", parse_structure(json.dumps(e.structure), 10_000))
                 for e in reference.entries if e.structure]
        source = "embedded prototype set (approximate)"
    return JudgeSet(mlip, band_gap, elastic, hull, NoveltyReference(known, source, config.cache_size), config.retry)


def dataset_rows(config: MatrlConfig, split: str) -> list[dict]:
    from matrl.episode import system_prompt
    from matrl.tasks import build_rows, builtin_conditions, load_mp20_csv, mp20_conditions

    conditions = (mp20_conditions(load_mp20_csv(config.prompt_csv, config.max_atoms)) if config.prompt_csv
                  else builtin_conditions())
    n = config.rows if split == "train" else config.eval_rows
    system = system_prompt(config.max_turns, config.max_evaluations, config.max_atoms)
    rows = build_rows(split, n, config.task_mix, conditions, config.seed, config.max_atoms)
    return [{"prompt": [{"role": "system", "content": system}, {"role": "user", "content": r["request"]}],
             "task": r["task"], "target": json.dumps(r["target"]), "task_id": r["task_id"], "max_atoms": r["max_atoms"]}
            for r in rows]


def _dataset(config: MatrlConfig, split: str):
    from datasets import Dataset, DatasetInfo

    mix = ", ".join(f"{k} {v:.0%}" for k, v in config.task_mix.items())
    return Dataset.from_list(dataset_rows(config, split), info=DatasetInfo(description=f"matrl {split}; task mix: {mix}"))


def episode_factory(config: MatrlConfig):
    from matrl.episode import MatrlEpisode
    from matrl.evaluation import Evaluator
    from matrl.rewards import score_submission

    def start(row: dict):
        judges = judge_set(config)
        target = row["target"] if isinstance(row["target"], dict) else json.loads(row["target"])
        row = {**row, "target": target}
        return MatrlEpisode(row, Evaluator(judges), score_submission, config.max_turns, config.max_evaluations)

    return start


def preflight_samples(config: MatrlConfig) -> list[Sample]:
    """Real episodes played by the reference policy: a formula task (relaxation, hull, novelty),
    a band-gap task (real MEGNet prediction) and a bulk-modulus task (real EOS fit); no task for a
    judge the config switched off."""
    from matrl.episode import system_prompt
    from matrl.policy import PrototypePolicy
    from matrl.tasks import task_row
    from rlplugs import play

    start = episode_factory(config)
    system = system_prompt(config.max_turns, config.max_evaluations, config.max_atoms)
    samples = []
    tasks = [("formula", "NaCl"), ("formula", "MgO"), ("band_gap", 3.0), ("bulk_modulus", 150.0)]
    for k, (kind, cond) in enumerate(t for t in tasks if t[0] not in judges_off(config)):
        r = task_row(kind, cond, config.max_atoms)
        row = {"prompt": [{"role": "system", "content": system}, {"role": "user", "content": r["request"]}],
               "task": kind, "target": r["target"], "task_id": f"preflight-{k}", "max_atoms": config.max_atoms}
        episode = play(start(row), PrototypePolicy(), max_turns=config.max_turns)
        samples.append(Sample(prompt=row["prompt"], completion="", row=row, episode=episode, group=0))
    return samples


def build_env(config: MatrlConfig) -> EnvSpec:
    from matrl.policy import PrototypePolicy
    from matrl.render import render_sample
    from matrl.rewards import build_components

    switched_off = {JUDGE_SWITCHES[kind][2] for kind in judges_off(config)}
    return EnvSpec(
        description="Multi-turn crystal-structure design with MLIP judges (CHGNet reward, SevenNet held out), "
                    "SUN, diversity, band-gap and bulk-modulus rewards. Judge: " + config.mlip + ". Hull: "
                    + (config.hull_reference or "APPROXIMATE (embedded textbook prototypes relaxed with CHGNet)")
                    + ". Novelty reference: " + (", ".join(config.reference_csvs) or "embedded prototypes (approximate)")
                    + ".",
        datasets={s: functools.partial(_dataset, config, s) for s in ("train", "validation", "test")},
        components=[c for c in build_components() if c.name not in switched_off],
        preflight_samples=functools.partial(preflight_samples, config),
        episodes=episode_factory(config),
        eval=EvalProtocol(splits=("test",), rows=64, samples_per_row=4, temperature=1.0, enable_thinking=True,
                          max_new_tokens=2048, report_by=("task",), success_component="sun"),
        # a device batch of one whole group: TRL refuses generation batches of partial groups
        trainer_defaults={"num_generations": 16, "per_device_train_batch_size": 16, "temperature": 1.15,
                          "max_completion_length": 2048, "learning_rate": 1e-6, "max_episode_turns": config.max_turns,
                          "chat_template_kwargs": {"enable_thinking": True}},
        reference_policy=PrototypePolicy(),
        render=render_sample,
        component_switches={component: {option: value} for option, value, component in JUDGE_SWITCHES.values()},
    )


@rlplugs.hookimpl
def rlplugs_register_environments():
    return [Registration(name="matrl", factory=build_env, config=MatrlConfig,
                         summary="crystal design with tool calls; CHGNet-judged SUN, diversity, band gap, bulk modulus")]


@rlplugs.hookimpl
def rlplugs_register_reward_components():
    from matrl.components import JUDGE_COMPONENTS

    return JUDGE_COMPONENTS


@rlplugs.hookimpl
def rlplugs_add_cli_commands(subparsers):
    from matrl.cli import add_commands

    add_commands(subparsers)
