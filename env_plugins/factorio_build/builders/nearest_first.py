def build(world):
    """Greedy builder: take the free 2x2 ore square nearest to where we stand whose drop has room
    for a furnace, walk there along a breadth-first route, put the furnace down first, then the
    drill, and fuel the furnace before the drill."""
    centre_on_tile(world)
    site = None
    for _ in range(4):
        site = choose_site(world)
        if site is not None:
            break
        head_for_patch(world)
    if site is None:
        return
    if not go_to(world, site[3]):
        site = choose_site(world) or site
        go_to(world, site[3])
    drill_at, facing, furnace_at, stand = site
    world.place("stone-furnace", furnace_at[0], furnace_at[1], "N")
    world.place("burner-mining-drill", drill_at[0], drill_at[1], facing)
    furnace = find(world, "furnace", furnace_at)
    drill = find(world, "mining-drill", drill_at)
    if furnace is not None and drill is not None:
        world.give(furnace, "coal", 20)
        world.give(drill, "coal", 20)


def drop_offset(facing):
    """Where a burner drill drops, from its centre, for each facing."""
    return {"N": (-0.5, -1.296875), "E": (1.296875, -0.5), "S": (0.5, 1.296875), "W": (-1.296875, 0.5)}[facing]


def footprint(corner):
    return [(corner[0] + dx, corner[1] + dy) for dx in (0, 1) for dy in (0, 1)]


def blocked(world):
    """Water, walls and every standing entity's tiles."""
    tiles = set(world.blocked_tiles())
    for e in world.entities():
        if e.kind == "mining-drill" or e.kind == "furnace":
            tiles.update(footprint((round(e.x) - 1, round(e.y) - 1)))
        elif e.kind != "item-entity":
            tiles.add((math.floor(e.x), math.floor(e.y)))
    return tiles


def reachable(origin, walls):
    """Breadth-first: tile -> (steps, previous tile), within 30 tiles of `origin`."""
    seen = {origin: (0, None)}
    queue = [origin]
    head = 0
    while head < len(queue):
        tile = queue[head]
        head += 1
        for dx, dy in ((0, 1), (1, 0), (0, -1), (-1, 0)):
            nxt = (tile[0] + dx, tile[1] + dy)
            if nxt in seen or nxt in walls:
                continue
            if abs(nxt[0] - origin[0]) > 30 or abs(nxt[1] - origin[1]) > 30:
                continue
            seen[nxt] = (seen[tile][0] + 1, tile)
            queue.append(nxt)
    return seen


def within_reach(tile, corner):
    return max(abs(tile[0] - corner[0] - 0.5), abs(tile[1] - corner[1] - 0.5)) <= 4


def choose_site(world):
    """(drill corner, facing, furnace corner, stand tile) for the nearest workable ore square."""
    walls = blocked(world)
    ore = set(world.ore_tiles("iron-ore"))
    here = world.tile()
    routes = reachable(here, walls)
    corners = sorted(ore, key=lambda t: abs(t[0] - here[0]) + abs(t[1] - here[1]))
    for corner in corners:
        drill = footprint(corner)
        if not all(t in ore and t not in walls for t in drill):
            continue
        for facing in "SENW":
            dx, dy = drop_offset(facing)
            drop = (math.floor(corner[0] + 1 + dx), math.floor(corner[1] + 1 + dy))
            for fx in (drop[0] - 1, drop[0]):
                for fy in (drop[1] - 1, drop[1]):
                    furnace = footprint((fx, fy))
                    if any(t in walls or t in drill for t in furnace):
                        continue
                    stand = None
                    spots = [(x, y) for x in range(fx - 4, fx + 6) for y in range(fy - 4, fy + 6)]
                    for t in spots:
                        if t not in routes or t in drill or t in furnace:
                            continue
                        if within_reach(t, corner) and within_reach(t, (fx, fy)):
                            if stand is None or routes[t][0] < routes[stand][0]:
                                stand = t
                    if stand is not None:
                        return (corner, facing, (fx, fy), stand)
    return None


def head_for_patch(world):
    """Nothing workable in view: walk to the reachable tile closest to the patch marker."""
    marker = world.patch()
    if marker is None:
        return
    routes = reachable(world.tile(), blocked(world))
    goal = min(routes, key=lambda t: math.hypot(t[0] + 0.5 - marker[0], t[1] + 0.5 - marker[1]))
    go_to(world, goal)


def stride_for(gap):
    tick = 38 / 256
    if gap >= 30 * tick:
        return "long"
    if gap >= 7 * tick:
        return "step"
    return "nudge"


def slide(world, axis, target):
    """Move along one axis until within 0.15 of `target`; False when a move made no progress."""
    for _ in range(40):
        start = world.me()[axis]
        gap = target - start
        if abs(gap) <= 0.15:
            return True
        if axis == 0:
            world.move("E" if gap > 0 else "W", stride_for(abs(gap)))
        else:
            world.move("S" if gap > 0 else "N", stride_for(abs(gap)))
        if abs(world.me()[axis] - start) < 0.01:
            return False
    return False


def centre_on_tile(world):
    tile = world.tile()
    return slide(world, 0, tile[0] + 0.5) and slide(world, 1, tile[1] + 0.5)


def go_to(world, goal):
    """Follow a breadth-first route corner to corner; re-plan from wherever a move stalls."""
    for _ in range(5):
        if world.tile() == goal:
            return True
        if not centre_on_tile(world):
            continue
        routes = reachable(world.tile(), blocked(world))
        if goal not in routes:
            return False
        route = [goal]
        while routes[route[-1]][1] is not None:
            route.append(routes[route[-1]][1])
        route.reverse()
        corners = []
        for k in range(1, len(route)):
            last = k == len(route) - 1
            if last or route[k + 1][0] - route[k][0] != route[k][0] - route[k - 1][0]:
                corners.append(route[k])
        previous = route[0]
        for corner in corners:
            axis = 0 if corner[0] != previous[0] else 1
            if not slide(world, axis, corner[axis] + 0.5):
                break
            previous = corner
    return world.tile() == goal


def find(world, kind, corner):
    for e in world.entities():
        if e.kind == kind and round(e.x) - 1 == corner[0] and round(e.y) - 1 == corner[1]:
            return e
    return None
