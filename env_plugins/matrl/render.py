"""Eval artefacts: the submitted (relaxed) structure as CIF and a picture of its cell."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from matrl.structures import parse_structure


def render_sample(sample, out_dir) -> list[Path]:
    """Write ``<task_id>.cif`` and ``<task_id>.png`` for a finished episode's submission."""
    record = sample.episode if isinstance(sample.episode, dict) else sample.episode.record()
    sub = record.get("submission") or {}
    text = sub.get("relaxed") or sub.get("structure")
    if not text:
        return []
    structure = parse_structure(text, max_atoms=10_000)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{record.get('task_id') or 'sample'}_{structure.composition.reduced_formula}")
    cif = out_dir / f"{stem}.cif"
    structure.to(filename=str(cif))
    png = out_dir / f"{stem}.png"
    draw_cell(structure, png, title=_title(sub, structure))
    return [cif, png]


def _title(sub: dict, structure) -> str:
    parts = [structure.composition.reduced_formula]
    if sub.get("e_above_hull") is not None:
        parts.append(f"E_hull {sub['e_above_hull']:.3f} eV/atom")
    if (sub.get("space_group") or {}).get("symbol"):
        parts.append(sub["space_group"]["symbol"])
    return ", ".join(parts)


def draw_cell(structure, path, title: str = "") -> None:
    """Atoms of one cell (colour by element, size by atomic radius) inside the cell's edges."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(4, 4))
    ax = fig.add_subplot(projection="3d")
    m = structure.lattice.matrix
    corners = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)]) @ m
    for a in range(8):
        for b in range(a + 1, 8):
            if bin(a ^ b).count("1") == 1:
                ax.plot(*zip(corners[a], corners[b]), color="grey", lw=0.8)
    symbols = sorted({s.symbol for s in structure.species})
    colours = plt.get_cmap("tab10")
    for k, symbol in enumerate(symbols):
        sites = [s for s in structure if s.specie.symbol == symbol]
        xyz = np.array([s.coords for s in sites])
        radius = float(sites[0].specie.atomic_radius or 1.0)
        ax.scatter(*xyz.T, s=120 * radius**2, color=colours(k % 10), label=symbol, depthshade=True)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
