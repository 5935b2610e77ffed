# Python test of torch.ops.sparsebench: a graph prepared once (prepare_graph), graph_attention's forward and
# gradients against plain PyTorch, no host preparation per call, and the input check.
# Usage: test_gsa_python_op.py path/to/libsparsebench_ops.so   (exit 77 = skipped, no torch importable)
import os
import sys

try:
    import torch
except ImportError as exc:
    print(f"SKIPPED: torch is not importable by {sys.executable} ({exc})")
    sys.exit(77)


def window_graph(n, left, right):
    """CSR by destination of a window pattern, with clipped-distance relations."""
    rows = [[j for j in range(max(0, i - left), min(n, i + right + 1))] for i in range(n)]
    row_ptr, col, rel = [0], [], []
    for i, srcs in enumerate(rows):
        col += srcs
        rel += [max(-4, min(4, i - j)) + 4 for j in srcs]
        row_ptr.append(len(col))
    return (torch.tensor(row_ptr, dtype=torch.int64), torch.tensor(col, dtype=torch.int32),
            torch.tensor(rel, dtype=torch.int32))


def reference(q, k, v, rel_emb, graph):
    """Dense masked attention in plain PyTorch: s = q . (k + r) / sqrt(D)."""
    row_ptr, col, rel = graph[0], graph[1], graph[2]
    b, n, h, d = q.shape
    mask = torch.zeros(n, n, dtype=torch.bool)
    rel_ids = torch.zeros(n, n, dtype=torch.int64)
    for u in range(n):
        for e in range(int(row_ptr[u]), int(row_ptr[u + 1])):
            mask[u, col[e]] = True
            rel_ids[u, col[e]] = int(rel[e])
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, N, D]
    s = qt @ kt.transpose(-1, -2)
    if rel_emb is not None:
        r = rel_emb[rel_ids]  # [N, N, D]
        s = s + torch.einsum("bhud,uvd->bhuv", qt, r)
    s = (s / d ** 0.5).masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, -1) @ vt).transpose(1, 2)


def main():
    torch.ops.load_library(sys.argv[1])
    ops = torch.ops.sparsebench
    torch.manual_seed(0)
    graph = window_graph(23, 3, 2)
    before = ops.graph_preparations()
    prepared = ops.prepare_graph(*graph, 9)
    assert ops.graph_preparations() == before + 1
    assert (prepared.n_nodes(), prepared.n_edges(), prepared.n_relations()) == (23, len(graph[1]), 9)
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-4)):
        for with_rel in (False, True):
            q, k, v = (torch.randn(2, 23, 3, 8, dtype=dtype, requires_grad=True) for _ in range(3))
            rel_emb = torch.randn(9, 8, dtype=dtype, requires_grad=True) if with_rel else None
            d_o = torch.randn(2, 23, 3, 8, dtype=dtype)
            inputs = [q, k, v] + ([rel_emb] if with_rel else [])
            out = ops.graph_attention(q, k, v, rel_emb, prepared)
            grads = torch.autograd.grad((out * d_o).sum(), inputs)
            ref = reference(q, k, v, rel_emb, graph)
            ref_grads = torch.autograd.grad((ref * d_o).sum(), inputs)
            err = (out - ref).abs().max().item()
            assert err < tol, f"forward error {err} (dtype {dtype}, rel {with_rel})"
            for name, g, rg in zip("qkvr", grads, ref_grads):
                gerr = ((g - rg).abs().max() / rg.abs().max()).item()
                assert gerr < tol, f"d{name} relative error {gerr} (dtype {dtype}, rel {with_rel})"
    with torch.no_grad():
        q = torch.randn(1, 23, 2, 8)
        for _ in range(1000):
            ops.graph_attention(q, q, q, None, prepared)
    assert ops.graph_preparations() == before + 1, "a call prepared the graph again"
    try:
        ops.graph_attention(torch.randn(1, 5, 1, 8), torch.randn(1, 5, 1, 8), torch.randn(1, 5, 1, 8), None, prepared)
        raise AssertionError("a graph for another length must be rejected")
    except RuntimeError as exc:
        assert "q must have shape (B, N, H, D) with N = 23 graph nodes, got (1, 5, 1, 8)" in str(exc), str(exc)
    try:
        ops.prepare_graph(graph[0], graph[1] + 100, graph[2])
        raise AssertionError("a source outside the graph must be rejected")
    except RuntimeError as exc:
        assert "graph: col[0] = 100 outside [0, 23)" in str(exc), str(exc)
    # The kernel backend as records name it, and the CPU's one way of running a call (no note).
    backend = ops.attention_backend("cpu")
    assert backend.startswith("cpu:") and backend != "cpu:", backend
    assert ops.attention_last_call("cpu") == ""
    # The package on this torch (Debian's 1.13 has no torch.library.custom_op: its graph_attention calls the op
    # directly): a pattern from the C++ builders, the op over it against the dense reference and the package's own.
    os.environ["SPARSEBENCH_OPS_LIBRARY"] = sys.argv[1]
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import sparsebench

    g = sparsebench.pattern("window", n=19, causal=True, w=4)
    csr = (g.row_ptr, g.col, g.rel)
    q, k, v = (torch.randn(2, 19, 3, 8, dtype=torch.float64) for _ in range(3))
    rel_emb = torch.randn(g.n_relations, 8, dtype=torch.float64)
    out = sparsebench.graph_attention(q, k, v, g, rel_emb=rel_emb)
    for ref in (reference(q, k, v, rel_emb, csr), sparsebench.reference_attention(q, k, v, g, rel_emb=rel_emb)):
        assert (out - ref).abs().max().item() < 1e-10, "package op against a reference"
    print("python op: forward, gradients, one preparation for 1000 calls, input checks, backend name, package OK")


if __name__ == "__main__":
    main()
