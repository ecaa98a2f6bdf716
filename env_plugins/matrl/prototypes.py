"""Element tables and simple prototype crystals: the raw material of the default hull and prompts.

Everything here is written from textbook crystallography (rock salt, CsCl, zinc blende, fluorite,
anti-fluorite, cubic perovskite; fcc/bcc/hcp/simple-cubic/diamond elements; diatomic molecules
in a box), with lattice constants guessed from atomic radii; the MLIP relaxation fixes them.
"""

from __future__ import annotations

import math

from pymatgen.core import Element, Lattice, Structure

# Cations with their most common oxidation state, and anions with theirs (charge magnitude).
CATIONS: dict[str, int] = {
    "Li": 1, "Na": 1, "K": 1, "Rb": 1, "Cs": 1, "Ag": 1, "Cu": 1,
    "Be": 2, "Mg": 2, "Ca": 2, "Sr": 2, "Ba": 2, "Zn": 2, "Cd": 2, "Mn": 2, "Fe": 2, "Co": 2, "Ni": 2, "Pb": 2, "Sn": 2,
    "Sc": 3, "Y": 3, "La": 3, "Al": 3, "Ga": 3, "In": 3, "Cr": 3, "Bi": 3,
    "Ti": 4, "Zr": 4, "Hf": 4, "Si": 4, "Ge": 4,
    "Nb": 5, "Ta": 5, "V": 5, "Mo": 6, "W": 6,
}
ANIONS: dict[str, int] = {"O": 2, "S": 2, "Se": 2, "Te": 2, "N": 3, "P": 3, "F": 1, "Cl": 1, "Br": 1, "I": 1}
DIATOMIC_BOND = {"O": 1.21, "N": 1.10, "F": 1.42, "Cl": 1.99, "Br": 2.28, "I": 2.67, "S": 1.89, "Se": 2.17, "P": 1.89}
PEROVSKITE_A = {"Ca": 2, "Sr": 2, "Ba": 2, "K": 1, "Na": 1, "La": 3}
PEROVSKITE_B = {"Ti": 4, "Zr": 4, "Hf": 4, "Sn": 4, "Nb": 5, "Ta": 5, "Al": 3, "Sc": 3, "Ga": 3, "Mg": 2, "Zn": 2, "Ni": 2}


def _radius(symbol: str) -> float:
    r = Element(symbol).atomic_radius
    return float(r) if r is not None else 1.5


def bond_length(a: str, b: str) -> float:
    return 0.9 * (_radius(a) + _radius(b))


GASES = {"O", "N", "F", "Cl", "Br", "I"}
COVALENT = {"C", "Si", "Ge", "Sn"}
CHALCOGEN_PNICTOGEN = {"S", "Se", "Te", "P"}


def element_candidates(symbol: str) -> list[tuple[str, Structure]]:
    """Simple phases of one element; the hull keeps the lowest after relaxation.

    Diatomic gases get only the molecule in a box (a dense packing at their tiny covalent radius
    would be meaningless and makes neighbour lists explode)."""
    d = min(2 * _radius(symbol), 4.5)  # beyond CHGNet's 5 Å cutoff a guessed cell would have isolated atoms
    out: list[tuple[str, Structure]] = []
    if symbol in DIATOMIC_BOND:
        b = DIATOMIC_BOND[symbol]
        out.append(("dimer", Structure(Lattice.cubic(8.0), [symbol] * 2, [[0, 0, 0], [b / 8.0, 0, 0]])))
    if symbol in GASES:
        return out
    if symbol in COVALENT:
        out.append(("diamond", Structure.from_spacegroup("Fd-3m", Lattice.cubic(4 * d / math.sqrt(3)), [symbol], [[0, 0, 0]])
                    .get_primitive_structure()))
    elif symbol in CHALCOGEN_PNICTOGEN:
        out.append(("sc", Structure(Lattice.cubic(d), [symbol], [[0, 0, 0]])))
    else:
        out += [
            ("fcc", Structure(Lattice.cubic(d * math.sqrt(2)), [symbol] * 4, [[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
             .get_primitive_structure()),
            ("bcc", Structure(Lattice.cubic(2 * d / math.sqrt(3)), [symbol] * 2, [[0, 0, 0], [0.5, 0.5, 0.5]])
             .get_primitive_structure()),
            ("hcp", Structure(Lattice.hexagonal(d, d * 1.633), [symbol] * 2, [[1 / 3, 2 / 3, 0.25], [2 / 3, 1 / 3, 0.75]])),
        ]
    return out


def has_binary_prototype(cation: str, anion: str) -> bool:
    """Whether :func:`binary_prototypes` has a charge-balanced cell for this pair (cheap check)."""
    qa, qx = CATIONS[cation], ANIONS[anion]
    return qa == qx or qa == 2 * qx or 2 * qa == qx


def binary_prototypes(cation: str, anion: str) -> list[tuple[str, Structure]]:
    """Charge-balanced AX, AX2 and A2X prototypes for one cation/anion pair."""
    qa, qx = CATIONS[cation], ANIONS[anion]
    d = bond_length(cation, anion)
    out: list[tuple[str, Structure]] = []
    if qa == qx:
        out.append(("rocksalt", Structure.from_spacegroup("Fm-3m", Lattice.cubic(2 * d), [cation, anion], [[0, 0, 0], [0.5, 0.5, 0.5]])))
        out.append(("cscl", Structure(Lattice.cubic(2 * d / math.sqrt(3)), [cation, anion], [[0, 0, 0], [0.5, 0.5, 0.5]])))
        out.append(("zincblende", Structure.from_spacegroup("F-43m", Lattice.cubic(4 * d / math.sqrt(3)), [cation, anion], [[0, 0, 0], [0.25, 0.25, 0.25]])))
    elif qa == 2 * qx:
        out.append(("fluorite", Structure.from_spacegroup("Fm-3m", Lattice.cubic(4 * d / math.sqrt(3)), [cation, anion], [[0, 0, 0], [0.25, 0.25, 0.25]])))
    elif 2 * qa == qx:
        out.append(("antifluorite", Structure.from_spacegroup("Fm-3m", Lattice.cubic(4 * d / math.sqrt(3)), [anion, cation], [[0, 0, 0], [0.25, 0.25, 0.25]])))
    return [(name, s.get_primitive_structure()) for name, s in out]


def perovskite(a: str, b: str, x: str = "O") -> Structure | None:
    """Cubic ABX3 when the charges balance."""
    if PEROVSKITE_A[a] + PEROVSKITE_B[b] != 3 * ANIONS[x]:
        return None
    lat = 2 * bond_length(b, x)
    return Structure(Lattice.cubic(lat), [a, b, x, x, x],
                     [[0, 0, 0], [0.5, 0.5, 0.5], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
