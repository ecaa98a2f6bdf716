"""Tasks: what the agent is asked to design, the task mix, and the dataset splits.

Task kinds (the model card's tracks plus two conditioned ones of our own):

============== ================================================== ==============
kind           asks for                                           default share
============== ================================================== ==============
formula        a stable, novel polymorph of a given formula       20 %
unconditional  any stable, novel crystal (<= max_atoms)           10 %
band_gap       a crystal whose PBE band gap is near a target      10 %
bulk_modulus   a crystal whose bulk modulus is near a target      10 %
chemsys        a crystal made of exactly a given set of elements  30 %
space_group    a crystal in a given space group                   20 %
============== ================================================== ==============

The issue fixes 20/10/10/10 % for the first four kinds and calls the rest "40 %", which leaves 10 %
unassigned; we give the whole remaining 50 % to the two conditioned kinds of our own.

Rows come either from the built-in element tables (:mod:`matrl.prototypes`; charge-balanced
formulas and element sets) or from an MP-20-style CSV (``cif``, ``pretty_formula``, ``elements``,
``band_gap``, ``spacegroup.number`` columns) with :func:`load_mp20_csv`. Splits are disjoint by
condition for every task kind (a formula, element set, band-gap or bulk-modulus target, or space
group lands in exactly one of train/validation/test by hash), so validation measures
generalisation to unseen conditions. A kind none of whose conditions falls in a split is left out
of that split, with a logged warning, and its share goes to the other kinds; it is never filled
with another split's conditions. (Continuous targets are disjoint as values: a validation band
gap of 1.3 eV lies between train targets 1.2 and 1.4 eV.)
"""

from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import logging
import random
import warnings
from dataclasses import dataclass
from pathlib import Path

from pymatgen.core import Composition, Structure

from matrl.prototypes import ANIONS, CATIONS

log = logging.getLogger(__name__)

TASK_KINDS = ("formula", "unconditional", "band_gap", "bulk_modulus", "chemsys", "space_group")
DEFAULT_TASK_MIX = {"formula": 0.20, "unconditional": 0.10, "band_gap": 0.10, "bulk_modulus": 0.10,
                    "chemsys": 0.30, "space_group": 0.20}
SPLIT_SHARES = {"train": (0.0, 0.8), "validation": (0.8, 0.9), "test": (0.9, 1.0)}
SPACE_GROUPS = {225: "Fm-3m", 221: "Pm-3m", 216: "F-43m", 194: "P6_3/mmc", 227: "Fd-3m", 139: "I4/mmm",
                166: "R-3m", 62: "Pnma", 12: "C2/m", 14: "P2_1/c", 191: "P6/mmm", 229: "Im-3m"}


@dataclass(frozen=True)
class MP20Row:
    material_id: str
    structure: Structure
    formula: str
    elements: tuple[str, ...]
    band_gap: float | None
    space_group: int | None


def _open_csv(path: str | Path):
    return (gzip.open if Path(path).suffix == ".gz" else open)(path, "rt", newline="")


def check_mp20_csv(path: str | Path) -> None:
    """Raise ``ValueError`` unless ``path`` is a readable CSV with a ``cif`` column (reads the
    header only, so a config is checked before any model loads)."""
    try:
        with _open_csv(path) as fh:
            header = next(csv.reader(fh), [])
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"{str(path)!r}: cannot read it ({reason}); give an MP-20-style CSV "
                         "(.csv or .csv.gz with a 'cif' column)") from None
    if "cif" not in header:
        raise ValueError(f"{str(path)!r}: no 'cif' column (columns: {', '.join(header[:8]) or 'none'}); "
                         "give an MP-20-style CSV (CDVAE format)")


def load_mp20_csv(path: str | Path, max_atoms: int | None = None) -> list[MP20Row]:
    """Rows of an MP-20-style CSV (CDVAE format, plain or ``.gz``); rows whose CIF does not parse
    are skipped."""
    from pymatgen.io.cif import CifParser

    rows = []
    with _open_csv(path) as fh:
        for rec in csv.DictReader(fh):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    structure = CifParser.from_str(rec["cif"]).parse_structures(primitive=False)[0]
            except Exception:  # noqa: BLE001 - a broken row is skipped, the rest still load
                continue
            if max_atoms is not None and len(structure) > max_atoms:
                continue
            elements = tuple(sorted(ast.literal_eval(rec["elements"]))) if rec.get("elements") else tuple(
                sorted(el.symbol for el in structure.composition.elements))
            rows.append(MP20Row(
                rec.get("material_id", ""), structure, rec.get("pretty_formula") or structure.composition.reduced_formula,
                elements, float(rec["band_gap"]) if rec.get("band_gap") not in (None, "") else None,
                int(float(rec["spacegroup.number"])) if rec.get("spacegroup.number") not in (None, "") else None,
            ))
    return rows


