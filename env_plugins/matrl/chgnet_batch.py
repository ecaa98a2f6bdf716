"""CHGNet energies, forces and stresses for many graphs in one vectorised pass.

Why: ``CHGNet.forward`` featurises its batch graph by graph (``BatchedGraph.from_graphs`` runs ~30
small tensor ops per structure) and differentiates twice with ``create_graph=True`` (kept for
training). On a GPU with hundreds of 10-atom cells that is thousands of tiny kernel launches per
step plus a second-order autograd graph. Here the same features are computed for the whole batch at
once (per-edge lattice offsets instead of a per-graph lattice) and forces and stress come from one
first-order ``autograd.grad``. The network itself (``CHGNet._compute``) is CHGNet's own; results
equal ``model(graphs, task="efs")`` to float precision (``tests/test_matrl_relax.py``).
"""

from __future__ import annotations

import numpy as np
import torch
from chgnet.model.model import BatchedGraph

GPA_PER_EV_PER_A3 = 160.21766208


def _cat(graphs, name: str) -> torch.Tensor:
    return torch.cat([getattr(g, name) for g in graphs], dim=0)


def predict_efs(model, graphs, device: str) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(energy per atom [G], forces per structure [n_i x 3] eV/Å, stress [G x 3 x 3] GPa)."""
    n_atoms = torch.tensor([g.atomic_number.shape[0] for g in graphs])
    n_directed = torch.tensor([g.atom_graph.shape[0] for g in graphs])
    n_undirected = torch.tensor([g.undirected2directed.shape[0] for g in graphs])
    n_angles = torch.tensor([g.bond_graph.shape[0] if g.bond_graph.dim() == 2 else 0 for g in graphs])
    atom_offset = torch.cumsum(n_atoms, 0) - n_atoms
    directed_offset = torch.cumsum(n_directed, 0) - n_directed
    undirected_offset = torch.cumsum(n_undirected, 0) - n_undirected
    graph_ids = torch.arange(len(graphs))
    atom_gid = torch.repeat_interleave(graph_ids, n_atoms)
    edge_gid = torch.repeat_interleave(graph_ids, n_directed)
    undirected_gid = torch.repeat_interleave(graph_ids, n_undirected)
    angle_gid = torch.repeat_interleave(graph_ids, n_angles)

    atom_graph = _cat(graphs, "atom_graph").long() + atom_offset[edge_gid, None]
    bond_graph = (torch.cat([g.bond_graph for g in graphs if g.bond_graph.dim() == 2 and len(g.bond_graph)], 0).long()
                  if int(n_angles.sum()) else torch.zeros(0, 5, dtype=torch.long))
    to = {"device": device}
    frac = _cat(graphs, "atom_frac_coord").detach().to(**to)
    lattice = torch.stack([g.lattice.detach() for g in graphs]).to(**to)
    image = _cat(graphs, "neighbor_image").to(**to)
    atomic_numbers = _cat(graphs, "atomic_number").to(**to)
    atom_graph, atom_gid_d, edge_gid_d = atom_graph.to(**to), atom_gid.to(**to), edge_gid.to(**to)
    u2d = (_cat(graphs, "undirected2directed").long() + directed_offset[undirected_gid]).to(**to)
    d2u = (_cat(graphs, "directed2undirected").long() + undirected_offset[edge_gid]).to(**to)
    angle_directed_offset = directed_offset[angle_gid].to(**to)
    angle_undirected_offset = undirected_offset[angle_gid].to(**to)
    bond_graph = bond_graph.to(**to)

    strain = torch.zeros(len(graphs), 3, 3, device=device, requires_grad=True)
    strained = lattice @ (torch.eye(3, device=device) + strain)
    volumes = torch.linalg.det(strained)
    cart = torch.bmm(frac[:, None, :], strained[atom_gid_d]).squeeze(1)
    offsets = torch.bmm(image[:, None, :], strained[edge_gid_d]).squeeze(1)
    bond_ag, bond_bg, bond_vectors = model.bond_basis_expansion(
        center=cart[atom_graph[:, 0]], neighbor=cart[atom_graph[:, 1]], undirected2directed=u2d,
        image=offsets, lattice=torch.eye(3, device=device),
    )
    if len(bond_graph):
        angle_bases = model.angle_basis_expansion(bond_vectors[bond_graph[:, 2] + angle_directed_offset],
                                                  bond_vectors[bond_graph[:, 4] + angle_directed_offset])
        batched_bond_graph = torch.stack([bond_graph[:, 0] + atom_offset.to(**to)[angle_gid.to(**to)],
                                          bond_graph[:, 1] + angle_undirected_offset,
                                          bond_graph[:, 3] + angle_undirected_offset], dim=1).int()
    else:
        angle_bases, batched_bond_graph = torch.tensor([], device=device), torch.tensor([], device=device)
    batched = BatchedGraph(
        atomic_numbers=atomic_numbers, bond_bases_ag=bond_ag, bond_bases_bg=bond_bg, angle_bases=angle_bases,
        batched_atom_graph=atom_graph.int(), batched_bond_graph=batched_bond_graph, atom_owners=atom_gid_d.int(),
        directed2undirected=d2u.int(), atom_positions=[cart], strains=[strain], volumes=volumes,
    )
    energy = model._compute(batched)["e"]  # per atom when the model is intensive
    atoms = n_atoms.to(**to).to(energy.dtype)
    total = energy * atoms if model.is_intensive else energy
    grad_pos, grad_strain = torch.autograd.grad(total.sum(), [cart, strain])
    ref = model.composition_model
    if ref is not None:  # AtomRef: a linear fit on element counts (fractions when intensive)
        counts = torch.zeros(len(graphs), ref.max_num_elements).index_put_(
            (atom_gid, _cat(graphs, "atomic_number").long() - 1), torch.ones(len(atom_gid)), accumulate=True)
        if ref.is_intensive:
            counts = counts / n_atoms[:, None]
        energy = energy + ref.fc(counts.to(**to)).view(-1)
    stress = grad_strain / volumes[:, None, None] * GPA_PER_EV_PER_A3
    forces = (-grad_pos).detach().cpu().numpy().astype(np.float64)
    return (energy.detach().cpu().numpy().astype(np.float64),
            np.split(forces, np.cumsum(n_atoms.numpy())[:-1]),
            stress.detach().cpu().numpy().astype(np.float64))
