# flex_compare.py: this project's graph op, PyTorch FlexAttention (BlockMask of the same graph) and SDPA dense causal.
"""Times three ways to run one exported pattern graph's attention, checks they agree, writes harness records.

Usage (PyPI torch >= 2.5; the ops library must be built against the same LibTorch; the graph is built again by the
sparsebench package's C++ builders and checked against the file):
  build/harness/sparsebench pattern bpt --n 4096 --set k=4 --causal --export /tmp/bpt4.json
  python3 benchmarks/flex_compare.py build/kernels/libsparsebench_ops.so /tmp/bpt4.json --out results/flex/cpu \
      [--heads 8] [--dim 64] [--batch 1] [--repeats 5] [--device cpu|cuda] [--dtype float32|bfloat16] [--threads N]
  build/harness/sparsebench plot results/flex/cpu      # one throughput figure, the three side by side

The three:
- op: torch.ops.sparsebench.graph_attention over every node of the graph (tokens and extra nodes);
- flex: flex_attention (compiled) over the same nodes, with a BlockMask whose mask_mod is the graph's adjacency:
  extra nodes are appended after the tokens as extra query and key rows, exactly as the op sees them;
- sdpa: scaled_dot_product_attention over the tokens only, causal (the dense baseline, FlashAttention on CUDA).
No relation embeddings: op and flex then compute the same function, and their token outputs must agree (checked;
on the dense pattern sdpa must agree too). Kernel times exclude graph preparation, mask construction and compilation,
which are reported beside them (prepare_s, block_mask_s, compile_s). The BlockMask's density (blocks kept) is
reported beside the element density (edges over nodes squared).

Each (method, mode) appends one record to OUT/records.jsonl in the harness's attention-record schema (label, length,
mode, causal, tokens_per_s with min and max, median_s, samples_s, device, dtype, threads_used, attention_backend),
and OUT/run.json says what ran. Exit status 77 when torch is missing or older than 2.5 (a skip for CTest).
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

SKIP = 77


def need_torch():
    try:
        import torch
    except ImportError as exc:
        print(f"flex_compare: skipped: torch is not importable by {sys.executable} ({exc})", file=sys.stderr)
        sys.exit(SKIP)
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) < (2, 5):
        print(f"flex_compare: skipped: FlexAttention needs torch >= 2.5, {sys.executable} has {torch.__version__}",
              file=sys.stderr)
        sys.exit(SKIP)
    return torch


def import_sparsebench(ops_library):
    """The clone's sparsebench package (python/), on the ops library given."""
    os.environ["SPARSEBENCH_OPS_LIBRARY"] = os.path.abspath(ops_library)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import sparsebench
    return sparsebench


