"""Structures as the model writes them: CIF text or a small JSON form, parsed defensively.

The model is an untrusted author. Everything it sends goes through :func:`parse_structure`, which
either returns a pymatgen ``Structure`` or raises :class:`StructureInputError` whose message says
what was wrong and how to fix it; the episode sends that message back as the tool response, so a
bad structure costs the model a turn, never the worker.

JSON form (what the system prompt teaches)::

    {"lattice": [[a1x, a1y, a1z], [a2x, ...], [a3x, ...]]            # Å, or
     "lattice": {"a": 4.1, "b": 4.1, "c": 4.1, "alpha": 90, "beta": 90, "gamma": 90},
     "species": ["Cs", "Cl"],
     "frac_coords": [[0, 0, 0], [0.5, 0.5, 0.5]]}
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings

import numpy as np
from pymatgen.core import Element, Lattice, Structure

MAX_INPUT_CHARS = 20_000


class StructureInputError(ValueError):
    """The structure text could not be turned into a usable crystal; the message is for the model."""


def parse_structure(text: str, max_atoms: int = 20) -> Structure:
    """CIF or JSON text -> ``Structure`` (at most ``max_atoms`` sites), or a StructureInputError."""
    if not isinstance(text, str) or not text.strip():
        raise StructureInputError("No structure given. Pass a CIF string or JSON with lattice, species, frac_coords.")
    if len(text) > MAX_INPUT_CHARS:
        raise StructureInputError(f"Structure text is {len(text)} characters; the limit is {MAX_INPUT_CHARS}.")
    body = text.strip()
    structure = _from_json(body) if body.startswith("{") else _from_cif(body)
    if len(structure) > max_atoms:
        raise StructureInputError(
            f"Structure has {len(structure)} atoms; the limit is {max_atoms} atoms per cell. Use a smaller "
            "(e.g. primitive) cell."
        )
    if len(structure) == 0:
        raise StructureInputError("Structure has no atoms.")
    if not np.all(np.isfinite(structure.lattice.matrix)) or structure.volume <= 1e-6:
        raise StructureInputError("Lattice is degenerate (zero or non-finite volume); give three independent vectors.")
    return structure


def _from_json(body: str) -> Structure:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise StructureInputError(f"Structure JSON does not parse ({exc.msg} at character {exc.pos}).") from None
    if not isinstance(data, dict):
        raise StructureInputError("Structure JSON must be an object with lattice, species, frac_coords.")
    missing = [k for k in ("lattice", "species", "frac_coords") if k not in data]
    if missing:
        raise StructureInputError(f"Structure JSON lacks {', '.join(missing)}; required: lattice, species, frac_coords.")
    species, coords = data["species"], data["frac_coords"]
    if not isinstance(species, list) or not isinstance(coords, list) or len(species) != len(coords):
        raise StructureInputError("species and frac_coords must be lists of the same length (one entry per atom).")
    for sym in species:
        if not isinstance(sym, str) or not Element.is_valid_symbol(sym):
            raise StructureInputError(f"Unknown element symbol {sym!r}; use symbols like 'Fe', 'O'.")
    try:
        lattice = _lattice(data["lattice"])
        frac = np.asarray(coords, dtype=float).reshape(len(coords), 3)
    except (TypeError, ValueError) as exc:
        raise StructureInputError(f"Bad numbers in lattice or frac_coords: {exc}.") from None
    if not np.all(np.isfinite(frac)):
        raise StructureInputError("frac_coords contain non-finite numbers.")
    return Structure(lattice, species, frac)


def _lattice(value) -> Lattice:
    if isinstance(value, dict):
        keys = ("a", "b", "c", "alpha", "beta", "gamma")
        if not all(k in value for k in keys):
            raise ValueError("lattice parameters need a, b, c, alpha, beta, gamma")
        params = [float(value[k]) for k in keys]
        if not all(math.isfinite(p) for p in params) or min(params[:3]) <= 0:
            raise ValueError("lattice lengths must be positive finite numbers")
        return Lattice.from_parameters(*params)
    matrix = np.asarray(value, dtype=float)
    if matrix.shape != (3, 3):
        raise ValueError(f"lattice must be a 3x3 matrix, got shape {matrix.shape}")
    return Lattice(matrix)


def _from_cif(body: str) -> Structure:
    if "_cell_length_a" not in body:
        raise StructureInputError(
            "Text is neither JSON (starting with '{') nor a CIF (no _cell_length_a found)."
        )
    from pymatgen.io.cif import CifParser

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            structures = CifParser.from_str(body).parse_structures(primitive=False)
    except Exception as exc:  # noqa: BLE001 - pymatgen raises many types for bad CIFs
        raise StructureInputError(f"CIF does not parse: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not structures:
        raise StructureInputError("CIF contains no structure.")
    structure = structures[0]
    if not structure.is_ordered:
        raise StructureInputError("Disordered sites (partial occupancies) are not supported; give an ordered cell.")
    return structure


def structure_key(structure: Structure, decimals: int = 4) -> str:
    """A content hash of the cell (lattice, species, wrapped fractional coordinates) for caches."""
    frac = np.round(np.mod(structure.frac_coords, 1.0), decimals) % 1.0
    payload = {
        "lattice": np.round(structure.lattice.matrix, decimals).tolist(),
        "sites": sorted(zip([s.symbol for s in structure.species], frac.tolist())),
    }
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def structure_to_json(structure: Structure) -> str:
    """The compact JSON form above (round-trips through :func:`parse_structure`)."""
    return json.dumps({
        "lattice": np.round(structure.lattice.matrix, 5).tolist(),
        "species": [s.symbol for s in structure.species],
        "frac_coords": np.round(structure.frac_coords, 5).tolist(),
    })
