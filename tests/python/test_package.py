"""The Python package: patterns from the C++ registry, the op against the plain-PyTorch reference for every pattern,
torch.library checks, torch.compile without graph breaks, FlexAttention's block mask, and bad input."""
import json

import pytest
import torch

import sparsebench

HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")
try:
    from torch.nn.attention.flex_attention import flex_attention
except ImportError:
    flex_attention = None
needs_custom_op = pytest.mark.skipif(not HAS_CUSTOM_OP,
                                     reason=f"torch {torch.__version__} has no torch.library.custom_op")

# Small parameters per pattern so every pattern builds a graph of a few dozen tokens.
SMALL = {"bpt": {"k": 2}, "window": {"w": 3}, "bigbird": {"b": 4, "r": 1}, "fixed": {"l": 8, "c": 2},
         "strided": {"l": 6}, "longformer": {"w": 3, "g": 2}, "hierarchical": {"s": 8}, "segtree": {},
         "star": {}, "dense": {}}


def catalog():
    return {p["name"]: p for p in sparsebench.patterns()}


def small_params(name):
    """SMALL's values where the pattern has the parameter, else its default (so new patterns are covered too)."""
    spec = catalog()[name]
    given = SMALL.get(name, {})
    return {p["name"]: given.get(p["name"], p["default"]) for p in spec["params"]
            if p["min"] <= given.get(p["name"], p["default"]) <= p["max"]}


def every_pattern_case():
    for name, spec in catalog().items():
        for causal in ([True, False] if spec["causal"] else [False]):
            yield name, causal


def test_catalog_comes_from_the_registry():
    cat = catalog()
    assert {"bpt", "window", "dense"} <= set(cat)
    k = {p["name"]: p for p in cat["bpt"]["params"]}["k"]
    assert k["min"] <= k["default"] <= k["max"] and k["help"]
    for spec in cat.values():
        assert isinstance(spec["causal"], bool) and spec["description"]


@pytest.mark.parametrize("name,causal", list(every_pattern_case()))
def test_graph_invariants(name, causal):
    g = sparsebench.pattern(name, n=40, causal=causal, **small_params(name))
    n = g.n_nodes
    assert g.n_tokens == 40 and n >= 40 and g.causal == causal and g.name == name
    assert g.row_ptr[0] == 0 and g.row_ptr[-1] == g.n_edges and bool((g.row_ptr.diff() >= 0).all())
    assert bool(((g.col >= 0) & (g.col < n)).all()) and bool(((g.rel >= 0) & (g.rel < g.n_relations)).all())
    for i in range(n):  # sources ascending and distinct within a row
        row = g.col[g.row_ptr[i]:g.row_ptr[i + 1]]
        assert bool((row.diff() > 0).all()), f"row {i} not strictly ascending"
    # The transpose lists every edge once, by source.
    assert sorted(g.t_edge.tolist()) == list(range(g.n_edges))
    src_of = torch.repeat_interleave(torch.arange(n), g.t_row_ptr.diff())
    assert torch.equal(g.col[g.t_edge.long()].long(), src_of)
    dst_of = torch.repeat_interleave(torch.arange(n), g.row_ptr.diff())
    assert torch.equal(dst_of[g.t_edge.long()], g.t_col.long())
    if causal:  # a token never attends to a later token
        tok = (dst_of < 40) & (g.col.long() < 40)
        assert bool((g.col.long()[tok] <= dst_of[tok]).all())
    stats = g.stats()
    assert stats["n_edges"] == g.n_edges and stats["n_nodes"] == n
    assert stats["in_degree_max"] == int(g.in_degree()[:40].max())
    assert g.node_kinds[:40] == ["token"] * 40


def test_stats_with_hops():
    g = sparsebench.pattern("window", n=16, causal=True, w=2)
    assert g.stats()["max_hops"] == -1  # not computed unless asked
    assert g.stats(hops=True)["max_hops"] == 15  # one step back per hop from the last token to the first


