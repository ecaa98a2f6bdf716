"""``matrl.graphs`` builds the graph CHGNet's own converter builds, from arrays (real CHGNet, real
cells); ``tests/test_matrl_relax.py`` checks the network's predictions from both graphs."""

import numpy as np
import pytest
from pymatgen.core import Lattice, Structure

from matrl.graphs import graph_arrays

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    from chgnet.model import CHGNet

    return CHGNet.load(verbose=False, use_device="cpu")


def _cells():
    rng = np.random.default_rng(0)
    nacl = Structure.from_spacegroup("Fm-3m", Lattice.cubic(5.6), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    perovskite = Structure(Lattice.cubic(3.9), ["Sr", "Ti", "O", "O", "O"],
                           [[0, 0, 0], [0.5, 0.5, 0.5], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    perovskite.make_supercell([2, 1, 1])
    out = [
        Structure(Lattice.cubic(2.9), ["Fe"], [[0, 0, 0]]),  # one atom: every edge joins an atom to its own image
        Structure(Lattice([[2.5, 0, 0], [0, 2.6, 0], [0.3, 0, 9.0]]), ["C", "C"], [[0, 0, 0], [0.5, 0.5, 0.1]]),
        nacl, perovskite,
    ]
    for s in out:
        s.perturb(0.05, min_distance=0.0)
        s.scale_lattice(s.volume * float(rng.uniform(0.95, 1.05)))
    return out


def _arrays(s: Structure, conv):
    numbers = np.array([sp.Z for sp in s.species])
    return graph_arrays(numbers, s.lattice.matrix, s.frac_coords, conv.atom_graph_cutoff, conv.bond_graph_cutoff)


def test_graph_arrays_equal_chgnet_converter(model):
    conv = model.graph_converter
    for s in _cells():
        theirs, ours = conv(s), _arrays(s, conv)
        for name in ("atomic_number", "atom_graph", "neighbor_image", "directed2undirected", "undirected2directed"):
            assert np.array_equal(getattr(theirs, name).detach().numpy(), ours[name]), name
        assert np.allclose(theirs.atom_frac_coord.detach().numpy(), ours["atom_frac_coord"])
        assert np.allclose(theirs.lattice.detach().numpy(), ours["lattice"])
        angles = theirs.bond_graph.numpy().reshape(-1, 5)
        assert len(angles) == len(ours["bond_graph"]) > 0
        assert set(map(tuple, angles.tolist())) == set(map(tuple, ours["bond_graph"].tolist()))  # order may differ


def test_isolated_atom_is_a_clear_error(model):
    conv = model.graph_converter
    lone = Structure(Lattice.cubic(30.0), ["Na", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]])
    with pytest.raises(ValueError, match="isolated atom"):
        _arrays(lone, conv)
    with pytest.raises(ValueError, match="isolated atom"):
        conv(lone)  # CHGNet's own converter refuses it too