def split_of(condition: str) -> str:
    u = int(hashlib.sha1(condition.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return next(name for name, (lo, hi) in SPLIT_SHARES.items() if lo <= u < hi or (hi == 1.0 and u == 1.0))


def builtin_conditions() -> dict[str, list]:
    """Formulas, element sets, band-gap and bulk-modulus targets, space groups from our tables."""
    formulas, systems = set(), set()
    cations, anions = sorted(CATIONS), sorted(ANIONS)
    for c in cations:
        for a in anions:
            comp = Composition({c: ANIONS[a], a: CATIONS[c]})
            formulas.add(comp.reduced_formula)
            systems.add((c, a))
            for c2 in cations:
                if c2 > c and CATIONS[c2] != CATIONS[c]:
                    systems.add((c, c2, a))
                    q = CATIONS[c] + CATIONS[c2]
                    if q % ANIONS[a] == 0:
                        formulas.add(Composition({c: 1, c2: 1, a: q // ANIONS[a]}).reduced_formula)
    return {
        "formula": sorted(formulas),
        "chemsys": sorted("-".join(sorted(s)) for s in systems),
        "band_gap": [round(0.5 + 0.1 * k, 2) for k in range(36)],  # 0.5-4.0 eV: 27 train, 5 validation, 4 test
        "bulk_modulus": [float(k) for k in range(40, 301, 10)],
        "space_group": sorted(SPACE_GROUPS),
        "unconditional": [f"u{k}" for k in range(200)],
    }


def mp20_conditions(rows: list[MP20Row]) -> dict[str, list]:
    """The same condition lists drawn from a real MP-20-style file."""
    conds = builtin_conditions()
    conds["formula"] = sorted({r.formula for r in rows})
    conds["chemsys"] = sorted({"-".join(r.elements) for r in rows})
    gaps = sorted({round(r.band_gap, 1) for r in rows if r.band_gap and r.band_gap > 0.3})
    conds["band_gap"] = gaps or conds["band_gap"]
    groups = sorted({r.space_group for r in rows if r.space_group in SPACE_GROUPS})
    conds["space_group"] = groups or conds["space_group"]
    return conds


def build_rows(split: str, n: int, mix: dict[str, float], conditions: dict[str, list], seed: int = 0,
               max_atoms: int = 20) -> list[dict]:
    """``n`` task rows of ``split`` drawn with the task mix; each row carries its kind and target."""
    if split not in SPLIT_SHARES:
        raise KeyError(f"unknown split {split!r}; splits: {', '.join(SPLIT_SHARES)}")
    pools = {kind: [c for c in conditions[kind] if split_of(f"{kind}:{c}") == split] for kind in TASK_KINDS}
    kinds = []
    for kind in (k for k in TASK_KINDS if mix.get(k, 0) > 0):
        if pools[kind]:
            kinds.append(kind)
        else:
            log.warning("matrl %s split: none of the %d %s conditions falls in this split, so it has no %s tasks "
                        "(their %.0f%% share goes to the other kinds)", split, len(conditions[kind]), kind, kind,
                        100 * mix[kind])
    if not kinds:
        raise ValueError(f"matrl {split} split: no task kind of the mix has a condition in this split")
    total = sum(mix[k] for k in kinds)
    exact = {k: mix[k] / total * n for k in kinds}
    counts = {k: int(exact[k]) for k in kinds}
    for k in sorted(kinds, key=lambda k: exact[k] - counts[k], reverse=True)[: n - sum(counts.values())]:
        counts[k] += 1  # largest remainders: exactly n rows
    rng = random.Random(f"{seed}:{split}")
    rows = []
    for kind in kinds:
        for _ in range(counts[kind]):
            rows.append(task_row(kind, rng.choice(pools[kind]), max_atoms))
    rng.shuffle(rows)
    for i, row in enumerate(rows):
        row["task_id"] = f"{split}-{i:05d}-{row['task']}"
    return rows


def task_row(kind: str, condition, max_atoms: int = 20) -> dict:
    """One task: ``task`` kind, the ``target`` dict the scorer checks, and the user request text."""
    if kind == "formula":
        target, ask = {"formula": Composition(condition).reduced_formula}, f"with the formula {condition} (any multiple of it per cell)"
    elif kind == "chemsys":
        elements = condition.split("-")
        target, ask = {"elements": elements}, f"made of exactly the elements {', '.join(elements)} (all of them, no others)"
    elif kind == "space_group":
        target = {"space_group": int(condition)}
        ask = f"in space group {SPACE_GROUPS[int(condition)]} (No. {int(condition)}) after relaxation"
    elif kind == "band_gap":
        target, ask = {"band_gap_ev": float(condition)}, f"whose PBE band gap is close to {float(condition):.2f} eV"
    elif kind == "bulk_modulus":
        target, ask = {"bulk_modulus_gpa": float(condition)}, f"whose bulk modulus is close to {float(condition):.0f} GPa"
    elif kind == "unconditional":
        target, ask = {}, "of any composition"
    else:
        raise KeyError(f"unknown task kind {kind!r}; kinds: {', '.join(TASK_KINDS)}")
    request = (f"Design a novel, thermodynamically stable inorganic crystal {ask}, with at most {max_atoms} atoms "
               "in the cell. Evaluate candidates, refine them, and submit your best one.")
    return {"task": kind, "target": target, "request": request, "max_atoms": max_atoms}


def validate_mix(mix: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(mix) - set(TASK_KINDS))
    if unknown:
        raise ValueError(f"unknown task kind(s) {unknown} in task_mix; kinds: {', '.join(TASK_KINDS)}")
    total = sum(mix.values())
    if any(v < 0 for v in mix.values()) or abs(total - 1.0) > 1e-6:
        raise ValueError(f"task_mix shares must be >= 0 and sum to 1 (got {total:.4f})")
    return mix
