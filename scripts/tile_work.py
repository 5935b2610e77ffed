#!/usr/bin/env python3
# Work a tiled CPU kernel executes per counted flop on a graph export, from relation terms and union padding.
# The GEMM fraction of `bench kernels` counts 4*D flops per edge and head in the forward (q.k and p.v). A tile of R
# destination rows runs over the union U of their sources, and with relation embeddings every column whose rows
# disagree on the relation adds one q_i . r_s dot per (row, relation slot) of the group: a table of T slots x R rows.
# Forward: (2U + T) R D multiply-adds against the counted 2 E D; backward by destination: scores, dP and dq over the
# union plus the table, its dq term and its d_rel term (3U + 3T) against 3 E D. Token rows only, in aligned groups
# of R node ids (the kernels' row groups; heavy rows they cut apart are not modelled).
# Usage: sparsebench pattern bpt --n 8192 --set k=4 --export g.json; scripts/tile_work.py g.json [--rows 4 16]
import argparse
import collections
import json
import sys


def work(export, rows):
    n = export["n"]
    sources = collections.defaultdict(dict)  # destination token -> {source: relation}
    for src, dst, rel in export["edges"]:
        if dst < n:
            sources[dst][src] = rel
    edges = sum(len(s) for s in sources.values())
    out = []
    for r in rows:
        union = mixed = table = 0
        for g0 in range(0, n, r):
            cols = collections.defaultdict(list)
            for i in range(g0, min(g0 + r, n)):
                for src, rel in sources[i].items():
                    cols[src].append(rel)
            union += len(cols)
            slots = set()
            for rels in cols.values():
                if len(set(rels)) > 1:
                    mixed += len(rels)
                    slots.update(rels)
            table += len(slots)
        out.append({"rows": r, "edges": edges, "union_per_edge": union * r / edges, "mixed_edge_share": mixed / edges,
                    "table_per_edge": table * r / edges, "forward_per_counted": (2 * union + table) * r / (2 * edges),
                    "dq_per_counted": (3 * union + 3 * table) * r / (3 * edges)})
    return out


def main():
    ap = argparse.ArgumentParser(description="Work per counted flop of the CPU tiles on a graph export.")
    ap.add_argument("export", help="JSON from `sparsebench pattern NAME --export FILE`")
    ap.add_argument("--rows", type=int, nargs="+", default=[4, 16], help="rows per tile (4: the 4-row tile, 16: wide)")
    args = ap.parse_args()
    try:
        with open(args.export) as f:
            export = json.load(f)
        label = f"{export['pattern']} {export['params']} n={export['n']}"
        if not export["edges"]:
            raise ValueError("no edges")
    except (OSError, ValueError, KeyError, TypeError) as err:
        sys.exit(f"tile_work: {args.export}: not a graph export ({err})")
    print(f"{label}: relation terms by table for columns whose rows disagree")
    print("| rows | union / edges | edges in mixed columns | table / edges | forward work / counted | dq work / counted |")
    print("|---:|---:|---:|---:|---:|---:|")
    for w in work(export, args.rows):
        print(f"| {w['rows']} | {w['union_per_edge']:.2f} | {w['mixed_edge_share']:.2f} | {w['table_per_edge']:.2f} | "
              f"{w['forward_per_counted']:.2f} | {w['dq_per_counted']:.2f} |")


if __name__ == "__main__":
    main()
