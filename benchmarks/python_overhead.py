# python_overhead.py: what the Python package's call path (argument checks, torch.library custom op, graph lookup)
# costs per call over calling the C++ op directly, at sizes where the kernel itself takes microseconds.
"""Usage: python benchmarks/python_overhead.py [--calls 20000] [--repeats 5]
Prints the median time per call of sparsebench.graph_attention and of torch.ops.sparsebench.graph_attention on the
same prepared graph (forward, no grad, CPU), and their difference: the package's overhead per call."""
import argparse
import statistics
import time

import torch

import sparsebench


def per_call(fn, calls, repeats):
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = sparsebench.pattern("window", n=16, causal=True, w=4)
    q, k, v = (torch.randn(1, g.n_nodes, 1, 8) for _ in range(3))
    prepared = g.prepared()
    direct = torch.ops.sparsebench.graph_attention
    rows = []
    with torch.no_grad():
        for _ in range(3):  # interleaved rounds
            rows.append((per_call(lambda: direct(q, k, v, None, prepared), args.calls, args.repeats),
                         per_call(lambda: sparsebench.graph_attention(q, k, v, g), args.calls, args.repeats)))
    c = statistics.median(r[0] for r in rows)
    p = statistics.median(r[1] for r in rows)
    print(f"torch {torch.__version__}, window w=4 n=16, B=1 H=1 D=8, 1 thread, median of 3 rounds x {args.repeats} "
          f"x {args.calls} calls")
    print(f"C++ op {c * 1e6:.2f} us/call, sparsebench.graph_attention {p * 1e6:.2f} us/call, "
          f"overhead {(p - c) * 1e6:.2f} us/call")


if __name__ == "__main__":
    main()
