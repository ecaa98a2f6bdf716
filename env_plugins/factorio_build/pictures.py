"""Pictures of a program's builds, and its verified builds as Factorio blueprint strings.

``render`` runs the sample's program again through the sandbox pool (a picture of an untrusted
program's work is still produced by the sandbox) and draws each scene of its row: ore, walls,
water, the start and the patch marker, and every machine the program placed with its facing.
Each verified build is also written as a blueprint string (``factorio-draftsman``) that pastes
into the real game: what the simulator verified is the layout a player can place.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from fsim import water_tiles

from factorio_build import rows

log = logging.getLogger(__name__)

SIZES = {"burner-mining-drill": 2, "stone-furnace": 2}
COLOURS = {"burner-mining-drill": "#4a4a8a", "stone-furnace": "#c0642b"}
ARROWS = {"N": (0, -0.8), "E": (0.8, 0), "S": (0, 0.8), "W": (-0.8, 0)}


def blueprint_string(built: list) -> str:
    """A blueprint of placed machines, each ``(item, tile_x, tile_y, facing)`` (top-left tile).

    draftsman is imported here, not at module load: it is only needed to export, and importing it
    costs a second and half a dozen packages that training workers never use."""
    from draftsman.blueprintable import Blueprint
    from draftsman.constants import Direction

    directions = {"N": Direction.NORTH, "E": Direction.EAST, "S": Direction.SOUTH, "W": Direction.WEST}
    blueprint = Blueprint()
    blueprint.label = "factorio-build"
    for item, x, y, facing in built:
        blueprint.entities.append(item, tile_position=(int(x), int(y)), direction=directions[facing])
    return blueprint.to_string()


def _draw_scene(ax, blueprint: dict, scene: dict) -> None:
    from matplotlib.patches import Rectangle

    ore = [r["position"] for r in blueprint["resources"]]
    walls = [e["position"] for e in blueprint["entities"] if e["name"] == "stone-wall"]
    start = blueprint["character"]["position"]
    xs = [p[0] for p in ore + walls] + [start[0]]
    ys = [p[1] for p in ore + walls] + [start[1]]
    lo_x, hi_x, lo_y, hi_y = min(xs) - 4, max(xs) + 4, min(ys) - 4, max(ys) + 4
    for x, y in water_tiles():
        if lo_x <= x <= hi_x and lo_y <= y <= hi_y:
            ax.add_patch(Rectangle((x, y), 1, 1, color="#7fb3e6"))
    for x, y in ore:
        ax.add_patch(Rectangle((math.floor(x), math.floor(y)), 1, 1, color="#b8a07a"))
    for x, y in walls:
        ax.add_patch(Rectangle((math.floor(x), math.floor(y)), 1, 1, color="#555555"))
    for item, x, y, facing in scene["built"]:
        size = SIZES.get(item, 1)
        ax.add_patch(Rectangle((x, y), size, size, facecolor=COLOURS.get(item, "#888888"), edgecolor="black"))
        if item == "burner-mining-drill":
            dx, dy = ARROWS[facing]
            ax.arrow(x + 1, y + 1, dx, dy, head_width=0.35, color="white")
    ax.plot(start[0], start[1], "o", color="#1f5fbf", markersize=5)
    marker = (blueprint.get("markers") or {}).get("patch")
    if marker:
        ax.plot(marker[0], marker[1], "x", color="black", markersize=6)
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(hi_y, lo_y)  # +y is south
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    verdict = "verified" if scene["success"] else "not verified"
    ax.set_title(f"{scene['family']} #{scene['seed'][-6:]}\n{verdict} ({scene['verified_output']} plates)", fontsize=7)


def render(sample, out_dir, *, scorer) -> list[Path]:
    """Draw every scene of the sample's row (one PNG) and write each verified build's blueprint.

    Returns the written files; none when the program never ran (no code, refused, pool down)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    verdict = scorer.verdicts([sample])[0]
    scenes = getattr(verdict, "scenes", None)
    if not scenes:
        log.info("factorio-build: nothing to render (%s)", getattr(verdict, "reason", verdict))
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    row = sample.row
    stem = str(row.get("row_id", "row")).replace("/", "_")
    cols = min(4, len(scenes))
    nrows = math.ceil(len(scenes) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3 * cols, 3.2 * nrows), squeeze=False)
    for ax in axes.flat[len(scenes):]:
        ax.axis("off")
    written: list[Path] = []
    for ax, scene in zip(axes.flat, scenes):
        _, blueprint = rows.scene(row["task"], row["split"], scene["seed"])
        _draw_scene(ax, blueprint, scene)
        if scene["success"] and scene["built"]:
            path = out / f"{stem}_seed{scene['seed']}.blueprint.txt"
            path.write_text(blueprint_string(scene["built"]) + "\n")
            written.append(path)
    fig.suptitle(f"{row.get('row_id', '')}: {verdict.outcome}, success {verdict.success:.2f}", fontsize=9)
    fig.tight_layout()
    png = out / f"{stem}.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [png, *written]
