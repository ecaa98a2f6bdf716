"""Bulk modulus from a 3rd-order Birch–Murnaghan fit of clamped-ion single points.

Why clamped-ion: a full EOS re-relaxes every strained cell (11 relaxations in matcalc/CHGNet),
10-100x the cost of the episode's own relaxation. Here the *relaxed* cell is scaled isotropically
to a few volumes with fixed fractional coordinates and each point is one static MLIP call, all in
one batch. Clamping ions stiffens low-symmetry cells a little (K biased high) while MPtrj-trained
MLIPs soften the surface (K biased low); the reward therefore scores a tolerance band.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pymatgen.analysis.eos import EOS
from pymatgen.core import Structure

LINEAR_STRAINS = (-0.03, -0.015, 0.0, 0.015, 0.03)


@dataclass(frozen=True)
class BulkModulus:
    k_gpa: float
    v0: float
    r2: float


class EOSFitError(ValueError):
    """The energy-volume points do not define a sensible minimum (e.g. an unbound cell)."""


def strained_cells(structure: Structure, strains=LINEAR_STRAINS) -> list[Structure]:
    cells = []
    for s in strains:
        cell = structure.copy()
        cell.scale_lattice(structure.volume * (1 + s) ** 3)
        cells.append(cell)
    return cells


def fit_birch_murnaghan(volumes, energies) -> BulkModulus:
    """Fit E(V) (eV, Å^3) and return K0 in GPa, refusing unphysical fits."""
    volumes, energies = np.asarray(volumes, float), np.asarray(energies, float)
    if not (np.all(np.isfinite(volumes)) and np.all(np.isfinite(energies))):
        raise EOSFitError("non-finite energies or volumes")
    try:
        fit = EOS("birch_murnaghan").fit(volumes, energies)
    except Exception as exc:  # noqa: BLE001 - scipy/pymatgen raise several types on bad data
        raise EOSFitError(f"Birch–Murnaghan fit failed: {exc}") from None
    k = float(fit.b0_GPa)
    predicted = np.array([fit.func(v) for v in volumes])
    residual = float(np.sum((energies - predicted) ** 2))
    spread = float(np.sum((energies - energies.mean()) ** 2)) or 1e-30
    r2 = 1.0 - residual / spread
    if not np.isfinite(k) or k <= 0 or k > 2000:
        raise EOSFitError(f"fitted bulk modulus {k:.3g} GPa is unphysical (cell not at an energy minimum?)")
    return BulkModulus(k, float(fit.v0), r2)
