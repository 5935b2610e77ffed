"""Pattern graphs from the C++ builders: the catalog (patterns), one graph (pattern), and the Graph object."""
import itertools
import json
import weakref

import torch

from ._library import ops

# Graphs by id, so an op that takes an int (what torch.compile traces as a constant) finds its graph.
_by_id = weakref.WeakValueDictionary()
_ids = itertools.count(1)


def patterns():
    """Every registered pattern: name, description, causal support and parameters with defaults and ranges."""
    return json.loads(ops().pattern_catalog())


def pattern(name, n, causal=True, **params):
    """The graph of pattern `name` over n tokens, e.g. pattern("bpt", n=4096, k=4, causal=True), on the CPU.

    Parameters are integers; unknown names and values out of range raise ValueError naming them."""
    if not isinstance(name, str):
        raise TypeError(f"pattern: name must be a str, got {type(name).__name__}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"pattern: n must be a positive int, got {n!r}")
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"pattern {name}: parameter {key} must be an int, got {value!r}")
    try:
        *tensors, info = ops().build_pattern(name, n, bool(causal), json.dumps(params))
    except RuntimeError as exc:  # the builders' sb::Error: unknown names, ranges, causal support
        raise ValueError(f"pattern {name}: {_first_line(exc)}") from None
    return Graph(tensors, json.loads(info))


def load_graph(path):
    """The graph of a file exported by `sparsebench pattern NAME --export FILE`, built again by the same C++ builder
    from the pattern, n, causal and parameters it records; ValueError when the file's edges differ from that build
    (another version's builder, or an edited file)."""
    with open(path) as f:
        doc = json.load(f)
    missing = [key for key in ("pattern", "n", "causal", "params", "edges") if key not in doc]
    if missing:
        raise ValueError(f"{path}: not an exported graph (no {', '.join(missing)})")
    g = pattern(doc["pattern"], int(doc["n"]), bool(doc["causal"]), **doc["params"])
    edges = doc["edges"]  # [source, destination, relation name], grouped by destination in row order
    dst = g.destinations().tolist()
    same = len(edges) == g.n_edges and all(
        e[0] == s and e[1] == d and e[2] == g.relations[r]
        for e, s, d, r in zip(edges, g.col.tolist(), dst, g.rel.tolist()))
    if not same:
        raise ValueError(f"{path}: its {len(edges)} edges differ from this build's {g.n_edges} of "
                         f"{doc['pattern']} {doc['params']} n={doc['n']}")
    return g


def _first_line(exc):
    return str(exc).strip().splitlines()[0]


class Graph:
    """A pattern's graph on one device.

    Nodes 0..n_tokens-1 are tokens, extra nodes (bpt's spans, relays) follow. An edge src -> dst means dst attends to
    src. Tensors: row_ptr (int64 [N+1]), col (int32 [E], sources ascending in a row) and rel (int32 [E], relation ids)
    by destination; t_row_ptr, t_col (destinations) and t_edge (edge ids) by source; nodes (int32 [N, 4]: kind, level,
    first and last token covered)."""

    _fields = ("row_ptr", "col", "rel", "t_row_ptr", "t_col", "t_edge", "nodes")

    def __init__(self, tensors, info, device=None):
        for name, t in zip(self._fields, tensors):
            setattr(self, name, t if device is None else t.to(device))
        self.info = info
        self.name = info["name"]
        self.params = dict(info.get("params", {}))
        self.causal = bool(info["causal"])
        self.n_tokens = int(info["n_tokens"])
        self.relations = list(info["relations"])
        self.device = self.row_ptr.device
        self.n_nodes = int(self.row_ptr.numel()) - 1  # plain attributes: the op's checks read them on every call
        self.n_edges = int(self.col.numel())
        self._stats = info.get("stats")
        self._prepared = None
        self.id = next(_ids)
        _by_id[self.id] = self

    n_relations = property(lambda self: len(self.relations))

    def __repr__(self):
        params = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return (f"Graph({self.name}({params}), n_tokens={self.n_tokens}, n_nodes={self.n_nodes}, "
                f"n_edges={self.n_edges}, causal={self.causal}, device={self.device})")

    def to(self, device):
        """This graph on `device` (a new Graph; itself when already there)."""
        device = torch.device(device)
        if device == self.device:
            return self
        return Graph([getattr(self, f) for f in self._fields], self.info, device)

    @property
    def node_kinds(self):
        """Each node's kind by name ("token", "span", "relay", "sentence")."""
        names = self.info["node_kinds"]
        return [names[k] for k in self.nodes[:, 0].tolist()]

    def in_degree(self):
        """Edges into each node, int64 [N]."""
        return self.row_ptr.diff()

    def stats(self, hops=False):
        """Statistics as records carry them: n_tokens, n_nodes, n_edges, in_degree_min/mean/max (tokens),
        node_in_degree_max, bytes, and max_hops (-1 unless hops=True: the longest token-to-token shortest path, a BFS
        from every token, slow past a few thousand)."""
        if hops or self._stats is None:
            if self.name not in {p["name"] for p in patterns()}:
                raise ValueError(f"stats: graph {self.name} was not built by a registered pattern")
            text = ops().pattern_stats(self.name, self.n_tokens, self.causal, json.dumps(self.params),
                                       1 << 62 if hops else 0)
            stats = json.loads(text)
            if not hops:
                self._stats = stats
            return stats
        return dict(self._stats)

    def destinations(self):
        """The destination of each edge, int64 [E] on this graph's device (col holds the sources)."""
        return torch.repeat_interleave(torch.arange(self.n_nodes, device=self.device), self.row_ptr.diff())

    def adjacency(self, dtype=torch.bool):
        """Dense [N, N] matrix on this graph's device: entry [dst, src] set where dst attends to src."""
        adj = torch.zeros(self.n_nodes, self.n_nodes, dtype=dtype, device=self.device)
        adj[self.destinations(), self.col.to(torch.int64)] = True
        return adj

    def prepared(self):
        """The op's prepared graph (torch.classes.sparsebench.Graph) on this graph's device, made once."""
        if self._prepared is None:
            self._prepared = ops().prepare_graph(self.row_ptr, self.col, self.rel, self.n_relations)
        return self._prepared


def graph_by_id(graph_id):
    """The live Graph with this id (what the compiled op carries)."""
    g = _by_id.get(graph_id)
    if g is None:
        raise RuntimeError(f"sparsebench: graph id {graph_id} is no longer alive; keep the Graph while calling the op")
    return g