@pytest.mark.parametrize("call,exc,says", [
    (lambda: sparsebench.pattern("bpt", n=64, kk=3), ValueError, "kk"),
    (lambda: sparsebench.pattern("bpt", n=64, k=0), ValueError, "k"),
    (lambda: sparsebench.pattern("nosuch", n=64), ValueError, "bpt"),
    (lambda: sparsebench.pattern("bpt", n=0), ValueError, "n must be a positive int"),
    (lambda: sparsebench.pattern("bpt", n=64, k=2.5), TypeError, "parameter k must be an int"),
])
def test_bad_pattern_arguments_name_the_argument(call, exc, says):
    with pytest.raises(exc, match=says):
        call()


def inputs(g, b=2, h=2, d=8, dtype=torch.float32, rel=True, seed=0):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(b, g.n_nodes, h, d, dtype=dtype, requires_grad=True) for _ in range(3))
    r = (0.3 * torch.randn(g.n_relations, d, dtype=dtype)).requires_grad_(True) if rel else None
    return q, k, v, r


@pytest.mark.parametrize("name,causal", list(every_pattern_case()))
def test_op_matches_reference_for_every_pattern(name, causal):
    g = sparsebench.pattern(name, n=40, causal=causal, **small_params(name))
    q, k, v, r = inputs(g)
    out = sparsebench.graph_attention(q, k, v, g, rel_emb=r)
    ref = sparsebench.reference_attention(q, k, v, g, rel_emb=r)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    d_o = torch.randn_like(out)
    grads = torch.autograd.grad((out * d_o).sum(), (q, k, v, r))
    ref_grads = torch.autograd.grad((ref * d_o).sum(), (q, k, v, r))
    for name_, a, b in zip("qkvr", grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"d{name_}: {m}")


def test_gradcheck_in_float64():
    g = sparsebench.pattern("bpt", n=12, causal=True, k=1)
    q, k, v, r = inputs(g, b=1, h=1, d=4, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda q, k, v, r: sparsebench.graph_attention(q, k, v, g, rel_emb=r),
                                    (q, k, v, r), eps=1e-6, atol=1e-6)


@needs_custom_op
def test_opcheck():
    g = sparsebench.pattern("window", n=24, causal=True, w=3)
    for rel in (False, True):
        q, k, v, r = inputs(g, rel=rel)
        torch.library.opcheck(torch.ops.sparsebench_py.attention_forward, (q, k, v, r, g.id))
        o, lse = torch.ops.sparsebench_py.attention_forward(q, k, v, r, g.id)
        d_o = torch.randn_like(o)
        args = (d_o, q.detach(), k.detach(), v.detach(), None if r is None else r.detach(), o.detach(), lse, g.id)
        torch.library.opcheck(torch.ops.sparsebench_py.attention_backward, args)


