"""An s-t minimum cut by maximum flow (Dinic's algorithm), for thunder-remat's choice of saved values.

Nodes are any hashable keys; an edge without a capacity is infinite. `min_cut` returns the cut
whose sink side is smallest: the nodes from which the sink is still reachable in the residual
graph of a maximum flow. That set is the same for every maximum flow (it lies inside the sink
side of every minimum cut), so the answer does not depend on the order in which paths are
augmented: among tied minimum cuts it is always the one closest to the sink (networkx's
minimum_cut, which thunder-remat used before, returns the same one).
"""
from collections import deque


class Unbounded(ValueError):
    """Every s-t cut crosses an infinite edge."""


class FlowGraph:
    def __init__(self):
        self.index = {}  # node key -> id
        self.keys = []  # id -> node key
        self.adj = []  # id -> arc ids leaving it
        self.head = []  # arc -> the node it enters; arc ^ 1 is its reverse
        self.cap = []  # arc -> residual capacity (None: infinite, until min_cut)
        self.arcs = {}  # (u id, v id) -> arc: an edge added twice is one edge

    def node(self, key):
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.keys)
            self.keys.append(key)
            self.adj.append([])
        return i

    def add_edge(self, u, v, capacity=None):
        """An edge u -> v; capacity None: infinite. Adding an edge again sets its capacity where
        one is given and keeps it otherwise."""
        a, b = self.node(u), self.node(v)
        e = self.arcs.get((a, b))
        if e is None:
            e = self.arcs[a, b] = len(self.head)
            self.head += [b, a]
            self.cap += [capacity, 0]
            self.adj[a].append(e)
            self.adj[b].append(e + 1)
        elif capacity is not None:
            self.cap[e] = capacity

    def min_cut(self, s, t):
        """(the cut's capacity, the set of node keys on its source side) of the minimum s-t cut
        with the smallest sink side. Raises Unbounded where every cut crosses an infinite edge."""
        s, t = self.node(s), self.node(t)
        finite = sum([c for c in self.cap if c is not None])
        infinite = finite + 1  # (more than any finite cut)
        cap = [infinite if c is None else c for c in self.cap]
        flow = 0
        while True:
            level = self._levels(s, cap)
            if level[t] < 0:
                break
            flow += self._blocking_flow(s, t, level, cap)
        if flow >= infinite:
            raise Unbounded("every cut crosses an edge of infinite capacity")
        sink_side = self._reaching(t, cap)
        return flow, {k for i, k in enumerate(self.keys) if i not in sink_side}

    def _levels(self, s, cap):
        """Breadth-first distances from s over arcs with residual capacity (-1: unreached)."""
        level = [-1] * len(self.keys)
        level[s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self.adj[u]:
                v = self.head[e]
                if cap[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level

    def _blocking_flow(self, s, t, level, cap):
        """Augment along shortest residual paths until none is left (iterative: a chain of
        thousands of ops is one long path)."""
        head, adj = self.head, self.adj
        current = [0] * len(self.keys)  # the next arc to try, per node
        path, u, total = [], s, 0
        while True:
            if u == t:
                pushed = min([cap[e] for e in path])
                for e in path:
                    cap[e] -= pushed
                    cap[e ^ 1] += pushed
                total += pushed
                first = next(i for i, e in enumerate(path) if cap[e] == 0)
                del path[first:]  # (back to the tail of the first saturated arc)
                u = head[path[-1]] if path else s
                continue
            arcs, k, want = adj[u], current[u], level[u] + 1
            n = len(arcs)
            while k < n:
                e = arcs[k]
                if cap[e] > 0 and level[head[e]] == want:
                    break
                k += 1
            current[u] = k
            if k == n:  # a dead end: leave it and try the parent's next arc
                if not path:
                    return total
                level[u] = -1
                e = path.pop()
                u = head[e ^ 1]
                current[u] += 1
                continue
            path.append(e)
            u = head[e]

    def _reaching(self, t, cap):
        """The node ids from which t is reachable over arcs with residual capacity."""
        seen = {t}
        queue = deque([t])
        while queue:
            v = queue.popleft()
            for e in self.adj[v]:  # (e ^ 1 enters v from head[e])
                u = self.head[e]
                if cap[e ^ 1] > 0 and u not in seen:
                    seen.add(u)
                    queue.append(u)
        return seen
