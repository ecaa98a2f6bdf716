"""The reference program: one general builder for every v2 task, and the policy that writes it.

It reads each scene through the API only (ore in view, walls, water, machines), chooses a drill
anchor, facing and furnace tile whose drop lines up, finds a free tile beside both from which to
place them, walks there along a breadth-first path around obstacles, places and fuels; when the
machines already stand (``plate_line``) it finds the aligned pair and fuels it. It is written for
the project and is the upper reference of the eval (``--policy reference``).

It is a *template*: the ``$``-parameters below are the knobs the SFT generator
(:mod:`factorio_build.sft`) varies; :data:`DEFAULTS` is the reference itself. ``belt_smelting``
(belts, inserters, mining coal) is not solved by it, so that task has no reference policy.
"""

from __future__ import annotations

from string import Template

from rlplugs import Message

#: Tasks the reference program solves (v2 action space, one drill-furnace pair).
SOLVES = ("construct_smelting_line", "build_line", "plate_line")

DEFAULTS = {
    "reach": 5,
    "facings": ("S", "E", "N", "W"),
    "centre_weight": 0.5,
    "tolerance": 0.15,
    "drill_coal": (20,),
    "furnace_coal": (20,),
}

TEMPLATE = Template('''
def build(world):
    """Put one burner drill over iron ore with a stone furnace under its drop and fuel both;
    when the machines already stand (nothing to place), fuel the drill-furnace pair instead."""
    stock = world.inventory()
    if stock["burner-mining-drill"] > 0 and stock["stone-furnace"] > 0:
        construct(world)
    else:
        commission(world)


def drop_tile(anchor, facing):
    """The tile a drill whose top-left tile is `anchor` drops onto."""
    dx = -0.5
    dy = -1.296875
    for _ in range("NESW".index(facing)):
        dx, dy = -dy, dx
    return (math.floor(anchor[0] + 1 + dx), math.floor(anchor[1] + 1 + dy))


def square(anchor):
    return [(anchor[0] + i, anchor[1] + j) for i in (0, 1) for j in (0, 1)]


def occupied(world):
    """Tiles nothing may be built or walked on: water, walls and standing machines."""
    taken = set(world.blocked_tiles())
    for e in world.entities():
        if e.kind in ("mining-drill", "furnace"):
            taken.update(square((round(e.x) - 1, round(e.y) - 1)))
        elif e.kind != "item-entity":
            taken.add((math.floor(e.x), math.floor(e.y)))
    return taken


def distances(start, taken, limit):
    """Breadth-first walking distance (in tiles) from `start` to every reachable tile."""
    dist = {start: 0}
    frontier = [start]
    while frontier:
        nxt = []
        for t in frontier:
            for d in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                n = (t[0] + d[0], t[1] + d[1])
                if n not in dist and n not in taken and abs(n[0] - start[0]) + abs(n[1] - start[1]) <= limit:
                    dist[n] = dist[t] + 1
                    nxt.append(n)
        frontier = nxt
    return dist


def stand_for(machines, taken, dist):
    """The nearest reachable free tile right beside the machines (so all are within reach)."""
    covered = set()
    for m in machines:
        covered.update(square(m))
    best = None
    for c in covered:
        for d in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            t = (c[0] + d[0], c[1] + d[1])
            if t in covered or t in taken or t not in dist:
                continue
            if all(abs(t[0] - m[0]) <= $reach and abs(t[1] - m[1]) <= $reach for m in machines):
                if best is None or dist[t] < dist[best]:
                    best = t
    return best


def plan(world):
    """(drill anchor, facing, furnace anchor, stand tile) cheapest to reach, or None."""
    ore = set(world.ore_tiles("iron-ore"))
    taken = occupied(world)
    here = world.tile()
    dist = distances(here, taken, 28)
    centre = world.patch() or world.me()
    anchors = []
    for a in ore:
        if all(t in ore and t not in taken for t in square(a)):
            pull = $centre_weight * math.hypot(a[0] + 1 - centre[0], a[1] + 1 - centre[1])
            walk = max(0, abs(a[0] - here[0]) + abs(a[1] - here[1]) - 6)
            anchors.append((pull + walk, pull, a))
    anchors.sort()
    best = None
    best_cost = 0
    for bound, pull, a in anchors:
        if best is not None and bound >= best_cost:
            break
        drill = square(a)
        for facing in $facings:
            drop = drop_tile(a, facing)
            for f in [(drop[0] - i, drop[1] - j) for i in (0, 1) for j in (0, 1)]:
                oven = square(f)
                if any(t in taken or t in drill for t in oven):
                    continue
                stand = stand_for([a, f], taken, dist)
                if stand is not None and (best is None or dist[stand] + pull < best_cost):
                    best = (a, facing, f, stand)
                    best_cost = dist[stand] + pull
    return best


def path_to(world, goal):
    """Tiles from here to `goal` (inclusive), around everything occupied, or None."""
    taken = occupied(world)
    start = world.tile()
    came = {start: None}
    frontier = [start]
    while frontier and goal not in came:
        nxt = []
        for t in frontier:
            for d in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                n = (t[0] + d[0], t[1] + d[1])
                if n not in came and n not in taken and abs(n[0] - start[0]) + abs(n[1] - start[1]) <= 80:
                    came[n] = t
                    nxt.append(n)
        frontier = nxt
    if goal not in came:
        return None
    tiles = [goal]
    while came[tiles[-1]] is not None:
        tiles.append(came[tiles[-1]])
    tiles.reverse()
    return tiles


def stride(distance):
    if distance >= 30 * 38 / 256:
        return "long"
    if distance >= 7 * 38 / 256:
        return "step"
    return "nudge"


def settle(world, axis, target):
    """Move along one axis until within $tolerance of `target`; False when a move went nowhere."""
    for _ in range(40):
        here = world.me()[axis]
        gap = target - here
        if abs(gap) <= $tolerance:
            return True
        if axis == 0:
            world.move("E" if gap > 0 else "W", stride(abs(gap)))
        else:
            world.move("S" if gap > 0 else "N", stride(abs(gap)))
        if abs(world.me()[axis] - here) < 0.01:
            return False
    return False


def walk(world, goal):
    """Walk tile centre to tile centre along a breadth-first path to `goal`."""
    for _ in range(6):
        here = world.tile()
        if not (settle(world, 0, here[0] + 0.5) and settle(world, 1, here[1] + 0.5)):
            continue
        tiles = path_to(world, goal)
        if tiles is None:
            return False
        blocked = False
        k = 1
        while k < len(tiles) and not blocked:
            axis = 0 if tiles[k][0] != tiles[k - 1][0] else 1
            while k + 1 < len(tiles) and (tiles[k + 1][axis] != tiles[k][axis]) and tiles[k + 1][1 - axis] == tiles[k][1 - axis]:
                k += 1
            blocked = not settle(world, axis, tiles[k][axis] + 0.5)
            k += 1
        if not blocked and world.tile() == goal:
            return True
    return world.tile() == goal


def machine_at(world, kind, anchor):
    for e in world.entities():
        if e.kind == kind and abs(e.x - anchor[0] - 1) < 0.01 and abs(e.y - anchor[1] - 1) < 0.01:
            return e
    return None


def fuel(world, drill, oven):
    for amount in $drill_coal:
        world.give(drill, "coal", amount)
    for amount in $furnace_coal:
        world.give(oven, "coal", amount)


def approach(world):
    """No layout in sight yet: walk to a free tile near the patch marker, where all ore shows."""
    centre = world.patch()
    if centre is None:
        return
    taken = occupied(world)
    dist = distances(world.tile(), taken, 28)
    goal = None
    for t in dist:
        gap = math.hypot(t[0] + 0.5 - centre[0], t[1] + 0.5 - centre[1])
        if goal is None or gap < goal[0]:
            goal = (gap, t)
    if goal is not None:
        walk(world, goal[1])


def construct(world):
    settle(world, 0, world.tile()[0] + 0.5)
    settle(world, 1, world.tile()[1] + 0.5)
    chosen = None
    for _ in range(5):
        chosen = plan(world)
        if chosen is None:
            approach(world)
        elif walk(world, chosen[3]):
            break
    if chosen is None:
        return
    chosen = plan(world) or chosen
    if world.tile() != chosen[3]:
        walk(world, chosen[3])
    a, facing, f, stand = chosen
    world.place("burner-mining-drill", a[0], a[1], facing)
    world.place("stone-furnace", f[0], f[1], "N")
    drill = machine_at(world, "mining-drill", a)
    oven = machine_at(world, "furnace", f)
    if drill is not None and oven is not None:
        fuel(world, drill, oven)


def commission(world):
    """Find a standing drill whose drop lands in a standing furnace, walk there and fuel both."""
    settle(world, 0, world.tile()[0] + 0.5)
    settle(world, 1, world.tile()[1] + 0.5)
    drills = [e for e in world.entities() if e.kind == "mining-drill" and e.facing is not None]
    ovens = [e for e in world.entities() if e.kind == "furnace"]
    for d in drills:
        a = (round(d.x) - 1, round(d.y) - 1)
        drop = drop_tile(a, d.facing)
        for o in ovens:
            f = (round(o.x) - 1, round(o.y) - 1)
            if drop in square(f):
                stand = stand_for([a, f], occupied(world), distances(world.tile(), occupied(world), 28))
                if stand is not None:
                    walk(world, stand)
                d2 = machine_at(world, "mining-drill", a)
                o2 = machine_at(world, "furnace", f)
                if d2 is not None and o2 is not None:
                    fuel(world, d2, o2)
                return
''')


def program(**knobs) -> str:
    """The reference program with some knobs changed (see :data:`DEFAULTS`)."""
    unknown = set(knobs) - set(DEFAULTS)
    if unknown:
        raise KeyError(f"unknown knobs {sorted(unknown)}; knobs: {', '.join(DEFAULTS)}")
    values = {**DEFAULTS, **knobs}
    return TEMPLATE.substitute({k: repr(v) for k, v in values.items()}).lstrip("\n")


def as_completion(source: str) -> str:
    """How a policy answers: the program in one python block."""
    return f"```python\n{source}```"


def reference_policy(messages: list[Message]) -> str:
    """The scripted policy: the same general program for every row (it reads each scene itself)."""
    return as_completion(program())