def timed(torch, fn, repeats, device):
    """Median and all samples of fn's wall time in seconds, after one warm-up call."""
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), samples


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops_library")
    ap.add_argument("graph_json")
    ap.add_argument("--out", required=True, help="run directory for records.jsonl and run.json")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: all cores)")
    ap.add_argument("--tol", type=float, default=None, help="max |op - flex| allowed (default 1e-4 fp32, 3e-2 bf16)")
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    torch = need_torch()
    from torch.nn.attention.flex_attention import flex_attention
    import torch.nn.functional as F

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("flex_compare: --device cuda: no CUDA device is visible")
    sparsebench = import_sparsebench(args.ops_library)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    try:
        graph = sparsebench.load_graph(args.graph_json)  # the same C++ builder, checked against the file's edges
    except (OSError, ValueError) as exc:
        raise SystemExit(f"flex_compare: {args.graph_json}: {exc}")
    doc = {"pattern": graph.name, "params": graph.params, "causal": graph.causal}
    n_nodes, n_tokens, n_edges, causal = graph.n_nodes, graph.n_tokens, graph.n_edges, graph.causal
    row_ptr = graph.row_ptr

    # Construction, timed apart from the kernels (no relation embeddings: the op and flex compute the same function).
    t0 = time.perf_counter()
    graph_dev = graph.to(dev)
    prepared = graph_dev.prepared()
    prepare_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    block_mask = sparsebench.block_mask(graph_dev)
    block_mask_s = time.perf_counter() - t0
    block_density = 1.0 - block_mask.sparsity() / 100.0
    element_density = n_edges / float(n_nodes * n_nodes)
    flex = torch.compile(flex_attention, dynamic=False)

    torch.manual_seed(0)
    shape = (args.batch, n_nodes, args.heads, args.dim)  # the op's layout [B, N, H, D]
    q, k, v = (torch.randn(shape, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
    d_o = torch.randn(shape, device=dev, dtype=dtype)
    qt, kt, vt = (x.detach()[:, :n_tokens].clone().requires_grad_(True) for x in (q, k, v))

    def op():
        return torch.ops.sparsebench.graph_attention(q, k, v, None, prepared)

    # FlexAttention has no CPU backward and refuses CPU inputs that require grad: its forward takes detached ones.
    qd, kd, vd = (x.detach() for x in (q, k, v))

    def flex_run(grad=True):  # [B, H, N, D] in and out
        a, b, c = (q, k, v) if grad else (qd, kd, vd)
        return flex(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2), block_mask=block_mask).transpose(1, 2)

    def sdpa():
        return F.scaled_dot_product_attention(qt.transpose(1, 2), kt.transpose(1, 2), vt.transpose(1, 2),
                                              is_causal=True).transpose(1, 2)

    t0 = time.perf_counter()
    with torch.no_grad():
        o_flex = flex_run(grad=False)  # compiles
        o_op = op()
    compile_s = time.perf_counter() - t0
    tol = args.tol if args.tol is not None else (1e-4 if args.dtype == "float32" else 3e-2)
    # Rows without any source (none here for causal patterns) are 0 in the op and NaN-free in flex; compare tokens.
    err = (o_op[:, :n_tokens].float() - o_flex[:, :n_tokens].float()).abs().max().item()
    if not err <= tol:
        raise SystemExit(f"flex_compare: op and flex disagree on the token outputs: max |diff| = {err:.3g} > {tol}")
    err_sdpa = None
    if doc.get("pattern") == "dense" and causal:
        with torch.no_grad():
            err_sdpa = (o_op[:, :n_tokens].float() - sdpa().float()).abs().max().item()
        if not err_sdpa <= tol:
            raise SystemExit(f"flex_compare: op and sdpa disagree on the dense pattern: max |diff| = {err_sdpa:.3g}")

    def forward(fn):
        def run():
            with torch.no_grad():
                fn()
        return run

    def forward_backward(fn, inputs, grad):
        return lambda: torch.autograd.grad(fn(), inputs, grad)

    # The op's kernel backend as the library names it (a library without the query: the device alone).
    try:
        op_backend = "sparsebench:" + torch.ops.sparsebench.attention_backend(args.device)
    except (AttributeError, RuntimeError):
        op_backend = f"sparsebench:{args.device}"
    backends = {"op": op_backend, "flex": "flex_attention (compiled)", "sdpa": sdpa_backend(torch, qt)}
    methods = {
        "op": (op, [q, k, v], d_o, n_nodes),
        "flex": (lambda: flex_run(grad=args.device != "cpu"), [q, k, v], d_o, n_nodes),
        "sdpa": (sdpa, [qt, kt, vt], d_o[:, :n_tokens].contiguous(), n_tokens),
    }

    def last_call(name):
        """What the op's last forward ran where (cuda:tc: its share of edges on tensor cores); "" otherwise."""
        if name != "op":
            return ""
        try:
            return torch.ops.sparsebench.attention_last_call(args.device)
        except (AttributeError, RuntimeError):
            return ""

    params = doc.get("params", {})
    pname = doc.get("pattern", "?")
    ptext = ",".join(f"{a}={b}" for a, b in sorted(params.items()))
    os.makedirs(args.out, exist_ok=True)
    records_path = os.path.join(args.out, "records.jsonl")
    index = 0
    if os.path.exists(records_path):
        with open(records_path) as f:
            index = sum(1 for line in f if line.strip())
    tokens = args.batch * n_tokens
    token_degree = int(row_ptr[n_tokens]) / n_tokens  # edges into tokens (rows 0..n_tokens-1) per token
    with open(records_path, "a") as out:
        for name, (fn, inputs, grad, seq) in methods.items():
            for mode in ("forward", "forward_backward"):
                label = "sdpa dense causal" if name == "sdpa" else f"{name} {pname}({ptext})"
                if name == "flex" and mode == "forward_backward" and args.device == "cpu":
                    rec = {"scenario": "flex_compare", "kind": "attention", "index": index, "status": "skipped",
                           "reason": f"FlexAttention has no backward on CPU (torch {torch.__version__})",
                           "label": label, "method": name, "mode": mode, "length": n_tokens, "causal": causal,
                           "batch": args.batch,
                           "device": args.device, "dtype": args.dtype, "torch_version": torch.__version__}
                    out.write(json.dumps(rec, sort_keys=True) + "\n")
                    index += 1
                    print(f"{label:>40} {mode:>16}: skipped: {rec['reason']}")
                    continue
                run = forward(fn) if mode == "forward" else forward_backward(fn, inputs, grad)
                med, samples = timed(torch, run, args.repeats, args.device)
                rec = {
                    "scenario": "flex_compare", "kind": "attention", "index": index, "status": "ok",
                    "label": label, "method": name, "pattern": pname if name != "sdpa" else "dense",
                    "params": params, "causal": True if name == "sdpa" else causal, "mode": mode,
                    "length": n_tokens, "batch": args.batch, "heads": args.heads, "head_dim": args.dim,
                    "relations": False, "tokens": tokens, "threads": args.threads,
                    "threads_used": torch.get_num_threads(), "device": args.device, "dtype": args.dtype,
                    "attention_backend": backends[name], "sequence_rows": seq,
                    "degree": (n_tokens + 1) / 2.0 if name == "sdpa" else token_degree,
                    "spread": (max(samples) - min(samples)) / med,
                    "median_s": med, "samples_s": samples, "tokens_per_s": tokens / med,
                    "tokens_per_s_min": tokens / max(samples), "tokens_per_s_max": tokens / min(samples),
                    "graph": {"n_nodes": n_nodes, "n_tokens": n_tokens, "n_edges": n_edges},
                    "element_density": element_density, "block_density": block_density,
                    "block_size": list(block_mask.BLOCK_SIZE), "prepare_s": prepare_s,
                    "block_mask_s": block_mask_s, "compile_s": compile_s, "max_abs_diff_op_flex": err,
                    "max_abs_diff_op_sdpa": err_sdpa, "torch_version": torch.__version__,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    **({"attention_kernels": last_call(name)} if last_call(name) else {}),
                }
                out.write(json.dumps(rec, sort_keys=True) + "\n")
                out.flush()
                index += 1
                print(f"{label:>40} {mode:>16}: {med * 1e3:9.2f} ms  {tokens / med:12.0f} tokens/s  "
                      f"[{backends[name]}]")
    # The fields `sparsebench plot` reads from a run.json, plus what this comparison ran.
    description = (f"{pname}({ptext}) {'causal' if causal else 'bidirectional'}: the sparsebench op, "
                   f"FlexAttention with the graph's BlockMask and SDPA dense causal; B={args.batch} H={args.heads} "
                   f"D={args.dim} {args.dtype} on {args.device}")
    run_json = {"scenario_name": "flex_compare", "scenario": {"name": "flex_compare", "description": description},
                "kind": "attention", "started": started, "libtorch": torch.__version__, "cpu": cpu_name(),
                "hardware_threads": os.cpu_count(), "cuda_available": torch.cuda.is_available(),
                "graph_files": previous_graph_files(args.out) + [os.path.abspath(args.graph_json)],
                "pattern": pname, "params": params,
                "causal": causal, "device": args.device, "dtype": args.dtype, "python": sys.version.split()[0],
                "host": platform.node(), "threads": torch.get_num_threads(),
                "simd_target": os.environ.get("SB_CPU_TARGET", "(best)"), "ops_library": args.ops_library}
    with open(os.path.join(args.out, "run.json"), "w") as f:
        json.dump(run_json, f, indent=1, sort_keys=True)
    print(f"graph: {n_nodes} nodes ({n_tokens} tokens), {n_edges} edges; element density {element_density:.4f}, "
          f"block density {block_density:.4f} (blocks {block_mask.BLOCK_SIZE}); prepare {prepare_s * 1e3:.1f} ms, "
          f"block mask {block_mask_s * 1e3:.1f} ms, first calls (compile) {compile_s:.1f} s; "
          f"max |op - flex| {err:.2g}")
    return 0


def previous_graph_files(out_dir):
    """Graph files of earlier invocations into the same run directory (each appends its records)."""
    try:
        with open(os.path.join(out_dir, "run.json")) as f:
            return list(json.load(f).get("graph_files", []))
    except (OSError, ValueError, AttributeError):
        return []


def cpu_name():
    """The CPU model as /proc/cpuinfo names it (platform.processor() is often empty on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sdpa_backend(torch, q):
    """The kernel scaled_dot_product_attention picks for these inputs (at::SDPBackend numbering)."""
    names = {0: "sdpa:math", 1: "sdpa:flash_attention", 2: "sdpa:efficient_attention", 3: "sdpa:cudnn_attention"}
    try:
        t = q.transpose(1, 2)
        return names.get(int(torch._fused_sdp_choice(t, t, t, is_causal=True)), "sdpa:other")
    except (AttributeError, RuntimeError):
        return "sdpa"


if __name__ == "__main__":
    sys.exit(main())
