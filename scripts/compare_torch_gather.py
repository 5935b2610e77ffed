# Times torch.ops.sparsebench.graph_attention against plain-PyTorch gather/scatter attention on one exported graph.
# Usage:
#   build/harness/sparsebench pattern bpt --n 8192 --set k=4 --causal --export /tmp/bpt4.json
#   /usr/bin/python3 scripts/compare_torch_gather.py build/kernels/libsparsebench_ops.so /tmp/bpt4.json \
#       [--heads 8] [--dim 64] [--batch 1] [--repeats 5] [--threads N]
# Prints median seconds (forward; forward+backward through autograd) of both and their ratios, after checking
# that both give the same output. The op's CPU SIMD target is the one SB_CPU_TARGET names, else the best one.
import argparse
import os
import statistics
import sys
import time

try:
    import torch
except ImportError as exc:
    print(f"compare_torch_gather: torch is not importable by {sys.executable} ({exc})", file=sys.stderr)
    sys.exit(2)


def import_sparsebench(ops_library):
    """The clone's sparsebench package (python/), on the ops library given."""
    os.environ["SPARSEBENCH_OPS_LIBRARY"] = os.path.abspath(ops_library)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import sparsebench
    return sparsebench


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
    sparsebench = import_sparsebench(args.ops_library)
    graph = sparsebench.load_graph(args.graph_json)  # the same C++ builder, checked against the file's edges
    n, n_rel = graph.n_nodes, graph.n_relations
    torch.manual_seed(0)
    shape = (args.batch, n, args.heads, args.dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    rel_emb = (0.1 * torch.randn(n_rel, args.dim)).requires_grad_(True)
    d_o = torch.randn(shape)
    inputs = [q, k, v, rel_emb]

    # The op takes a graph prepared once (CSR checks, transpose); preparation is not timed.
    prepared = graph.prepared()

    def op():
        return torch.ops.sparsebench.graph_attention(q, k, v, rel_emb, prepared)

    def ref():
        return sparsebench.reference_attention(q, k, v, graph, rel_emb=rel_emb)

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
    print(f"graph: {graph.name} {graph.params} n={graph.n_tokens} causal={graph.causal} nodes={n} "
          f"edges={graph.n_edges}; "
          f"B={args.batch} H={args.heads} D={args.dim}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"SB_CPU_TARGET={os.environ.get('SB_CPU_TARGET', '(best)')}; medians of {args.repeats}; max |diff| {err:.1e}")
    for mode in ("fwd", "fwdbwd"):
        print(f"{mode:>7}: op {t['op_' + mode] * 1e3:9.2f} ms   gather/scatter {t['gather_' + mode] * 1e3:9.2f} ms   "
              f"op is {t['gather_' + mode] / t['op_' + mode]:.1f}x faster")


if __name__ == "__main__":
    main()