class TwoLayers(torch.nn.Module):
    """Two attention layers over one graph, with relation embeddings and projections: what a model does."""

    def __init__(self, graph, heads=2, dim=16):
        super().__init__()
        self.graph, self.heads = graph, heads
        self.proj = torch.nn.ModuleList(torch.nn.Linear(dim, 3 * dim) for _ in range(2))
        self.rel = torch.nn.Parameter(0.1 * torch.randn(graph.n_relations, dim // heads))

    def forward(self, x):  # x: (B, N, dim)
        b, n, dim = x.shape
        for proj in self.proj:
            q, k, v = proj(x).view(b, n, 3, self.heads, dim // self.heads).unbind(2)
            x = x + sparsebench.graph_attention(q, k, v, self.graph, rel_emb=self.rel).reshape(b, n, dim)
        return x


@needs_custom_op
def test_compile_fullgraph_matches_eager():
    g = sparsebench.pattern("bpt", n=32, causal=True, k=2)
    torch.manual_seed(1)
    model = TwoLayers(g)
    x = torch.randn(2, g.n_nodes, 16, requires_grad=True)
    eager = model(x)
    eager_grad, = torch.autograd.grad(eager.sum(), x)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)  # fullgraph: a graph break raises
    out = compiled(x)
    grad, = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, eager_grad, rtol=1e-5, atol=1e-5)
    # One graph, and the op is in it as the custom op (not run outside the graph).
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, fullgraph=True, backend=record)(x)
    assert len(graphs) == 1
    targets = [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert sum("sparsebench_py.attention_forward" in t for t in targets) == 2, targets


@pytest.mark.skipif(flex_attention is None, reason=f"torch {torch.__version__} has no FlexAttention")
def test_block_mask_is_the_graph():
    g = sparsebench.pattern("bpt", n=200, causal=True, k=2)
    mask = sparsebench.block_mask(g, block_size=64)
    n = g.n_nodes
    adj = g.adjacency()
    # Block level: a block is present exactly where the adjacency has an edge in it.
    dense = mask.to_dense()[0, 0].bool()
    nb = (n + 63) // 64
    padded = torch.zeros(nb * 64, nb * 64, dtype=torch.bool)
    padded[:n, :n] = adj
    blocks = padded.reshape(nb, 64, nb, 64).any(3).any(1)
    assert torch.equal(dense[:nb, :nb], blocks)
    # Element level: flex_attention with the mask is the op without relation embeddings on rows with sources.
    q, k, v = (x.detach() for x in inputs(g, b=1, h=2, d=8, rel=False)[:3])  # no FlexAttention backward on CPU
    with torch.no_grad():
        out = sparsebench.graph_attention(q, k, v, g)
        flex = flex_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask).transpose(1, 2)
    has = g.in_degree() > 0
    torch.testing.assert_close(flex[:, has], out[:, has], rtol=1e-4, atol=1e-5)


def test_bad_op_input_names_the_argument():
    g = sparsebench.pattern("window", n=16, causal=True, w=2)
    q, k, v, r = inputs(g)
    with torch.no_grad():
        with pytest.raises(ValueError, match="q has 15 nodes"):
            sparsebench.graph_attention(q[:, :15], k[:, :15], v[:, :15], g)
        with pytest.raises(ValueError, match=r"k must have q's shape"):
            sparsebench.graph_attention(q, k[:, :, :1], v, g)
        with pytest.raises(TypeError, match="v has dtype torch.float64"):
            sparsebench.graph_attention(q, k, v.double(), g)
        with pytest.raises(ValueError, match="q must have shape"):
            sparsebench.graph_attention(q[0], k[0], v[0], g)
        with pytest.raises(ValueError, match=r"rel_emb must have shape \(" + str(g.n_relations)):
            sparsebench.graph_attention(q, k, v, g, rel_emb=r[:1])
        with pytest.raises(ValueError, match="graph is on meta but q is on cpu"):
            sparsebench.graph_attention(q, k, v, g.to("meta"))
        with pytest.raises(TypeError, match="graph must be a sparsebench.Graph"):
            sparsebench.graph_attention(q, k, v, "window")
        with pytest.raises(TypeError, match="q has dtype torch.int64"):
            i = torch.zeros(q.shape, dtype=torch.int64)
            sparsebench.graph_attention(i, i, i, g)


def test_load_graph_rebuilds_and_checks_an_export(tmp_path):
    g = sparsebench.pattern("bpt", n=16, causal=True, k=2)
    dst = torch.repeat_interleave(torch.arange(g.n_nodes), g.row_ptr.diff()).tolist()
    edges = [[s, d, g.relations[r]] for s, d, r in zip(g.col.tolist(), dst, g.rel.tolist())]
    doc = {"pattern": "bpt", "n": 16, "causal": True, "params": g.params, "edges": edges}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    again = sparsebench.load_graph(str(path))
    assert torch.equal(again.col, g.col) and torch.equal(again.row_ptr, g.row_ptr)
    doc["edges"][3][0] += 1
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="edges differ"):
        sparsebench.load_graph(str(path))
    path.write_text(json.dumps({"pattern": "bpt"}))
    with pytest.raises(ValueError, match="not an exported graph"):
        sparsebench.load_graph(str(path))
