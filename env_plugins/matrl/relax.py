"""Batched FIRE relaxation (atoms + cell) over CHGNet's batched forward pass.

Why our own optimiser: ASE relaxes one structure at a time, so a GPU sits idle between tiny
forward passes (one 10-atom cell per call). Here many structures share each forward pass and each
keeps its own FIRE state. The algorithm is ASE's ``FIRE`` driving ASE's ``UnitCellFilter``
(generalised coordinates = positions in the undeformed cell + ``n_atoms`` x deformation gradient),
step for step, so one structure relaxed here matches ASE's sequential relaxation within float
tolerance; ``tests/test_matrl_relax.py`` checks exactly that against the real ASE optimiser.

Converged structures leave the batch (ASE stops them too); ``steps`` counts optimiser steps, so a
relaxation makes at most ``steps + 1`` force calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from pymatgen.core import Lattice, Structure

from matrl.graphs import crystal_graph, graph_arrays


EV_PER_A3_PER_GPA = 1.0 / 160.21766208  # ase.units.GPa
Cell = tuple[np.ndarray, np.ndarray, np.ndarray]  # atomic numbers, lattice rows, fractional coordinates


def _cell(structure: Structure) -> Cell:
    return np.array([sp.Z for sp in structure.species]), structure.lattice.matrix, structure.frac_coords


@dataclass
class Relaxed:
    """One relaxation's outcome: final structure, energy per atom (MLIP scale) and how it went."""

    structure: Structure
    energy_per_atom: float
    max_force: float  # largest generalised force row (eV/Å), as ASE's convergence check sees it
    steps: int
    converged: bool
    stress_gpa: np.ndarray


@dataclass
class _FireState:
    """ASE FIRE's per-optimiser state (dt, alpha, steps since uphill, velocity)."""

    orig_cell: np.ndarray
    species: list
    numbers: np.ndarray  # atomic numbers (what the graph needs)
    x: np.ndarray  # (n+3, 3) UnitCellFilter coordinates
    vel: np.ndarray | None = None
    dt: float = 0.1
    a: float = 0.1
    n_pos: int = 0
    steps: int = 0
    done: bool = False
    result: Relaxed | None = None

    @property
    def n(self) -> int:
        return len(self.species)

    def deform(self) -> np.ndarray:
        return self.x[self.n :] / self.n  # cell_factor = n atoms (ASE default)

    def cell(self) -> Cell:
        """The current geometry as the graph builder takes it."""
        f = self.deform()
        lattice = self.orig_cell @ f.T
        return self.numbers, lattice, np.linalg.solve(lattice.T, (self.x[: self.n] @ f.T).T).T

    def structure(self) -> Structure:
        _, lattice, frac = self.cell()
        return Structure(Lattice(lattice), self.species, frac)


class FireParams:
    """ASE's FIRE defaults (Bitzek et al. 2006 as implemented in ``ase.optimize.FIRE``)."""

    dt = 0.1
    maxstep = 0.2
    dtmax = 1.0
    n_min = 5
    finc = 1.1
    fdec = 0.5
    astart = 0.1
    fa = 0.99


def _start(structure: Structure) -> _FireState:
    n = len(structure)
    x = np.zeros((n + 3, 3))
    x[:n] = structure.cart_coords  # deformation gradient is the identity at the start
    x[n:] = n * np.eye(3)
    return _FireState(orig_cell=structure.lattice.matrix.copy(), species=list(structure.species),
                      numbers=_cell(structure)[0], x=x)


def _generalised_forces(st: _FireState, forces: np.ndarray, stress_gpa: np.ndarray, volume: float) -> np.ndarray:
    """UnitCellFilter forces: atom forces in the undeformed frame, virial / cell_factor for the cell."""
    f = st.deform()
    sym = 0.5 * (stress_gpa + stress_gpa.T) * EV_PER_A3_PER_GPA
    virial = np.linalg.solve(f, (-volume * sym).T).T
    out = np.zeros_like(st.x)
    out[: st.n] = forces @ f
    out[st.n :] = virial / st.n
    return out


def _fire_step(st: _FireState, force: np.ndarray, p=FireParams) -> None:
    if st.vel is None:
        st.vel = np.zeros_like(st.x)
    else:
        vf = float(np.vdot(force, st.vel))
        if vf > 0.0:
            st.vel = (1.0 - st.a) * st.vel + st.a * force / np.sqrt(np.vdot(force, force)) * np.sqrt(np.vdot(st.vel, st.vel))
            if st.n_pos > p.n_min:
                st.dt = min(st.dt * p.finc, p.dtmax)
                st.a *= p.fa
            st.n_pos += 1
        else:
            st.vel[:] = 0.0
            st.a = p.astart
            st.dt *= p.fdec
            st.n_pos = 0
    st.vel = st.vel + st.dt * force
    dr = st.dt * st.vel
    norm = float(np.sqrt(np.vdot(dr, dr)))
    if norm > p.maxstep:
        dr = p.maxstep * dr / norm
    st.x = st.x + dr


_WORKER_CONVERTER = None


def _init_graph_worker(converter) -> None:
    global _WORKER_CONVERTER
    torch.set_num_threads(1)
    _WORKER_CONVERTER = converter


