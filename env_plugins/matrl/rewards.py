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
trainer may gather a group from several processes and call them anywhere. A term that could not be
computed (a judge down after retries) is ``Score(None, reason)``, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymatgen.core import Composition

from matrl.novelty import make_matcher, structures_match
from matrl.structures import parse_structure
from rlplugs.rewards import RewardComponent, Sample, Score

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


def episode_scores(task: str, target: dict, sub: dict | None) -> dict[str, Score]:
    """The per-episode terms from a submission (``None`` when the agent never submitted)."""
    na = {name: Score(None, f"not applicable to {task} tasks") for name in ("band_gap_target", "bulk_modulus_target")}
    if sub is None:
        zero = Score(0.0, "no submission")
        out = {n: zero for n in ("valid", "novel", "stable", "condition_met")}
        out.update(na)
        for name, kind in (("band_gap_target", "band_gap"), ("bulk_modulus_target", "bulk_modulus")):
            if task == kind:
                out[name] = zero
        return out
    judge_down = "relax_error" in sub and sub.get("structural_valid", True)
    valid = bool(sub.get("valid"))
    if judge_down:  # the MLIP never answered: everything that needs the relaxed cell is unscored
        reason = f"relaxation failed: {sub['relax_error']}"
        out = {"valid": Score(1.0 if valid else 0.0), "novel": Score(None, reason), "stable": Score(None, reason)}
        out["condition_met"] = Score(None, reason) if "space_group" in target else Score(
            1.0 if condition_met(target, sub) else 0.0)
        out.update(na)
        for name, kind in (("band_gap_target", "band_gap"), ("bulk_modulus_target", "bulk_modulus")):
            if task == kind:
                out[name] = Score(None, reason)
        return out
    out = {"valid": Score(1.0 if valid else 0.0), "condition_met": Score(1.0 if condition_met(target, sub) else 0.0)}
    out["novel"] = Score(1.0 if valid and sub.get("novel") else 0.0)
    if not valid:
        out["stable"] = Score(0.0, "invalid structure")
    elif sub.get("e_above_hull") is None:
        out["stable"] = Score(None, sub.get("e_above_hull_error", "no energy above hull"))
    else:
        out["stable"] = Score(stability_credit(sub["e_above_hull"]))
    out.update(na)
    if task == "band_gap":
        out["band_gap_target"] = _target_score(valid, sub, "band_gap_ev", target["band_gap_ev"], BAND_GAP_TOL, BAND_GAP_WIDTH)
    if task == "bulk_modulus":
        t = target["bulk_modulus_gpa"]
        out["bulk_modulus_target"] = _target_score(valid, sub, "bulk_modulus_gpa", t, BULK_TOL_FRAC * t, BULK_WIDTH_FRAC * t)
    return out


def score_submission(row: dict, sub: dict | None) -> dict[str, Score]:
    """An episode's scorer (module level, so finished episodes pickle)."""
    return episode_scores(row["task"], row["target"], sub)


def _target_score(valid: bool, sub: dict, key: str, target: float, tol: float, width: float) -> Score:
    if not valid:
        return Score(0.0, "invalid structure")
    if sub.get(key) is None:
        return Score(None, sub.get(f"{key}_error", f"{key} not computed"))
    return Score(closeness(float(sub[key]), target, tol, width))


# -- reading samples --------------------------------------------------------------------------------
def _record(sample: Sample) -> dict[str, Any]:
    ep = sample.episode
    if ep is None:
        raise ValueError("matrl components score finished episodes (Sample.episode is empty)")
    return ep if isinstance(ep, dict) else ep.record()


def _scores(record: dict[str, Any]) -> dict[str, Score]:
    return episode_scores(record["task"], record.get("target") or {}, record.get("submission"))


def _relaxed(record: dict[str, Any]):
    sub = record.get("submission")
    if not sub or not sub.get("valid") or not sub.get("relaxed"):
        return None
    return parse_structure(sub["relaxed"], max_atoms=10_000)


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


def unique_in_group(samples: Sequence[Sample]) -> list[float]:
    """1/k for a valid submission that k group members (itself included) share; 0 when invalid."""
    structures = [_relaxed(_record(s)) for s in samples]
    return [1.0 / c if c else 0.0 for c in _match_counts(structures)]


def sun_marginal(samples: Sequence[Sample]) -> list[Score]:
    records = [_record(s) for s in samples]
    unique = unique_in_group(samples)
    out = []
    for record, u in zip(records, unique):
        sc = _scores(record)
        parts = [sc["valid"], Score(u), sc["novel"], sc["stable"]]
        missing = [p.reason for p in (*parts, sc["condition_met"]) if not p.scored]
        if missing:
            out.append(Score(None, missing[0]))
        elif sc["valid"].value == 0:
            out.append(Score(0.0, "invalid or missing submission"))
        else:
            out.append(Score(sc["condition_met"].value * sum(p.value for p in parts) / 4))
    return out


def sun_strict(samples: Sequence[Sample]) -> list[Score]:
    """1 when the submission is valid, unique, novel, E_hull <= 0.1 and meets the condition."""
    records = [_record(s) for s in samples]
    out = []
    for record, u in zip(records, unique_in_group(samples)):
        sc = _scores(record)
        sub = record.get("submission") or {}
        if sc["valid"].value and sub.get("e_above_hull") is None:
            out.append(Score(None, sc["stable"].reason))
            continue
        ok = sc["valid"].value == 1 and u == 1 and sc["novel"].value == 1 and sc["condition_met"].value == 1 \
            and sub.get("e_above_hull") is not None and sub["e_above_hull"] <= STABLE_EHULL
        out.append(Score(1.0 if ok else 0.0))
    return out


def _composition_distance(a, b) -> float:
    fa, fb = a.composition.fractional_composition, b.composition.fractional_composition
    elements = set(fa.as_dict()) | set(fb.as_dict())
    return 0.5 * sum(abs(fa[e] - fb[e]) for e in elements)


def group_diversity(samples: Sequence[Sample]) -> list[Score]:
    if len(samples) < 2:
        return [Score(None, "diversity needs a group of at least two rollouts")] * len(samples)
    structures = [_relaxed(_record(s)) for s in samples]
    matcher = make_matcher()
    out = []
    for i, a in enumerate(structures):
        partners = [b for j, b in enumerate(structures) if j != i and b is not None]
        if a is None:
            out.append(Score(0.0, "no valid submission"))
        elif not partners:
            out.append(Score(1.0, "the only valid submission of its group"))
        else:
            d = [0.5 * _composition_distance(a, b) + 0.5 * (0.0 if structures_match(a, b, matcher) else 1.0)
                 for b in partners]
            out.append(Score(sum(d) / len(d)))
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

