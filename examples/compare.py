# compare.py: three patterns through this package's op, FlexAttention (the same graph's BlockMask) and SDPA, timed
# side by side, and one plot of the result.
"""Usage: python examples/compare.py [--n 2048] [--device cpu|cuda] [--dtype float32|bfloat16] [--out compare.png]

Builds bpt (k=4), window (w=128) and bigbird over n tokens, times forward and forward+backward of each (no relation
embeddings, so all three compute the same function; the op's outputs are checked against FlexAttention's), times
SDPA's dense causal attention over the same tokens, and draws tokens/s per pattern and method. FlexAttention is
compiled on CUDA; on the CPU it runs uncompiled (slow, and without a backward there)."""
import argparse

import torch
import torch.nn.functional as F
import torch.utils.benchmark as benchmark

import sparsebench


def timed(fn):
    """Median seconds of fn() (torch.utils.benchmark: warm-up, CUDA synchronisation, enough runs)."""
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.5).median


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--out", default="compare.png")
    args = ap.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    try:
        from torch.nn.attention.flex_attention import flex_attention
        flex = torch.compile(flex_attention) if device.type == "cuda" else flex_attention
    except ImportError:
        flex = None
    graphs = {"bpt k=4": sparsebench.pattern("bpt", n=args.n, k=4),
              "window w=128": sparsebench.pattern("window", n=args.n, w=128),
              "bigbird": sparsebench.pattern("bigbird", n=args.n)}
    results = {}  # (pattern, method) -> tokens/s forward, forward+backward
    torch.manual_seed(0)
    for label, graph in graphs.items():
        g = graph.to(device)
        shape = (1, g.n_nodes, args.heads, args.dim)
        q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        methods = {"op": lambda: sparsebench.graph_attention(q, k, v, g)}
        if flex is not None:
            mask = sparsebench.block_mask(g)
            grad = device.type != "cpu"  # no FlexAttention backward on the CPU
            fq, fk, fv = ((x if grad else x.detach()).transpose(1, 2) for x in (q, k, v))
            methods["FlexAttention"] = lambda: flex(fq, fk, fv, block_mask=mask).transpose(1, 2)
            with torch.no_grad():
                has = g.in_degree() > 0
                err = (methods["op"]()[:, has] - methods["FlexAttention"]()[:, has]).abs().max().item()
            print(f"{label}: {g.n_nodes} nodes, {g.n_edges} edges; max |op - FlexAttention| {err:.2g}")
        for name, fn in methods.items():
            with torch.no_grad():
                fwd = timed(fn)
            bwd = None
            if name == "op" or device.type != "cpu":
                bwd = timed(lambda: fn().sum().backward())
            results[(label, name)] = (args.n / fwd, args.n / bwd if bwd else None)
    qt, kt, vt = (torch.randn(1, args.heads, args.n, args.dim, device=device, dtype=dtype, requires_grad=True)
                  for _ in range(3))
    sdpa = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)  # noqa: E731
    with torch.no_grad():
        fwd = timed(sdpa)
    results[("dense causal", "SDPA")] = (args.n / fwd, args.n / timed(lambda: sdpa().sum().backward()))
    for (label, name), (f, b) in results.items():
        print(f"{label:>14} {name:>14}: forward {f / 1e6:8.3f}M tokens/s   forward+backward "
              f"{'-' if b is None else f'{b / 1e6:8.3f}M'} tokens/s")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = list(dict.fromkeys(name for _, name in results))
    labels = list(dict.fromkeys(label for label, _ in results))
    width = 0.8 / len(names)
    for ax, mode in zip(axes, (0, 1)):
        for i, name in enumerate(names):
            xs = [j + i * width for j, label in enumerate(labels) if (label, name) in results]
            ys = [results[(label, name)][mode] or 0 for label in labels if (label, name) in results]
            ax.bar(xs, ys, width, label=name)
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(labels))], labels)
        ax.set_title(("forward", "forward+backward")[mode])
        ax.set_ylabel("tokens/s")
    axes[0].legend()
    fig.suptitle(f"n={args.n}, {args.heads} heads of {args.dim}, {args.dtype} on {device} (torch {torch.__version__})")
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
