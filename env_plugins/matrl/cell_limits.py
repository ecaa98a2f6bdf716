"""Limits a cell must meet before any judge or validity check touches it.

Why: the model is an untrusted author, and some parseable cells cannot be computed at all. A cell
1e-5 Å thick makes a neighbour search enumerate millions of periodic images (it ran for minutes
and asked for a terabyte); an atom with no neighbour inside CHGNet's 6 Å graph cutoff, or an
element beyond CHGNet's 94-element embedding, makes the MLIP raise. Such a cell is *rejected*: the
tool answers with what is wrong and what real crystals look like, the turn is spent, and the
episode goes on. Cells within these limits that break the SUN validity rules (atoms closer than
0.5 Å, no charge-neutral assignment) are not rejected here: they are judged, and score as invalid.

The limits are loose against real crystals (MP-20 cells: volume 5-60 Å^3 per atom, lattice
vectors 2-30 Å), so no real structure is refused, and tight enough that every check after them
(neighbour lists up to 6 Å, CHGNet graphs) stays small.
"""

from __future__ import annotations

import numpy as np
from pymatgen.core import Structure

from matrl.structures import StructureInputError

MAX_Z = 94  # CHGNet 0.3.0's atom embedding covers H (1) to Pu (94)
MAX_LATTICE_LENGTH = 100.0  # Å
MIN_CELL_HEIGHT = 0.5  # Å, distance between opposite faces of the cell
MIN_VOLUME_PER_ATOM = 2.0  # Å^3 (diamond, the densest common solid: 5.7)
MAX_ABS_FRACTIONAL = 10.0  # fractional coordinates far outside the cell make image searches huge
NEIGHBOUR_CUTOFF = 6.0  # Å, CHGNet's atom-graph cutoff: an atom with no neighbour inside it cannot be scored


def check_cell_limits(structure: Structure) -> None:
    """Raise :class:`~matrl.structures.StructureInputError` (message for the model) when the
    judges cannot compute ``structure``; return quietly otherwise."""
    unsupported = sorted({sp.symbol for sp in structure.species if sp.Z > MAX_Z})
    if unsupported:
        raise StructureInputError(
            f"Element(s) {', '.join(unsupported)} are beyond what the judges know (H to Pu, Z <= {MAX_Z})."
        )
    matrix = structure.lattice.matrix
    frac = structure.frac_coords
    if not (np.all(np.isfinite(matrix)) and np.all(np.isfinite(frac))):
        raise StructureInputError("Lattice or coordinates contain non-finite numbers.")
    lengths = np.linalg.norm(matrix, axis=1)
    if lengths.max() > MAX_LATTICE_LENGTH:
        raise StructureInputError(
            f"Lattice vector of {lengths.max():.4g} Å; at most {MAX_LATTICE_LENGTH:g} Å is accepted "
            "(real cells with 20 atoms are 2-30 Å)."
        )
    volume = abs(float(np.linalg.det(matrix)))
    heights = [volume / np.linalg.norm(np.cross(matrix[i], matrix[j])) for i, j in ((1, 2), (2, 0), (0, 1))]
    if min(heights) < MIN_CELL_HEIGHT:
        raise StructureInputError(
            f"The cell is too flat: {min(heights):.3g} Å between opposite faces (at least {MIN_CELL_HEIGHT} Å). "
            "Check the lattice lengths and angles, or give a reduced cell."
        )
    if volume / len(structure) < MIN_VOLUME_PER_ATOM:
        raise StructureInputError(
            f"Volume per atom is {volume / len(structure):.3g} Å^3; at least {MIN_VOLUME_PER_ATOM:g} Å^3 is accepted "
            "(real crystals have 5-60 Å^3 per atom). Enlarge the lattice."
        )
    if np.abs(frac).max() > MAX_ABS_FRACTIONAL:
        raise StructureInputError("Fractional coordinates must lie near the cell; give them in [0, 1).")
    centres, _, _, _ = structure.get_neighbor_list(r=NEIGHBOUR_CUTOFF, exclude_self=True)
    isolated = sorted(set(range(len(structure))) - set(centres.tolist()))
    if isolated:
        names = ", ".join(f"{structure[i].specie.symbol} (site {i})" for i in isolated[:5])
        raise StructureInputError(
            f"Atom(s) {names} have no neighbour within {NEIGHBOUR_CUTOFF:g} Å, so the judge cannot score the "
            "cell. Make the cell denser."
        )
