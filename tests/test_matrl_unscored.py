"""A judge failure is never a zero: with the MLIP down at submit time (a judge object that cannot
connect, retried and given up, as a worker sees a dead judge service) or answering a non-finite
energy, every term that needed it is unscored with the reason, the sample's weighted total is
unscored, and its group members are compared without it. A missing or invalid submission stays a
real 0. Real CHGNet, hull and novelty reference for the healthy episodes."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pymatgen.core import Lattice, Structure

from matrl.episode import MatrlEpisode
from matrl.evaluation import Evaluator
from matrl.hull import MP2020_SCALE
from matrl.plugin import MatrlConfig, build_env, judge_set
from matrl.policy import ReplayPolicy
from matrl.rewards import score_submission
from matrl.structures import structure_to_json
from matrl.tasks import task_row
from matrl.toolcalls import format_call
from rlplugs.episode import guard, play, stop_reason
from rlplugs.rewards import RetryPolicy, Sample, run_sync, score_components, weighted_total

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONFIG = MatrlConfig(relax_steps=4, elastic_judge=False, max_turns=2)
NACL = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.69), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]]).get_primitive_structure()
KCL = Structure.from_spacegroup("Pm-3m", Lattice.cubic(3.9), ["K", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
OVERLAP = Structure(Lattice.cubic(4.0), ["Na", "Cl"], [[0, 0, 0], [0.03, 0, 0]])


class UnreachableJudge:
    """The MLIP as a worker sees it once its judge service is gone: every call fails to connect."""

    name, scale = "chgnet", MP2020_SCALE

    def relax(self, structures):
        raise ConnectionError("judge service unreachable (connection refused)")

    energies = relax


class CrashingJudge(UnreachableJudge):
    """An MLIP failing in a way the episode does not expect (not a transient error)."""

    def relax(self, structures):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


class NaNEnergyJudge:
    """The real MLIP, with its energies turned into NaN (a relaxation that blew up)."""

    def __init__(self, mlip):
        self.mlip, self.name, self.scale = mlip, mlip.name, mlip.scale

    def relax(self, structures):
        return [dataclasses.replace(r, energy_per_atom=float("nan")) for r in self.mlip.relax(structures)]


def formula_row(formula: str = "NaCl") -> dict:
    r = task_row("formula", formula)
    return {"prompt": [{"role": "user", "content": r["request"]}], "task": "formula", "target": r["target"],
            "task_id": "unscored-test", "max_atoms": 20}


def submit(structure) -> str:
    return "Submitting.\n</think>\n\n" + format_call("submit", structure=structure_to_json(structure))


def played(mlip, replies: list[str], row: dict | None = None) -> MatrlEpisode:
    """A formula-task episode played to its end with ``mlip`` as the judge (real hull and novelty)."""
    judges = judge_set(CONFIG)
    if mlip is not None:
        judges = dataclasses.replace(judges, mlip=mlip, retry=RetryPolicy(attempts=2, backoff_s=0.0))
    episode = MatrlEpisode(row or formula_row(), Evaluator(judges), score_submission, CONFIG.max_turns)
    return play(episode, ReplayPolicy(replies))


@pytest.fixture(scope="module")
def spec():
    return build_env(CONFIG)


@pytest.fixture(scope="module")
def group():
    """One GRPO group: two healthy submissions, one made while the judge was down, one invalid,
    one episode that never submitted."""
    return {
        "nacl": played(None, [submit(NACL)]),
        "kcl": played(None, [submit(KCL)]),
        "judge_down": played(UnreachableJudge(), [submit(NACL)]),
        "invalid": played(None, [submit(OVERLAP)]),
        "no_submission": played(None, ["I am still thinking."]),
    }


def score_group(spec, episodes: dict) -> dict[str, dict]:
    samples = [Sample(prompt=[], completion="", episode=ep, group=0) for ep in episodes.values()]
    return dict(zip(episodes, run_sync(score_components(spec.components, samples))))


def test_judge_down_at_submit_leaves_every_weighted_term_unscored_with_the_reason(spec, group):
    scores = score_group(spec, group)["judge_down"]
    assert group["judge_down"].finish_reason == "submitted"
    for name in ("sun_marginal", "group_diversity", "unique", "sun", "valid", "novel", "stable"):
        assert scores[name].value is None, (name, scores[name])
        assert "relaxation failed" in scores[name].reason and "unreachable" in scores[name].reason
    assert scores["condition_met"].value == 1.0  # the formula is known without the judge
    assert weighted_total(scores, spec.weights) is None  # unscored, not 0


def test_group_members_keep_real_scores_and_real_zeros_beside_an_unjudged_one(spec, group):
    scores = score_group(spec, group)
    for name in ("nacl", "kcl"):  # compared with each other, not with the unjudged member
        assert scores[name]["group_diversity"].value == pytest.approx(0.75)  # composition 0.5, structure 1
        assert scores[name]["unique"].value == 1.0
    assert scores["nacl"]["sun_marginal"].value > 0 and scores["kcl"]["sun_marginal"].value == 0.0  # not NaCl
    assert scores["invalid"]["group_diversity"].value == 0.0 and scores["invalid"]["sun_marginal"].value == 0.0
    assert scores["invalid"]["valid"].value == 0.0 and "apart" in scores["invalid"]["valid"].reason
    assert scores["no_submission"]["group_diversity"].value == 0.0
    assert scores["no_submission"]["group_diversity"].reason == "no submission"
    assert weighted_total(scores["no_submission"], spec.weights) == 0.0  # the model's own zero


def test_only_valid_member_beside_unjudged_ones_has_no_diversity_score(spec, group):
    scores = score_group(spec, {k: group[k] for k in ("nacl", "judge_down", "no_submission")})
    assert scores["nacl"]["group_diversity"].value is None
    assert "could not be judged" in scores["nacl"]["group_diversity"].reason


def test_non_finite_energy_makes_stability_unscored_not_zero(spec):
    scores = played(NaNEnergyJudge(judge_set(CONFIG).mlip), [submit(NACL)]).scores()
    assert scores["valid"].value == 1.0
    assert scores["stable"].value is None and "nan" in scores["stable"].reason


def test_episode_stopped_by_a_judge_crash_is_unscored_in_every_component(spec):
    episode = guard(MatrlEpisode(formula_row(), Evaluator(dataclasses.replace(judge_set(CONFIG), mlip=CrashingJudge())),
                                 score_submission, CONFIG.max_turns))
    play(episode, ReplayPolicy([submit(NACL)]))
    assert episode.done and "CUDA error" in stop_reason(episode)
    (scores,) = run_sync(score_components(spec.components, [Sample(prompt=[], completion="", episode=episode, group=0)]))
    assert {name: s.value for name, s in scores.items()} == {c.name: None for c in spec.components}
    assert all("episode stopped by an error: RuntimeError: CUDA error" in s.reason for s in scores.values())
    assert json.dumps(episode.record()["stopped"])  # the report carries the reason
