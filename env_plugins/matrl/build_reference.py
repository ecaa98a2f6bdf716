"""Build the package's default approximate hull and novelty reference with the reward MLIP.

    python -m matrl.build_reference [--out env_plugins/matrl/data/chgnet_hull_reference.json]

Relaxes the simple phases of :mod:`matrl.prototypes` (elements: fcc/bcc/sc/hcp/diamond and
diatomic molecules, lowest kept; binaries: rock salt, CsCl, zinc blende, fluorite, anti-fluorite;
cubic perovskites) with CHGNet in batches, and writes energies (CHGNet's MP2020-compatible scale)
plus relaxed structures. The result is *our* data, derived only from textbook prototypes, and an
approximate hull: real systems have more phases, so E_hull measured against it is optimistic.
"""

from __future__ import annotations

import argparse
import logging

from matrl.hull import DEFAULT_REFERENCE, MP2020_SCALE, HullEntry, HullReference, save_hull_reference
from matrl.prototypes import ANIONS, CATIONS, PEROVSKITE_A, PEROVSKITE_B, binary_prototypes, element_candidates, perovskite
from matrl.relax import BatchRelaxer
from matrl.structures import structure_to_json

log = logging.getLogger(__name__)


def build(steps: int = 60, fmax: float = 0.05, device: str = "cpu") -> HullReference:
    import json

    jobs = []
    for symbol in sorted({*CATIONS, *ANIONS}):
        jobs += [(symbol, name, s) for name, s in element_candidates(symbol)]
    for cation in CATIONS:
        for anion in ANIONS:
            jobs += [(None, name, s) for name, s in binary_prototypes(cation, anion)]
    for a in PEROVSKITE_A:
        for b in PEROVSKITE_B:
            for x in ("O", "F"):
                s = perovskite(a, b, x)
                if s is not None:
                    jobs.append((None, "perovskite", s))
    relaxer = BatchRelaxer(device=device)
    # dimers keep their box: a static energy at the textbook bond length
    moving = [j for j in jobs if j[1] != "dimer"]
    fixed = [j for j in jobs if j[1] == "dimer"]
    results = []
    for start in range(0, len(moving), 64):
        chunk = moving[start : start + 64]
        relaxed = relaxer.relax([s for _, _, s in chunk], steps=steps, fmax=fmax)
        results += [(el, name, r.structure, r.energy_per_atom) for (el, name, _), r in zip(chunk, relaxed)]
        log.info("relaxed %d/%d", start + len(chunk), len(moving))
    for (el, name, s), (e, _, _) in zip(fixed, relaxer.static([s for _, _, s in fixed])):
        results.append((el, name, s, e))
    best_element: dict[str, tuple] = {}
    entries = []
    for el, name, s, e in results:
        if el is not None:
            if el not in best_element or e < best_element[el][3]:
                best_element[el] = (el, name, s, e)
            continue
        entries.append(HullEntry(s.composition.reduced_formula, e, name, json.loads(structure_to_json(s))))
    for el, name, s, e in best_element.values():
        entries.append(HullEntry(el, e, name, json.loads(structure_to_json(s))))
    return HullReference(MP2020_SCALE, entries, approximate=True, source="matrl.build_reference")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1].strip())
    parser.add_argument("--out", default=str(DEFAULT_REFERENCE))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--fmax", type=float, default=0.05)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    reference = build(args.steps, args.fmax, args.device)
    save_hull_reference(reference, args.out, meta={
        "mlip": "CHGNet 0.3.0 (chgnet wheel)", "relax": {"optimizer": "FIRE+UnitCellFilter", "steps": args.steps, "fmax": args.fmax},
        "note": "approximate hull from textbook prototypes relaxed with the reward MLIP; built by matrl.build_reference",
    })
    log.info("wrote %d entries to %s", len(reference.entries), args.out)


if __name__ == "__main__":
    main()
