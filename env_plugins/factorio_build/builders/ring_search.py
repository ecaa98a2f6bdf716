def build(world):
    """Ring-search builder: scan drill squares in growing rings around the patch marker, keep the
    cheapest-to-reach layout of the first ring that has one, walk there tile run by tile run, put
    the drill down first and fuel the furnace first."""
    survey = look(world)
    layout = ring_layout(world, survey)
    attempts = 0
    while layout is None and attempts < 3:
        closer(world, survey)
        survey = look(world)
        layout = ring_layout(world, survey)
        attempts += 1
    if layout is None:
        return
    travel(world, layout["stand"])
    if world.tile() != layout["stand"]:
        survey = look(world)
        layout = ring_layout(world, survey) or layout
        travel(world, layout["stand"])
    world.place("burner-mining-drill", layout["drill"][0], layout["drill"][1], layout["facing"])
    world.place("stone-furnace", layout["furnace"][0], layout["furnace"][1], "N")
    placed = {}
    for e in world.entities():
        placed[(e.kind, round(e.x) - 1, round(e.y) - 1)] = e
    oven = placed.get(("furnace", layout["furnace"][0], layout["furnace"][1]))
    drill = placed.get(("mining-drill", layout["drill"][0], layout["drill"][1]))
    if oven is None or drill is None:
        return
    for amount in (5, 5, 5):
        world.give(oven, "coal", amount)
    world.give(drill, "coal", 20)
    world.give(drill, "coal", 5)


def square_of(x, y):
    return [(x, y), (x + 1, y), (x, y + 1), (x + 1, y + 1)]


def look(world):
    """What the scene shows: ore, tiles nobody can enter, and walking distances from here."""
    solid = set(world.blocked_tiles())
    for e in world.entities():
        if e.kind in ("mining-drill", "furnace"):
            for t in square_of(round(e.x) - 1, round(e.y) - 1):
                solid.add(t)
        elif e.kind != "item-entity":
            solid.add((math.floor(e.x), math.floor(e.y)))
    start = world.tile()
    steps = {start: 0}
    back = {start: None}
    queue = [start]
    i = 0
    while i < len(queue):
        x, y = queue[i]
        i += 1
        for n in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if n in steps or n in solid or abs(n[0] - start[0]) + abs(n[1] - start[1]) > 40:
                continue
            steps[n] = steps[(x, y)] + 1
            back[n] = (x, y)
            queue.append(n)
    return {"ore": set(world.ore_tiles("iron-ore")), "solid": solid, "steps": steps, "back": back}


def drop_point(x, y, facing):
    """The tile a drill with top-left (x, y) drops into: (-0.5, -1.3) from its centre, turned."""
    vx, vy = -0.5, -1.296875
    turns = {"N": 0, "E": 1, "S": 2, "W": 3}[facing]
    while turns > 0:
        vx, vy = -vy, vx
        turns -= 1
    return (math.floor(x + 1 + vx), math.floor(y + 1 + vy))


def best_stand(survey, machines):
    """The nearest reachable tile off the machines from which both are in reach, or None."""
    cover = set()
    for m in machines:
        cover.update(square_of(m[0], m[1]))
    best = None
    for t, d in survey["steps"].items():
        if t in cover:
            continue
        near = True
        for m in machines:
            if abs(t[0] + 0.5 - (m[0] + 1)) > 4.5 or abs(t[1] + 0.5 - (m[1] + 1)) > 4.5:
                near = False
        if near and (best is None or d < survey["steps"][best]):
            best = t
    return best


def ring_layout(world, survey):
    """Rings of radius 0, 1, 2, ... around the patch marker; in the first ring with a buildable
    layout, the one whose stand tile is fewest steps away."""
    marker = world.patch() or world.me()
    cx, cy = math.floor(marker[0]) - 1, math.floor(marker[1]) - 1
    ore, solid = survey["ore"], survey["solid"]
    for radius in range(0, 16):
        found = []
        for x in range(cx - radius, cx + radius + 1):
            for y in range(cy - radius, cy + radius + 1):
                if max(abs(x - cx), abs(y - cy)) != radius:
                    continue
                drill = square_of(x, y)
                if any(t not in ore or t in solid for t in drill):
                    continue
                for facing in ("E", "S", "W", "N"):
                    dx, dy = drop_point(x, y, facing)
                    for f in ((dx, dy), (dx - 1, dy), (dx, dy - 1), (dx - 1, dy - 1)):
                        if any(t in solid or t in drill for t in square_of(f[0], f[1])):
                            continue
                        stand = best_stand(survey, [(x, y), f])
                        if stand is not None:
                            found.append((survey["steps"][stand], (x, y), facing, f, stand))
        if found:
            found.sort()
            _, drill_at, facing, furnace_at, stand = found[0]
            return {"drill": drill_at, "facing": facing, "furnace": furnace_at, "stand": stand}
    return None


def closer(world, survey):
    """No layout in view: walk to the reachable tile nearest the patch marker."""
    marker = world.patch()
    if marker is None:
        return
    goal = world.tile()
    for t in survey["steps"]:
        if math.dist((t[0] + 0.5, t[1] + 0.5), marker) < math.dist((goal[0] + 0.5, goal[1] + 0.5), marker):
            goal = t
    travel(world, goal)


def pace(gap):
    for limit, stride in ((4.45, "long"), (1.04, "step")):
        if gap >= limit:
            return stride
    return "nudge"


def line_up(world, axis, target):
    """Stride along `axis` toward `target`; True once within 0.15 tiles, False if stuck."""
    moves = 0
    while moves < 40:
        before = world.me()[axis]
        gap = target - before
        if abs(gap) <= 0.15:
            return True
        direction = ("E" if gap > 0 else "W") if axis == 0 else ("S" if gap > 0 else "N")
        world.move(direction, pace(abs(gap)))
        if abs(world.me()[axis] - before) < 0.01:
            return False
        moves += 1
    return False


def travel(world, goal):
    """Walk runs of the breadth-first route (one axis at a time), re-surveying after a stall."""
    for _ in range(6):
        if world.tile() == goal:
            return
        here = world.tile()
        if not (line_up(world, 0, here[0] + 0.5) and line_up(world, 1, here[1] + 0.5)):
            continue
        back = look(world)["back"]
        if goal not in back:
            return
        path = [goal]
        while back[path[-1]] is not None:
            path.append(back[path[-1]])
        path.reverse()
        i = 0
        while i + 1 < len(path):
            axis = 0 if path[i + 1][0] != path[i][0] else 1
            j = i + 1
            while j + 1 < len(path) and path[j + 1][1 - axis] == path[i][1 - axis]:
                j += 1
            if not line_up(world, axis, path[j][axis] + 0.5):
                break
            i = j
