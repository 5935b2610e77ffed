#!/usr/bin/env python3
# Tables from gpu_checks.sh's train step: tokens/s per run (with its AdamW and CUDA-graph state), the --profile split
# against the measured step, and fp32 losses of each update against the default's, step by step.
# usage: python3 scripts/gpu_train_summary.py TRAIN_DIR   (the train/ folder unpacked from gpu.tgz)
import json
import os
import sys


def load(run_dir):
    with open(os.path.join(run_dir, "result.json")) as f:
        return json.load(f)


def losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "train":
                out[r["step"]] = r["loss"]
    return out


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print("usage: python3 scripts/gpu_train_summary.py TRAIN_DIR", file=sys.stderr)
        return 2
    root = argv[0]
    runs = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "result.json")))
    print("| run | params | tokens/step | steps | tokens/s | optimizer | CUDA graphs | final loss |")
    print("|---|---:|---:|---:|---:|---|---|---:|")
    for name in runs:
        r = load(os.path.join(root, name))
        c = r["config"]
        tps = r.get("tokens_per_s", 0.0)
        print(f"| {name} | {r['parameters'] / 1e6:.2f}M | {c['batch'] * c['model']['context']} | {r['steps']} | "
              f"{tps / 1e3:,.0f}k | {r.get('optimizer', 'adamw (per-parameter, before the change)')} | "
              f"{r.get('cuda_graphs', '-')} | {r.get('final_loss')} |")
    print()
    for name in runs:
        prof = load(os.path.join(root, name)).get("timing", {}).get("profile")
        if not prof:
            continue
        r = load(os.path.join(root, name))
        this = r["timing"]["this_run"]
        sections = this["data_s"] + this["forward_s"] + this["backward_s"] + this["optimizer_s"]
        print(f"{name}: sections {1e3 * sections / this['steps']:.2f} ms per step against "
              f"{1e3 * r['timing']['train_s'] / r['steps']:.2f} ms measured "
              f"(data {1e3 * this['data_s'] / this['steps']:.2f}, forward {1e3 * this['forward_s'] / this['steps']:.2f}, "
              f"backward {1e3 * this['backward_s'] / this['steps']:.2f}, optimizer+clip "
              f"{1e3 * this['optimizer_s'] / this['steps']:.2f})")
    print()
    ref = os.path.join(root, "quality_fp32")
    if os.path.isdir(ref):
        base = losses(ref)
        for other in ("quality_fp32_per_parameter", "quality_fp32_graphs", "quality_fp32_baseline"):
            d = os.path.join(root, other)
            if not os.path.isdir(d):
                continue
            o = losses(d)
            common = sorted(set(base) & set(o))
            if not common:
                continue
            rel = max(abs(base[s] - o[s]) / abs(o[s]) for s in common)
            print(f"fp32 losses, quality_fp32 against {other}: {len(common)} steps, largest relative difference "
                  f"{rel:.2e} (step 1: {base[common[0]]:.6f} / {o[common[0]]:.6f}; step {common[-1]}: "
                  f"{base[common[-1]]:.6f} / {o[common[-1]]:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
