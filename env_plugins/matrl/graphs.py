"""CHGNet crystal graphs built straight from arrays, vectorised with numpy.

Why: CHGNet's converter wants a pymatgen ``Structure`` and pairs edges and enumerates bond angles
in Python loops (~3 ms for a 12-atom cell). A batched relaxation rebuilds every graph at every
step, so on the H200 the converter, not the network, set the pace (7.8 s of 13.2 s for 1,024
relaxations). The graph is the same one CHGNet defines:

- directed edges: every (centre, neighbour, periodic image) pair closer than the atom-graph cutoff,
  from pymatgen's neighbour search (the one ``Structure.get_neighbor_list`` calls), in its order;
- undirected edges: an edge and its reverse (neighbour, centre, -image) share one undirected edge,
  numbered in order of first appearance; ``undirected2directed`` points at that first edge;
- angles (``bond_graph`` rows ``[centre, undirected a, directed a, undirected b, directed b]``): every
  ordered pair of distinct directed edges a, b on one centre, a's undirected edge no longer than the
  bond-graph cutoff and b shorter than it.

Angle rows come out in another order than CHGNet's; the network sums over them, so energies,
forces and stresses agree to float rounding (``tests/test_matrl_graphs.py`` checks the arrays
against CHGNet's converter and the predictions against ``model(graphs, task="efs")``).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from pymatgen.optimization.neighbors import find_points_in_spheres

NUMERICAL_TOL = 1e-8  # pymatgen's default: closer than this is the atom itself
TENSORS = ("atomic_number", "atom_frac_coord", "atom_graph", "neighbor_image", "directed2undirected",
           "undirected2directed", "bond_graph", "lattice")


def graph_arrays(numbers: np.ndarray, lattice: np.ndarray, frac: np.ndarray, atom_cutoff: float,
                 bond_cutoff: float, on_isolated_atoms: str = "error") -> dict[str, np.ndarray]:
    """The arrays of one CHGNet ``CrystalGraph`` (names as in ``TENSORS``) for a periodic cell."""
    n_atoms = len(numbers)
    lattice = np.ascontiguousarray(lattice, dtype=float)
    cart = np.ascontiguousarray(np.asarray(frac, dtype=float) @ lattice)
    center, neighbor, image, distance = find_points_in_spheres(
        cart, cart, r=float(atom_cutoff), pbc=np.ones(3, dtype=np.int64), lattice=lattice, tol=NUMERICAL_TOL)
    keep = ~((center == neighbor) & (distance <= NUMERICAL_TOL))
    center, neighbor = center[keep].astype(np.int64), neighbor[keep].astype(np.int64)
    image, distance = image[keep].astype(np.int64), distance[keep]
    isolated = n_atoms - len(np.unique(center))
    if isolated and on_isolated_atoms != "ignore":  # CHGNet's converter setting: error, warn or ignore
        msg = f"{isolated} isolated atom(s) with atom_graph_cutoff={atom_cutoff} Å: CHGNet cannot score this cell"
        if on_isolated_atoms == "error":
            raise ValueError(msg)
        warnings.warn(msg, stacklevel=2)

    # an edge's reverse: one int64 key per (centre, neighbour, image), looked up by sorting
    edges = np.arange(len(center))
    span = int(np.abs(image).max(initial=0)) + 1
    base = 2 * span + 1

    def key(c, nb, img):
        return (((c * n_atoms + nb) * base + img[:, 0] + span) * base + img[:, 1] + span) * base + img[:, 2] + span

    forward, reverse = key(center, neighbor, image), key(neighbor, center, -image)
    order = np.argsort(forward, kind="stable")
    at = np.minimum(np.searchsorted(forward[order], reverse), len(order) - 1)
    partner = np.where(forward[order][at] == reverse, order[at], -1)
    first = np.where(partner >= 0, np.minimum(edges, partner), edges)  # the edge that opened the pair
    opens = first == edges
    directed2undirected = (np.cumsum(opens) - 1)[first]
    undirected2directed = edges[opens]

    short_a = distance[first] <= bond_cutoff  # CHGNet keeps an undirected edge up to the cutoff ...
    short_b = distance < bond_cutoff  # ... and pairs it with directed edges strictly below it
    if (short_a & (partner < 0)).any():
        raise ValueError("a bond shorter than the bond-graph cutoff has no reverse edge")
    a_idx, b_idx = np.flatnonzero(short_a), np.flatnonzero(short_b)
    same = (center[a_idx, None] == center[None, b_idx]) & (a_idx[:, None] != b_idx[None, :])
    rows_a, rows_b = np.nonzero(same)
    a, b = a_idx[rows_a], b_idx[rows_b]
    bond_graph = np.stack([center[a], directed2undirected[a], a, directed2undirected[b], b], axis=1)
    return {
        "atomic_number": np.asarray(numbers, dtype=np.int32),
        "atom_frac_coord": np.asarray(frac, dtype=np.float32),
        "atom_graph": np.stack([center, neighbor], axis=1).astype(np.int32),
        "neighbor_image": image.astype(np.float32),
        "directed2undirected": directed2undirected.astype(np.int32),
        "undirected2directed": undirected2directed.astype(np.int32),
        "bond_graph": bond_graph.astype(np.int32),
        "lattice": lattice.astype(np.float32),
    }


def crystal_graph(arrays: dict[str, np.ndarray], converter):
    """A CHGNet ``CrystalGraph`` over the arrays (what CHGNet's network and ``predict_efs`` take)."""
    from chgnet.graph.crystalgraph import CrystalGraph

    tensors = {k: torch.from_numpy(arrays[k]) for k in TENSORS}
    tensors["atom_frac_coord"].requires_grad_(True)
    tensors["lattice"].requires_grad_(True)
    return CrystalGraph(**tensors, atom_graph_cutoff=converter.atom_graph_cutoff,
                        bond_graph_cutoff=converter.bond_graph_cutoff, composition="")
