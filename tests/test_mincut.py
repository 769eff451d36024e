"""lowering/mincut.py against brute force on small random graphs: the cut's capacity is the
minimum, and among tied minimum cuts the one returned is the one with the smallest sink side
(the intersection of every minimum cut's sink side), whatever order the edges were added in."""
import itertools
import random

import pytest

from thunder.lowering.mincut import FlowGraph, Unbounded

INF = None


def _brute_force(nodes, edges, s, t):
    """(minimum capacity, the smallest sink side among the minimum cuts), or (None, None) where
    every cut crosses an infinite edge."""
    others = [n for n in nodes if n not in (s, t)]
    cuts = []
    for bits in itertools.product((0, 1), repeat=len(others)):
        sink = {t} | {n for n, b in zip(others, bits) if b}
        crossing = [c for (u, v), c in edges.items() if u not in sink and v in sink]
        if INF not in crossing:
            cuts.append((sum(crossing), frozenset(sink)))
    if not cuts:
        return None, None
    best = min(c for c, _ in cuts)
    smallest = frozenset.intersection(*(sink for c, sink in cuts if c == best))
    assert (best, smallest) in cuts  # (min cuts are closed under intersecting their sink sides)
    return best, smallest


def _graph(edges, order):
    g = FlowGraph()
    for u, v in order:
        g.add_edge(u, v, edges[u, v])
    return g


@pytest.mark.parametrize("seed", range(60))
def test_min_cut_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 8)
    nodes = list(range(n))
    s, t = 0, n - 1
    edges = {}
    for u, v in itertools.permutations(nodes, 2):
        if v != s and u != t and rng.random() < 0.45:
            edges[u, v] = INF if rng.random() < 0.2 else rng.randint(1, 3)  # (small: many ties)
    best, smallest = _brute_force(nodes, edges, s, t)
    for shuffle in range(3):  # (the chosen cut does not depend on the order of the edges)
        order = list(edges)
        random.Random(shuffle).shuffle(order)
        g = _graph(edges, order)
        for x in nodes:
            g.node(x)
        if best is None:
            with pytest.raises(Unbounded):
                g.min_cut(s, t)
            continue
        value, source_side = g.min_cut(s, t)
        assert value == best
        assert set(nodes) - source_side == smallest


def test_ties_pick_the_cut_nearest_the_sink():
    """A chain s -> a -> b -> t of equal capacities: three minimum cuts; the last edge is cut."""
    g = FlowGraph()
    for u, v in [("s", "a"), ("a", "b"), ("b", "t")]:
        g.add_edge(u, v, 5)
    assert g.min_cut("s", "t") == (5, {"s", "a", "b"})


def test_edge_added_again_keeps_or_sets_its_capacity():
    g = FlowGraph()
    g.add_edge("s", "t", 4)
    g.add_edge("s", "t")  # (no capacity: kept)
    assert g.min_cut("s", "t")[0] == 4
    g.add_edge("s", "t", 2)
    assert g.min_cut("s", "t")[0] == 2


def test_long_chain():
    """A path of thousands of nodes (a deep model's forward) needs no recursion."""
    g = FlowGraph()
    chain = ["s", *range(5000), "t"]
    for i, (u, v) in enumerate(zip(chain, chain[1:])):
        g.add_edge(u, v, 1 + (i % 7))
    value, source_side = g.min_cut("s", "t")
    assert value == 1 and source_side == {"s", *range(4998)}  # (the last edge of capacity 1: 4997 -> 4998)
