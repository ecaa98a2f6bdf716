"""Reward components, each named for what it scores (the names are the metrics users see).

Weighted terms (the model card's recipe):

- ``sun_marginal`` x1.0 (group): partial SUN credit, a quarter each for valid, unique within the
  group, novel against the reference, stable (E_hull <= 0.1 eV/atom after relaxation; linear
  partial credit up to 0.3 eV/atom), times ``condition_met`` (formula / elements / space group);
- ``group_diversity`` x1.5 (group): mean distance of a submission to the group's other valid
  submissions (half composition distance, half "structurally different" per StructureMatcher);
- ``band_gap_target`` x0.5 and ``bulk_modulus_target`` x0.5: closeness to the target on those tasks
  (1 inside the tolerance, linear to 0 over the width); *unscored* ("not applicable") elsewhere.

Weight-0 metrics: ``valid``, ``unique``, ``novel``, ``stable``, ``condition_met``, ``sun`` (strict SUN).

Group components are pure functions of the group's samples: they read each sample's episode
record (``Sample.episode``: a :class:`~matrl.episode.MatrlEpisode` or its ``record()`` dict), so a
trainer may gather a group from several processes and call them anywhere.

No silent zeros: a missing or invalid submission scores 0 (the model's doing), but a term the
judges could not compute (relaxation failed after retries, no hull reference, a non-finite energy,
spglib failing) is ``Score(None, reason)``. A group member that could not be judged is unscored in
the group terms too and left out of its siblings' comparisons. An episode that an error stopped
never reaches these functions: the core marks all its terms unscored (:mod:`rlplugs.episode`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pymatgen.core import Composition, Structure

from matrl.novelty import make_matcher, structures_match
from matrl.structures import StructureInputError, parse_structure
from rlplugs import RewardComponent, Sample, Score

STABLE_EHULL = 0.1
STABLE_PARTIAL_WIDTH = 0.2
BAND_GAP_TOL, BAND_GAP_WIDTH = 0.3, 1.0  # eV
BULK_TOL_FRAC, BULK_WIDTH_FRAC = 0.1, 0.5  # of the target


def closeness(value: float, target: float, tol: float, width: float) -> float:
    off = abs(value - target)
    return 1.0 if off <= tol else max(0.0, 1.0 - (off - tol) / width)


def stability_credit(e_hull: float) -> float:
    return 1.0 if e_hull <= STABLE_EHULL else max(0.0, 1.0 - (e_hull - STABLE_EHULL) / STABLE_PARTIAL_WIDTH)


def condition_met(target: dict, sub: dict) -> bool:
    if "formula" in target:
        return sub["formula"] == Composition(target["formula"]).reduced_formula
    if "elements" in target:
        return set(Composition(sub["formula"]).as_dict()) == set(target["elements"])
    if "space_group" in target:
        return (sub.get("space_group") or {}).get("number") == target["space_group"]
    return True


TARGET_TASKS = {"band_gap_target": "band_gap", "bulk_modulus_target": "bulk_modulus"}  # component -> task kind


def episode_scores(task: str, target: dict, sub: dict | None) -> dict[str, Score]:
    """The per-episode terms from a submission (``None`` when the agent never submitted).

    Three outcomes, kept apart: no submission or an invalid cell is a real 0 (the model's doing);
    a term the judges could not compute (relaxation failed after retries, no hull reference, a
    non-finite energy, spglib failing) is unscored with the reason; everything else is scored.
    """
    out = {name: Score(None, f"not applicable to {task} tasks") for name in TARGET_TASKS}
    if sub is None:
        zero = Score(0.0, "no submission")
        out.update({name: zero for name in ("valid", "novel", "stable", "condition_met")})
        out.update({name: zero for name, kind in TARGET_TASKS.items() if kind == task})
        return out
    valid = _validity(sub)
    gate = _gated_by_validity(valid)
    out["valid"] = valid
    out["condition_met"] = _condition_score(target, sub)
    out["novel"] = gate or Score(1.0 if sub.get("novel") else 0.0)
    out["stable"] = gate or _judged_value(sub, "e_above_hull", stability_credit)
    if task == "band_gap":
        out["band_gap_target"] = gate or _judged_value(
            sub, "band_gap_ev", lambda v: closeness(v, target["band_gap_ev"], BAND_GAP_TOL, BAND_GAP_WIDTH))
    if task == "bulk_modulus":
        k = target["bulk_modulus_gpa"]
        out["bulk_modulus_target"] = gate or _judged_value(
            sub, "bulk_modulus_gpa", lambda v: closeness(v, k, BULK_TOL_FRAC * k, BULK_WIDTH_FRAC * k))
    return out


def score_submission(row: dict, sub: dict | None) -> dict[str, Score]:
    """An episode's scorer (module level, so finished episodes pickle)."""
    return episode_scores(row["task"], row["target"], sub)


def _judge_failure(sub: dict) -> str | None:
    """Why the MLIP never assessed a submitted cell; None when it did (or when the cell was
    structurally invalid as given, so relaxing it was skipped on purpose)."""
    if "relax_error" in sub and sub.get("structural_valid", True):
        return f"relaxation failed: {sub['relax_error']}"
    return None


def _validity(sub: dict) -> Score:
    failure = _judge_failure(sub)
    if failure is None:
        return Score(1.0) if sub.get("valid") else Score(0.0, "; ".join(sub.get("findings") or ["invalid structure"]))
    if not sub.get("compositional_valid", True):  # invalid whatever the relaxation would have done
        return Score(0.0, "; ".join(sub.get("findings") or ["no charge-neutral assignment"]))
    return Score(None, failure)  # validity is judged on the relaxed cell


def _gated_by_validity(valid: Score) -> Score | None:
    """What every validity-dependent term is when validity decides it: 0 for an invalid cell,
    unscored when validity itself could not be judged; ``None`` for a valid cell."""
    if not valid.scored:
        return Score(None, valid.reason)
    return None if valid.value else Score(0.0, "invalid structure")


def _judged_value(sub: dict, key: str, credit) -> Score:
    """``credit(sub[key])``, or unscored with the judge's reason when the value is missing or not finite."""
    value = sub.get(key)
    if value is None:
        return Score(None, sub.get(f"{key}_error", f"{key} not computed"))
    if not math.isfinite(value):
        return Score(None, f"the judge returned {key} = {value}")
    return Score(credit(float(value)))


def _condition_score(target: dict, sub: dict) -> Score:
    if "space_group" in target and not sub.get("space_group"):
        failure = _judge_failure(sub) or sub.get("space_group_error")
        if failure:
            return Score(None, failure)
        return Score(0.0, "no space group: the cell was invalid as given, so it was not relaxed")
    return Score(1.0 if condition_met(target, sub) else 0.0)


# -- reading samples --------------------------------------------------------------------------------
def _record(sample: Sample) -> dict[str, Any]:
    ep = sample.episode
    if ep is None:
        raise ValueError("matrl components score finished episodes (Sample.episode is empty)")
    return ep if isinstance(ep, dict) else ep.record()


def _scores(record: dict[str, Any]) -> dict[str, Score]:
    return episode_scores(record["task"], record.get("target") or {}, record.get("submission"))


def _group_member(record: dict[str, Any]) -> tuple[Structure | None, Score | None]:
    """A group member's relaxed, valid structure, or else the score it gets without one: 0 when it
    did not submit or submitted an invalid cell, unscored when its cell could not be judged."""
    sub = record.get("submission")
    if sub is None:
        return None, Score(0.0, "no submission")
    valid = _validity(sub)
    if not valid.scored:
        return None, valid
    if not valid.value:
        return None, Score(0.0, "invalid submission")
    try:
        return parse_structure(sub["relaxed"], max_atoms=10_000), None
    except (KeyError, StructureInputError) as exc:
        return None, Score(None, f"the relaxed structure is unreadable: {exc}")


def _per_episode(name: str):
    def fn(sample: Sample) -> Score:
        return _scores(_record(sample))[name]
    fn.__name__ = name
    return fn


# -- group terms ---------------------------------------------------------------------------------------
def _match_counts(structures: list) -> list[int]:
    """For each structure, how many group members (itself included) it matches."""
    matcher = make_matcher()
    counts = [1 if s is not None else 0 for s in structures]
    for i in range(len(structures)):
        for j in range(i + 1, len(structures)):
            a, b = structures[i], structures[j]
            if a is not None and b is not None and structures_match(a, b, matcher):
                counts[i] += 1
                counts[j] += 1
    return counts


def unique_in_group(samples: Sequence[Sample]) -> list[Score]:
    """1/k for a valid submission that k judged group members (itself included) share; 0 when it
    is invalid or missing; unscored when it could not be judged."""
    members = [_group_member(_record(s)) for s in samples]
    counts = _match_counts([structure for structure, _ in members])
    return [Score(1.0 / c) if own is None else own for (_, own), c in zip(members, counts)]


def _sun(samples: Sequence[Sample], combine) -> list[Score]:
    """A SUN term per sample: 0 for a missing or invalid submission, unscored when one of its parts
    is, else ``combine(valid, unique, novel, stable, condition_met)``."""
    out = []
    for sample, unique in zip(samples, unique_in_group(samples)):
        sc = _scores(_record(sample))
        parts = [sc["valid"], unique, sc["novel"], sc["stable"], sc["condition_met"]]
        missing = [p.reason for p in parts if not p.scored]
        if sc["valid"].value == 0:
            out.append(Score(0.0, "invalid or missing submission"))
        elif missing:
            out.append(Score(None, missing[0]))
        else:
            out.append(Score(combine(*(p.value for p in parts))))
    return out


def sun_marginal(samples: Sequence[Sample]) -> list[Score]:
    return _sun(samples, lambda valid, unique, novel, stable, condition: condition * (valid + unique + novel + stable) / 4)


def sun_strict(samples: Sequence[Sample]) -> list[Score]:
    """1 when the submission is valid, unique, novel, E_hull <= 0.1 (stability credit 1) and meets
    the condition."""
    return _sun(samples, lambda *parts: float(all(p == 1.0 for p in parts)))


def _composition_distance(a, b) -> float:
    fa, fb = a.composition.fractional_composition, b.composition.fractional_composition
    elements = set(fa.as_dict()) | set(fb.as_dict())
    return 0.5 * sum(abs(fa[e] - fb[e]) for e in elements)


def group_diversity(samples: Sequence[Sample]) -> list[Score]:
    """Mean distance of a valid submission to the group's other valid, judged submissions; 0 for a
    missing or invalid one; unscored for one that could not be judged, and for the only valid one
    of a group whose other members could not be judged (no partner to compare with)."""
    if len(samples) < 2:
        return [Score(None, "diversity needs a group of at least two rollouts")] * len(samples)
    members = [_group_member(_record(s)) for s in samples]
    unjudged = [i for i, (_, own) in enumerate(members) if own is not None and not own.scored]
    matcher = make_matcher()
    out = []
    for i, (a, own) in enumerate(members):
        partners = [b for j, (b, _) in enumerate(members) if j != i and b is not None]
        if a is None:
            out.append(own)
        elif partners:
            d = [0.5 * _composition_distance(a, b) + 0.5 * (0.0 if structures_match(a, b, matcher) else 1.0)
                 for b in partners]
            out.append(Score(sum(d) / len(d)))
        elif [j for j in unjudged if j != i]:
            out.append(Score(None, "the group's other submissions could not be judged"))
        else:
            out.append(Score(1.0, "the only valid submission of its group"))
    return out


def build_components() -> list[RewardComponent]:
    per_episode = [
        ("valid", 0.0, "structure valid after relaxation (distances, volume, SMACT charge neutrality)"),
        ("novel", 0.0, "no StructureMatcher match in the novelty reference"),
        ("stable", 0.0, "E_hull <= 0.1 eV/atom after relaxation (linear partial credit to 0.3)"),
        ("condition_met", 0.0, "submission meets the task's formula / elements / space group"),
        ("band_gap_target", 0.5, "predicted PBE band gap close to the target (band-gap tasks)"),
        ("bulk_modulus_target", 0.5, "Birch-Murnaghan bulk modulus close to the target (bulk-modulus tasks)"),
    ]
    comps = [RewardComponent(n, _per_episode(n), w, d) for n, w, d in per_episode]
    comps += [
        RewardComponent("sun_marginal", sun_marginal, 1.0, "partial SUN credit x condition", group=True),
        RewardComponent("group_diversity", group_diversity, 1.5, "distance to the group's other submissions", group=True),
        RewardComponent("unique", unique_in_group, 0.0, "1/k for k identical submissions in the group", group=True),
        RewardComponent("sun", sun_strict, 0.0, "strict SUN (all criteria at once)", group=True),
    ]
    return comps