def _graph_arrays(cells: list[Cell], converter=None) -> list[dict]:
    """CHGNet graph arrays of many cells, with ``converter``'s cutoffs (in a worker: its own copy)."""
    conv = converter or _WORKER_CONVERTER
    return [graph_arrays(*cell, conv.atom_graph_cutoff, conv.bond_graph_cutoff, conv.on_isolated_atoms)
            for cell in cells]


class BatchRelaxer:
    """Relaxes lists of structures with one CHGNet model, many structures per forward pass.

    ``max_atoms_per_batch`` bounds GPU memory: active structures are packed into forward passes
    of at most that many atoms. Graphs are rebuilt from arrays every step on the CPU
    (``matrl.graphs``, ~0.3 ms per 12-atom cell); with ``graph_workers > 0`` a process pool
    builds them in parallel, so the GPU is not left waiting on one CPU core.
    """

    def __init__(self, model=None, device: str = "cpu", max_atoms_per_batch: int = 4096, graph_workers: int = 0):
        if model is None:
            from chgnet.model import CHGNet

            model = CHGNet.load(verbose=False, use_device=device)
        self.model = model.to(device).eval()
        self.device = device
        self.max_atoms_per_batch = max_atoms_per_batch
        self.seconds = {"graphs": 0.0, "forward": 0.0}  # where the time goes (benchmark report)
        self.graph_workers = graph_workers
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _graphs(self, cells: list[Cell]) -> list:
        conv = self.model.graph_converter
        if self.graph_workers <= 0 or len(cells) < 2 * self.graph_workers:
            arrays = _graph_arrays(cells, conv)
        else:
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing import get_context

            if self._pool is None:  # spawn: forking a process that holds CUDA state is unsafe
                self._pool = ProcessPoolExecutor(self.graph_workers, mp_context=get_context("spawn"),
                                                 initializer=_init_graph_worker, initargs=(conv,))
            size = -(-len(cells) // (4 * self.graph_workers))
            chunks = [cells[i : i + size] for i in range(0, len(cells), size)]
            arrays = [a for chunk in self._pool.map(_graph_arrays, chunks) for a in chunk]
        return [crystal_graph(a, conv) for a in arrays]

    def _forward(self, cells: list[Cell]) -> list[tuple[float, np.ndarray, np.ndarray]]:
        from matrl.chgnet_batch import predict_efs

        start = time.perf_counter()
        graphs = self._graphs(cells)  # stay on the CPU: predict_efs moves whole batches
        self.seconds["graphs"] += time.perf_counter() - start
        start = time.perf_counter()
        out: list[tuple[float, np.ndarray, np.ndarray]] = []
        first = 0
        while first < len(graphs):
            end, atoms = first, 0
            while end < len(graphs) and (end == first or atoms + len(cells[end][0]) <= self.max_atoms_per_batch):
                atoms += len(cells[end][0])
                end += 1
            energies, forces, stresses = predict_efs(self.model, graphs[first:end], self.device)
            out += [(float(energies[k]), forces[k], stresses[k]) for k in range(end - first)]
            first = end
        self.seconds["forward"] += time.perf_counter() - start
        return out

    def static(self, structures: list[Structure]) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """Energy per atom, forces (eV/Å) and stress (GPa) without moving anything."""
        return self._forward([_cell(s) for s in structures])

    def relax(self, structures: list[Structure], steps: int = 20, fmax: float = 0.1) -> list[Relaxed]:
        """Relax all structures together; results come back in input order."""
        states = [_start(s) for s in structures]
        while True:
            active = [st for st in states if not st.done]
            if not active:
                break
            current = [st.cell() for st in active]
            for st, (_, lattice, _), (e, f, stress) in zip(active, current, self._forward(current)):
                g = _generalised_forces(st, f, stress, abs(float(np.linalg.det(lattice))))
                max_force = float(np.sqrt((g**2).sum(axis=1).max()))
                converged = max_force < fmax
                if converged or st.steps >= steps:
                    st.done = True
                    st.result = Relaxed(st.structure(), e, max_force, st.steps, converged, stress)
                else:
                    _fire_step(st, g)
                    st.steps += 1
        return [st.result for st in states]  # type: ignore[misc]


def relax_with_ase(structure: Structure, model, steps: int = 20, fmax: float = 0.1) -> Relaxed:
    """The sequential reference: ASE FIRE on ASE's UnitCellFilter with CHGNet's ASE calculator."""
    from ase.filters import UnitCellFilter
    from ase.optimize import FIRE
    from chgnet.model.dynamics import CHGNetCalculator
    from pymatgen.io.ase import AseAtomsAdaptor

    atoms = AseAtomsAdaptor.get_atoms(structure)
    atoms.calc = CHGNetCalculator(model=model, use_device=str(next(model.parameters()).device))
    opt = FIRE(UnitCellFilter(atoms), logfile=None)
    converged = opt.run(fmax=fmax, steps=steps)
    energy = float(atoms.get_potential_energy()) / len(atoms)
    stress = atoms.get_stress(voigt=False) / EV_PER_A3_PER_GPA
    max_force = float(np.sqrt((opt.optimizable.get_gradient().reshape(-1, 3) ** 2).sum(axis=1).max()))
    return Relaxed(AseAtomsAdaptor.get_structure(atoms), energy, max_force, opt.nsteps, bool(converged), stress)
