"""Batched FIRE over CHGNet's batched forward pass = ASE's sequential FIRE + UnitCellFilter with
CHGNet's ASE calculator, step for step (small cells, few steps: CPU CI)."""

import numpy as np
import pytest
from pymatgen.core import Lattice, Structure

from matrl.elastic import fit_birch_murnaghan, strained_cells
from matrl.relax import BatchRelaxer, relax_with_ase


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def relaxer():
    return BatchRelaxer()


def _cells():
    nacl = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.9), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    nacl = nacl.get_primitive_structure()
    nacl.perturb(0.08, min_distance=0.02)
    cscl = Structure(Lattice.cubic(4.4), ["Cs", "Cl"], [[0, 0, 0], [0.52, 0.5, 0.48]])
    mgo = Structure(Lattice([[3.1, 0, 0], [0, 3.3, 0], [0.2, 0, 3.5]]), ["Mg", "O"], [[0, 0, 0], [0.5, 0.45, 0.5]])
    return [nacl, cscl, mgo]


def test_batched_relaxation_matches_sequential_ase_fire(relaxer):
    cells = _cells()
    batched = relaxer.relax(cells, steps=4, fmax=0.1)
    for cell, ours in zip(cells, batched):
        ase = relax_with_ase(cell, relaxer.model, steps=4, fmax=0.1)
        assert ours.steps == ase.steps
        assert ours.energy_per_atom == pytest.approx(ase.energy_per_atom, abs=1e-4)
        assert np.abs(ours.structure.lattice.matrix - ase.structure.lattice.matrix).max() < 1e-3
        assert np.abs(ours.structure.cart_coords - ase.structure.cart_coords).max() < 1e-3
    assert batched[0].energy_per_atom < relaxer.static([cells[0]])[0][0]  # relaxing lowered the energy


@pytest.mark.parametrize("graphs_by", ["chgnet converter", "matrl.graphs"])
def test_vectorised_featurisation_equals_chgnet_forward(relaxer, graphs_by):
    from matrl.chgnet_batch import predict_efs
    from matrl.graphs import crystal_graph, graph_arrays

    conv, cells = relaxer.model.graph_converter, _cells()  # _cells() rattles afresh on every call
    reference = relaxer.model([conv(c) for c in cells], task="efs")
    if graphs_by == "chgnet converter":
        graphs = [conv(c) for c in cells]
    else:
        graphs = [crystal_graph(graph_arrays(np.array([sp.Z for sp in c.species]), c.lattice.matrix, c.frac_coords,
                                             conv.atom_graph_cutoff, conv.bond_graph_cutoff), conv) for c in cells]
    energies, forces, stresses = predict_efs(relaxer.model, graphs, "cpu")
    assert energies == pytest.approx(reference["e"].detach().numpy(), abs=1e-5)
    for ours, theirs in zip(forces, reference["f"]):
        assert np.abs(ours - theirs.detach().numpy()).max() < 1e-4
    for ours, theirs in zip(stresses, reference["s"]):
        assert np.abs(ours - theirs.detach().numpy()).max() < 1e-3


def test_batch_results_do_not_depend_on_batch_company(relaxer):
    cells = _cells()
    together = relaxer.relax(cells, steps=3)
    alone = [relaxer.relax([c], steps=3)[0] for c in cells]
    for a, b in zip(together, alone):
        assert a.energy_per_atom == pytest.approx(b.energy_per_atom, abs=1e-5)
        assert np.abs(a.structure.cart_coords - b.structure.cart_coords).max() < 1e-4


def test_packing_limit_splits_forward_passes_without_changing_results(relaxer):
    cells = _cells()
    small = BatchRelaxer(relaxer.model, max_atoms_per_batch=2)
    assert [r.energy_per_atom for r in small.relax(cells, steps=2)] == pytest.approx(
        [r.energy_per_atom for r in relaxer.relax(cells, steps=2)], abs=1e-5)


def test_graph_worker_pool_gives_the_same_relaxations(relaxer):
    cells = _cells() * 2
    pooled = BatchRelaxer(relaxer.model, graph_workers=2)
    try:
        assert [r.energy_per_atom for r in pooled.relax(cells, steps=2)] == pytest.approx(
            [r.energy_per_atom for r in relaxer.relax(cells, steps=2)], abs=1e-6)
    finally:
        pooled.close()


def test_bulk_modulus_of_relaxed_rocksalt_is_physical(relaxer):
    mgo = Structure.from_spacegroup("Fm-3m", Lattice.cubic(4.21), ["Mg", "O"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    relaxed = relaxer.relax([mgo.get_primitive_structure()], steps=10)[0].structure
    cells = strained_cells(relaxed)
    energies = [e * len(c) for c, (e, _, _) in zip(cells, relaxer.static(cells))]
    k = fit_birch_murnaghan([c.volume for c in cells], energies)
    assert 100 < k.k_gpa < 250  # DFT (MP) K_VRH of MgO is ~150 GPa; MLIPs run soft
    assert k.r2 > 0.99
