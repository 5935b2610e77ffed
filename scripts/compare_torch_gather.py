# Times torch.ops.sparsebench.graph_attention against plain-PyTorch gather/scatter attention on one exported graph.
# Usage:
#   build/harness/sparsebench pattern bpt --n 8192 --set k=4 --causal --export /tmp/bpt4.json
#   /usr/bin/python3 scripts/compare_torch_gather.py build/kernels/libsparsebench_ops.so /tmp/bpt4.json \
#       [--heads 8] [--dim 64] [--batch 1] [--repeats 5] [--threads N]
# Prints median seconds (forward; forward+backward through autograd) of both and their ratios, after checking
# that both give the same output. The op's CPU SIMD target is the one SB_CPU_TARGET names, else the best one.
import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
except ImportError as exc:
    print(f"compare_torch_gather: torch is not importable by {sys.executable} ({exc})", file=sys.stderr)
    sys.exit(2)


def load_graph(path):
    """CSR by destination and by source, relation ids, from `sparsebench pattern ... --export` JSON."""
    with open(path) as f:
        doc = json.load(f)
    n = len(doc["nodes"])
    edges = doc["edges"]  # [source, destination, relation name], grouped by destination in row order
    names = {}
    src = torch.tensor([e[0] for e in edges], dtype=torch.int64)
    dst = torch.tensor([e[1] for e in edges], dtype=torch.int64)
    rel = torch.tensor([names.setdefault(e[2], len(names)) for e in edges], dtype=torch.int64)
    if bool((dst[1:] < dst[:-1]).any()):
        raise SystemExit(f"{path}: edges are not grouped by destination")
    row_ptr = torch.zeros(n + 1, dtype=torch.int64)
    row_ptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
    order = torch.argsort(src * len(edges) + torch.arange(len(edges)))  # by source, then edge id (stable)
    t_row_ptr = torch.zeros(n + 1, dtype=torch.int64)
    t_row_ptr[1:] = torch.cumsum(torch.bincount(src, minlength=n), 0)
    i32 = torch.int32
    csr = (row_ptr, src.to(i32), rel.to(i32), t_row_ptr, dst[order].to(i32), order.to(i32))
    return doc, n, src, dst, rel, len(names), csr


def gather_attention(q, k, v, rel_emb, src, dst, rel):
    """Plain PyTorch: s_e = q[dst] . (k[src] + r[rel]) / sqrt(D), softmax over each destination's edges."""
    b, n, h, d = q.shape
    s = (q[:, dst] * (k[:, src] + rel_emb[rel][None, :, None, :])).sum(-1) / d ** 0.5  # [B, E, H]
    idx = dst[None, :, None].expand_as(s)
    m = torch.full((b, n, h), float("-inf"), dtype=s.dtype).scatter_reduce(1, idx, s, "amax", include_self=True)
    p = torch.exp(s - m.gather(1, idx))
    denom = torch.zeros(b, n, h, dtype=s.dtype).index_add(1, dst, p)
    w = p / denom.gather(1, idx)
    return torch.zeros_like(q).index_add(1, dst, w[..., None] * v[:, src])


def median_seconds(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("ops_library")
    ap.add_argument("graph_json")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: all cores)")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.ops.load_library(args.ops_library)
    doc, n, src, dst, rel, n_rel, csr = load_graph(args.graph_json)
    torch.manual_seed(0)
    shape = (args.batch, n, args.heads, args.dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    rel_emb = (0.1 * torch.randn(n_rel, args.dim)).requires_grad_(True)
    d_o = torch.randn(shape)
    inputs = [q, k, v, rel_emb]

    # The op takes a graph prepared once (CSR checks, transpose); preparation is not timed.
    prepared = torch.ops.sparsebench.prepare_graph(csr[0], csr[1], csr[2], n_rel)

    def op():
        return torch.ops.sparsebench.graph_attention(q, k, v, rel_emb, prepared)

    def ref():
        return gather_attention(q, k, v, rel_emb, src, dst, rel)

    with torch.no_grad():
        err = (op() - ref()).abs().max().item()
    if not err < 1e-4:
        raise SystemExit(f"outputs differ: max |op - gather| = {err}")

    def fwd(f):
        def run():
            with torch.no_grad():
                f()
        return run

    def fwd_bwd(f):
        return lambda: torch.autograd.grad((f() * d_o).sum(), inputs)

    t = {name: median_seconds(fn, args.repeats) for name, fn in
         (("op_fwd", fwd(op)), ("gather_fwd", fwd(ref)), ("op_fwdbwd", fwd_bwd(op)), ("gather_fwdbwd", fwd_bwd(ref)))}
    print(f"graph: {doc['pattern']} {doc['params']} n={doc['n']} causal={doc['causal']} nodes={n} edges={len(src)}; "
          f"B={args.batch} H={args.heads} D={args.dim}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"SB_CPU_TARGET={os.environ.get('SB_CPU_TARGET', '(best)')}; medians of {args.repeats}; max |diff| {err:.1e}")
    for mode in ("fwd", "fwdbwd"):
        print(f"{mode:>7}: op {t['op_' + mode] * 1e3:9.2f} ms   gather/scatter {t['gather_' + mode] * 1e3:9.2f} ms   "
              f"op is {t['gather_' + mode] / t['op_' + mode]:.1f}x faster")


if __name__ == "__main__":
    main()
