def build(world):
    """Cost-table builder: list every drill/furnace layout in view with its cost (steps to a stand
    tile plus a pull toward the patch marker), take the cheapest, try a straight walk before a
    routed one, and set each machine up completely (place, then fuel) before the next."""
    stop_on_centre(world)
    choice = cheapest(world)
    if choice is None:
        for _ in range(3):
            if choice is not None:
                break
            marker = world.patch()
            if marker is None:
                return
            arrive(world, nearest_open(world, marker))
            choice = cheapest(world)
    if choice is None:
        return
    arrive(world, choice[3])
    if world.tile() != choice[3]:
        choice = cheapest(world) or choice
        arrive(world, choice[3])
    install(world, "stone-furnace", "furnace", choice[2], "N")
    install(world, "burner-mining-drill", "mining-drill", choice[0], choice[1])


def install(world, item, kind, corner, facing):
    world.place(item, corner[0], corner[1], facing)
    for e in world.entities():
        if e.kind == kind and abs(e.x - corner[0] - 1) < 0.01 and abs(e.y - corner[1] - 1) < 0.01:
            world.give(e, "coal", 20)


def cells(corner):
    x, y = corner
    return {(x, y), (x + 1, y), (x, y + 1), (x + 1, y + 1)}


def obstacles(world):
    out = set(world.blocked_tiles())
    for e in world.entities():
        if e.kind == "item-entity":
            continue
        if e.kind in ("mining-drill", "furnace"):
            out |= cells((round(e.x) - 1, round(e.y) - 1))
        else:
            out.add((math.floor(e.x), math.floor(e.y)))
    return out


def neighbours(tile):
    x, y = tile
    return [(x, y - 1), (x + 1, y), (x, y + 1), (x - 1, y)]


def flood(start, avoid, radius):
    """Steps from `start` to every tile reachable inside a `radius` box; and each tile's parent."""
    steps = {start: 0}
    parent = {start: None}
    layer = [start]
    while layer:
        following = []
        for t in layer:
            for n in neighbours(t):
                if n in steps or n in avoid:
                    continue
                if max(abs(n[0] - start[0]), abs(n[1] - start[1])) > radius:
                    continue
                steps[n] = steps[t] + 1
                parent[n] = t
                following.append(n)
        layer = following
    return steps, parent


def dropped_on(corner, facing):
    ox, oy = {"N": (-0.5, -1.296875), "E": (1.296875, -0.5), "S": (0.5, 1.296875), "W": (-1.296875, 0.5)}[facing]
    return (math.floor(corner[0] + 1 + ox), math.floor(corner[1] + 1 + oy))


def furnace_corners(drop):
    return [(drop[0] - i, drop[1] - j) for i in (0, 1) for j in (0, 1)]


def in_reach(tile, corner):
    return abs(tile[0] - corner[0] - 0.5) <= 4 and abs(tile[1] - corner[1] - 0.5) <= 4


def layouts(world):
    """Every (cost, drill corner, facing, furnace corner, stand) that can be built from view."""
    ore = set(world.ore_tiles("iron-ore"))
    avoid = obstacles(world)
    steps, _ = flood(world.tile(), avoid, 25)
    marker = world.patch() or world.me()
    found = []
    for corner in ore:
        body = cells(corner)
        if not body <= ore or body & avoid:
            continue
        pull = 0.3 * math.hypot(corner[0] + 1 - marker[0], corner[1] + 1 - marker[1])
        for facing in ("W", "S", "E", "N"):
            for oven in furnace_corners(dropped_on(corner, facing)):
                shell = cells(oven)
                if shell & avoid or shell & body:
                    continue
                ring = set()
                for t in body | shell:
                    ring.update(neighbours(t))
                spots = [t for t in ring - body - shell if t in steps and in_reach(t, corner) and in_reach(t, oven)]
                if spots:
                    stand = min(spots, key=lambda t: steps[t])
                    found.append((steps[stand] + pull, corner, facing, oven, stand))
    return found


def cheapest(world):
    options = layouts(world)
    if not options:
        return None
    return min(options)[1:]


def nearest_open(world, point):
    steps, _ = flood(world.tile(), obstacles(world), 25)
    return min(steps, key=lambda t: (t[0] + 0.5 - point[0]) ** 2 + (t[1] + 0.5 - point[1]) ** 2)


def step_kind(gap):
    if gap >= 4.45:
        return "long"
    return "step" if gap >= 1.04 else "nudge"


def glide(world, axis, target):
    """Along one axis to within 0.15 tiles of `target`; False when a move goes nowhere."""
    count = 0
    while count < 40:
        was = world.me()[axis]
        gap = target - was
        if abs(gap) <= 0.15:
            return True
        heading = "ESWN"[(0 if gap > 0 else 2) + axis] if axis == 0 else ("S" if gap > 0 else "N")
        world.move(heading, step_kind(abs(gap)))
        if abs(world.me()[axis] - was) < 0.01:
            return False
        count += 1
    return False


def stop_on_centre(world):
    t = world.tile()
    return glide(world, 0, t[0] + 0.5) and glide(world, 1, t[1] + 0.5)


def arrive(world, goal):
    """Straight along x then y when nothing is in the way; otherwise along a flooded route."""
    here = world.tile()
    avoid = obstacles(world)
    lo, hi = min(here[0], goal[0]), max(here[0], goal[0])
    row_clear = all((x, here[1]) not in avoid for x in range(lo, hi + 1))
    lo, hi = min(here[1], goal[1]), max(here[1], goal[1])
    column_clear = all((goal[0], y) not in avoid for y in range(lo, hi + 1))
    if row_clear and column_clear and stop_on_centre(world):
        glide(world, 0, goal[0] + 0.5)
        glide(world, 1, goal[1] + 0.5)
    tries = 0
    while world.tile() != goal and tries < 5:
        tries += 1
        if not stop_on_centre(world):
            continue
        _, parent = flood(world.tile(), obstacles(world), 40)
        if goal not in parent:
            return
        route = []
        tile = goal
        while tile is not None:
            route.insert(0, tile)
            tile = parent[tile]
        for k in range(1, len(route)):
            turn = k + 1 < len(route) and (route[k + 1][0] == route[k][0]) != (route[k][0] == route[k - 1][0])
            if turn or k + 1 == len(route):
                axis = 0 if route[k][1] == route[k - 1][1] else 1
                if not glide(world, axis, route[k][axis] + 0.5):
                    break
