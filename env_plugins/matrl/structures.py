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

from matrl.untrusted_json import UntrustedJSONError, loads

MAX_INPUT_CHARS = 20_000
MAX_JSON_DEPTH = 8  # the JSON form is 3 deep: {"lattice": [[...]]}
# Sites x symmetry operations that pymatgen may expand from a CIF. Its merging grows faster than
# linearly (3,840 candidate positions took 12 s, 9,600 took 45 s); 1,000 covers any <= 20-atom cell
# written in its space group (fluorite in Fm-3m: 3 sites x 192 operations).
MAX_CIF_CANDIDATES = 1_000


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
        data = loads(body, MAX_JSON_DEPTH, MAX_INPUT_CHARS)
    except UntrustedJSONError as exc:
        raise StructureInputError(f"Structure {exc}.") from None
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
    except (TypeError, ValueError, OverflowError) as exc:
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
    from pymatgen.io.cif import CifFile, CifParser

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for block in CifFile.from_str(body).data.values():
                _check_cif_expansion(block)
            structures = CifParser.from_str(body).parse_structures(primitive=False)
    except StructureInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - pymatgen raises many types for bad CIFs
        raise StructureInputError(f"CIF does not parse: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not structures:
        raise StructureInputError("CIF contains no structure.")
    structure = structures[0]
    if not structure.is_ordered:
        raise StructureInputError("Disordered sites (partial occupancies) are not supported; give an ordered cell.")
    return structure


_CIF_SYMOPS = ("_symmetry_equiv_pos_as_xyz", "_symmetry_equiv_pos_as_xyz_", "_space_group_symop_operation_xyz",
               "_space_group_symop_operation_xyz_")
_CIF_GROUP = ("_symmetry_space_group_name_H-M", "_space_group_name_H-M_alt", "_symmetry_Int_Tables_number",
              "_space_group_IT_number", "_space_group_name_Hall")
MAX_SYMOPS = 192  # Fm-3m and friends; a CIF that names its group without listing operations gets this bound


def _check_cif_expansion(block) -> None:
    """Refuse a CIF block whose symmetry expansion would be too large to compute quickly (counted
    from the text: generating a named group's operations alone takes a second)."""
    labels = block.data.get("_atom_site_label") or block.data.get("_atom_site_type_symbol") or []
    sites = len(labels) if isinstance(labels, list) else 1
    listed = next((block.data[k] for k in _CIF_SYMOPS if block.data.get(k)), None)
    group = next((str(block.data[k]).replace(" ", "").strip("'\"") for k in _CIF_GROUP if block.data.get(k)), "1")
    if listed:
        ops = len(listed) if isinstance(listed, list) else 1
    else:
        ops = 1 if group in ("1", "P1", "P_1") else MAX_SYMOPS
    if sites * ops > MAX_CIF_CANDIDATES:
        raise StructureInputError(
            f"CIF lists {sites} sites to expand by up to {ops} symmetry operations ({sites * ops} positions); at "
            f"most {MAX_CIF_CANDIDATES} are accepted. Give the cell in P1 or list fewer sites."
        )


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
