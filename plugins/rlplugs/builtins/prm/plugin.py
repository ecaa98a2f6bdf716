"""Registers PRM guidance (``best-of-n``, ``beam``), the PRM-free controls of best-of-N
(``best-of-n-random``, ``best-of-n-outcome``: :mod:`rlplugs.builtins.prm.controls`) and the
``rlplugs prm label|train`` commands.

Guidance options are strict configs, so ``rlplugs eval --guidance best-of-n --guidance_args
'{"n": 4, "prm": "DIR"}'`` and ``get_registry().get("guidance", "beam").build({...})`` validate the
same way; the PRM is loaded when the strategy is built. The core CLI declares none of these
options: they are this plugin's, given as one mapping.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

import rlplugs
from rlplugs import Registration, StrictConfig, Temperature, TopP

log = logging.getLogger(__name__)


class CandidatesConfig(StrictConfig):
    """How best-of-N samples its candidates (every picker's options have these)."""

    n: int = Field(4, ge=1, description="candidates per learner turn")
    temperature: Temperature | None = Field(0.7, description="candidate sampling temperature (None: the policy's own)")
    top_p: TopP | None = Field(None, description="candidates drawn within this nucleus (None: the policy's own)")
    policy_reply: bool = Field(False, description="the policy's own reply is the first candidate, n - 1 are sampled")

    def candidates(self) -> dict[str, Any]:
        """The options every search takes for its candidates."""
        return {"n": self.n, "temperature": self.temperature, "top_p": self.top_p, "policy_reply": self.policy_reply}


class RandomPickConfig(CandidatesConfig):
    """Options of ``best-of-n-random``."""

    seed: int = Field(0, description="seed of the random pick")


class OutcomePickConfig(CandidatesConfig):
    """Options of ``best-of-n-outcome``."""

    outcome: dict[str, float] = Field(description='outcome weights over reward components, e.g. {"success": 1} (as `rlplugs prm label --outcome`)')
    max_turns: int = Field(1000, ge=1, description="turns a rollout may take before it is stopped (then unscored)")

    @field_validator("outcome")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        if not value or sum(value.values()) <= 0:
            raise ValueError("give at least one reward component with a positive weight, e.g. {\"success\": 1}")
        return value


class PRMConfig(CandidatesConfig):
    """The PRM a search scores with (``best-of-n`` and ``beam`` take these)."""

    prm: str = Field(description="PRM checkpoint directory (from `rlplugs prm train`)")
    device: str = Field("auto", description="PRM device: auto (cuda if available), cpu, cuda, cuda:1, ...")
    max_length: int = Field(2048, ge=16, description="tokens of context the PRM reads (from the end)")
    batch_size: int = Field(16, ge=1, description="PRM scoring batch size")

    @field_validator("prm")
    @classmethod
    def _prm_checkpoint(cls, value: str) -> str:
        """Checked when the options are, so a wrong path fails before any model loads."""
        if not Path(value).is_dir():
            raise ValueError(f"{value!r} is not a directory; give a PRM checkpoint directory (from `rlplugs prm train`)")
        if problem := rlplugs.model_folder_problem(Path(value)):  # its load's OSError reached the user
            raise ValueError(f"{value!r}: {problem} (a PRM checkpoint directory, from `rlplugs prm train`)")
        return value


class BestOfNConfig(PRMConfig):
    """Options of ``best-of-n`` (beam search ranks beams against each other, so it has no margin)."""

    margin: float = Field(0.0, ge=0, description="with policy_reply: play the policy's own reply unless another "
                                                 "candidate's PRM score leads it by more than this")

    @model_validator(mode="after")
    def _margin_needs_policy_reply(self) -> BestOfNConfig:
        if self.margin and not self.policy_reply:
            raise ValueError("margin keeps the policy's own reply: set policy_reply true as well")
        return self


class BeamConfig(PRMConfig):
    """Options of ``beam``."""

    beam_width: int = Field(2, ge=1, description="beams (cloned games) kept after each learner turn")
    iterations: int = Field(3, ge=1, description="learner turns searched before finishing the best beam")


def _scorer(config: PRMConfig):
    import torch

    from rlplugs.builtins.prm.model import PRMScorer

    device = config.device if config.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    return PRMScorer(config.prm, device=device, max_length=config.max_length, batch_size=config.batch_size)


def build_best_of_n(config: BestOfNConfig):
    from rlplugs.builtins.prm.guidance import BestOfN

    return BestOfN(_scorer(config), margin=config.margin, **config.candidates())


def build_random_pick(config: RandomPickConfig):
    from rlplugs.builtins.prm.controls import RandomPick
    from rlplugs.builtins.prm.guidance import BestOfN

    return BestOfN(RandomPick(config.seed), **config.candidates())


def build_outcome_pick(config: OutcomePickConfig):
    from rlplugs.builtins.prm.controls import OutcomePick
    from rlplugs.builtins.prm.guidance import BestOfN

    return BestOfN(OutcomePick(config.outcome, config.max_turns), **config.candidates())


def build_beam(config: BeamConfig):
    from rlplugs.builtins.prm.guidance import BeamSearch

    return BeamSearch(_scorer(config), beam_width=config.beam_width, iterations=config.iterations, **config.candidates())


@rlplugs.hookimpl
def rlplugs_register_guidance() -> list[Registration]:
    return [
        Registration("best-of-n", build_best_of_n, "PRM picks the best of N sampled candidates per learner turn", BestOfNConfig),
        Registration("beam", build_beam, "PRM-ranked beam search over learner turns in cloned games", BeamConfig),
        Registration("best-of-n-random", build_random_pick, "control: a uniformly random pick among the N sampled candidates",
                     RandomPickConfig),
        Registration("best-of-n-outcome", build_outcome_pick, "upper bound: the candidate whose one rollout to the end "
                     "scored best (reads the true result at test time)", OutcomePickConfig),
    ]


# --- rlplugs prm label | train ---------------------------------------------------------------


def _add_dataclass_arguments(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """One ``--flag`` per dataclass field, with its help text (the TRL way: the config documents the CLI)."""
    for f in dataclasses.fields(config_cls):
        help_text = f.metadata.get("help", "")
        if f.type in ("bool", bool):
            parser.add_argument(f"--{f.name}", action="store_true", help=help_text)
        elif f.default is dataclasses.MISSING:
            parser.add_argument(f"--{f.name}", required=True, help=help_text)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            parser.add_argument(f"--{f.name}", type=kind, default=f.default, help=f"{help_text} (default: {f.default})")


def cmd_train(args: argparse.Namespace) -> int:
    from rlplugs import UsageError, check_model_dir, writable_dir
    from rlplugs.builtins.prm.labels import load_rows
    from rlplugs.builtins.prm.train import PRMTrainConfig, train_prm

    names = {f.name for f in dataclasses.fields(PRMTrainConfig)}
    try:  # bad input is a one-line usage error, before any model is loaded
        config = PRMTrainConfig(**{k: v for k, v in vars(args).items() if k in names})
        load_rows(args.data)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    if not Path(args.model).is_dir():
        raise UsageError(f"--model {args.model} is not a checkpoint directory")
    check_model_dir(args.model, "--model")  # a model's files in it, whole
    writable_dir(args.out, "--out")  # before training: the PRM is saved there at the end
    out = train_prm(config)
    log.warning("PRM saved to %s", out)
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from rlplugs import (
        UsageError,
        check_counts,
        check_model_dir,
        load_policy,
        make_env,
        parse_json_options,
        play_lockstep,
        start_episode,
        writable_file,
    )
    from rlplugs.builtins.prm.guidance import Proposer
    from rlplugs.builtins.prm.labels import monte_carlo_labels, outcome_labels, save_rows

    greedy_finish = args.finish == "greedy"
    if args.method == "outcome" and (args.k is not None or args.candidates != 2):  # taken without a word
        raise UsageError("--k and --candidates shape monte_carlo's labels; --method outcome labels the played turns")
    if args.k is None:
        args.k = 1 if greedy_finish else 4
    check_counts(args, rows=1, k=1, candidates=1, chunk=1)
    if args.method == "monte_carlo" and args.temperature <= 0:
        raise UsageError(f"--temperature {args.temperature}: monte_carlo samples candidates (and continuations), and "
                         "greedy ones are copies of one reply; give a temperature above 0 or --method outcome")
    if (greedy_finish or args.policy_reply) and args.method != "monte_carlo":
        raise UsageError("--finish greedy and --policy_reply shape monte_carlo's candidates and continuations; "
                         "drop them or pass --method monte_carlo")
    if greedy_finish and args.k > 1:
        raise UsageError(f"--k {args.k}: a greedy finish plays every candidate out the same way; leave --k at 1")
    if args.policy_reply and not greedy_finish:
        raise UsageError("--policy_reply puts the greedy reply first among the candidates; pass --finish greedy as well")
    check_model_dir(args.model, "--model")  # both before any rollout: labels are minutes of GPU work
    writable_file(args.out, "--out")
    spec = make_env(args.env, parse_json_options(args.env_args, "--env_args"))
    if not spec.multi_turn:
        raise UsageError(f"env '{spec.name}' is single-turn; PRM labels need a multi-turn env")
    try:
        weights = json.loads(args.outcome) if args.outcome else (
            {spec.eval.success_component: 1.0} if spec.eval.success_component else spec.weights)  # fmt: skip
    except json.JSONDecodeError as exc:
        raise UsageError(f"--outcome is not JSON like '{{\"success\": 1}}': {exc.msg}") from exc
    numbers = isinstance(weights, dict) and all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0
                                                for w in weights.values())  # fmt: skip
    if not numbers or not sum(weights.values()) > 0:  # the labels are their weighted mean
        raise UsageError(f"--outcome {args.outcome}: give a JSON object of component: weight (weights of at least 0, "
                         "not all 0), e.g. '{\"success\": 1}'")
    unknown = sorted(set(weights) - {c.name for c in spec.components})
    if unknown:
        raise UsageError(f"--outcome names {unknown}, not components of '{spec.name}': {sorted(spec.weights)}")
    rows = list(spec.dataset(args.split))[: args.rows]
    policy = load_policy(args.model, temperature=0.0 if greedy_finish else args.temperature,
                         max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=args.seed)  # fmt: skip
    candidates = Proposer(policy, args.candidates, args.temperature, args.policy_reply) if greedy_finish else args.candidates
    labelled: list[dict[str, Any]] = []
    with Progress() as progress:
        task = progress.add_task(f"labelling {spec.name} ({args.method})", total=len(rows))
        for start in range(0, len(rows), args.chunk):
            chunk = rows[start : start + args.chunk]
            episodes = [start_episode(spec.episodes, row) for row in chunk]  # an error stops one game, not the run
            if args.method == "outcome":
                play_lockstep(episodes, policy)
                new = outcome_labels(episodes, weights)
            else:
                new = monte_carlo_labels(episodes, policy, weights, k=args.k, candidates=candidates)
            for row in new:
                row["meta"].update(env=spec.name, split=args.split, row=start + row["meta"]["episode"])
            labelled += new
            progress.advance(task, len(chunk))
    save_rows(labelled, args.out)
    log.warning("%d PRM rows written to %s", len(labelled), args.out)
    return 0


@rlplugs.hookimpl
def rlplugs_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    from rlplugs.builtins.prm.train import PRMTrainConfig

    prm = subparsers.add_parser("prm", help="process reward models: label rollouts, train a PRM")
    sub = prm.add_subparsers(dest="prm_command", metavar="PRM_COMMAND", required=True)

    p = sub.add_parser("label", help="turn-level PRM rows from the policy's own rollouts of a multi-turn env")
    p.add_argument("--env", required=True, help="registered multi-turn environment")
    p.add_argument("--env_args", help="environment options as a JSON object")
    p.add_argument("--split", default="train", help="dataset split to roll out")
    p.add_argument("--rows", type=int, default=16, help="dataset rows (episodes) to label")
    p.add_argument("--model", required=True, help="policy checkpoint directory")
    p.add_argument("--method", choices=["monte_carlo", "outcome"], default="monte_carlo")
    p.add_argument("--k", type=int, help="monte_carlo: continuations per candidate (default 4; 1 with --finish greedy)")
    p.add_argument("--candidates", type=int, default=2, help="monte_carlo: candidates sampled per learner turn")
    p.add_argument("--finish", choices=["sampled", "greedy"], default="sampled",
                   help="monte_carlo: who plays the main game and each candidate's continuations: the policy at "
                        "--temperature, or greedy (a candidate is then valued as best-of-N with greedy turns meets it)")
    p.add_argument("--policy_reply", action="store_true",
                   help="with --finish greedy: the greedy reply is the first candidate, --candidates - 1 are sampled")
    p.add_argument("--outcome", help='outcome weights as JSON, e.g. \'{"success": 1}\' (default: the env\'s success component)')
    p.add_argument("--temperature", type=float, default=0.7, help="policy sampling temperature")
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--batch_size", type=int, default=8, help="conversations per generate() call")
    p.add_argument("--chunk", type=int, default=8, help="episodes labelled together")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON-lines file to write")
    p.set_defaults(func=cmd_label)

    p = sub.add_parser("train", help="train a PRM (causal LM + scalar head) on labelled rows")
    _add_dataclass_arguments(p, PRMTrainConfig)
    p.set_defaults(func=cmd_train)
