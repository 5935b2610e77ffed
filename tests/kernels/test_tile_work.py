#!/usr/bin/env python3
# scripts/tile_work.py against hand-counted unions, mixed columns and relation tables, and its message on a bad file.
import json
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import tile_work  # noqa: E402

# Tokens 0..3. Rows 0 and 1 disagree on both their columns; rows 2 and 3 agree on column 2; column 3 has one row.
EXPORT = {"pattern": "hand", "params": {}, "n": 4, "causal": False, "nodes": [],
          "edges": [[0, 0, "a"], [1, 0, "b"], [0, 1, "c"], [1, 1, "a"], [2, 2, "a"], [2, 3, "a"], [3, 3, "a"]]}


def close(a, b):
    return abs(a - b) < 1e-12


def main():
    fails = []
    got = {w["rows"]: w for w in tile_work.work(EXPORT, [2, 4])}
    # 2 rows: groups {0,1} (union 2, both columns mixed: 4 edges, slots a, b, c) and {2,3} (union 2, none mixed).
    # 4 rows: one group, union 4, the same two mixed columns and three slots.
    want = {2: dict(edges=7, union_per_edge=4 * 2 / 7, mixed_edge_share=4 / 7, table_per_edge=3 * 2 / 7,
                    forward_per_counted=(2 * 4 + 3) * 2 / 14, dq_per_counted=(3 * 4 + 3 * 3) * 2 / 21),
            4: dict(edges=7, union_per_edge=4 * 4 / 7, mixed_edge_share=4 / 7, table_per_edge=3 * 4 / 7,
                    forward_per_counted=(2 * 4 + 3) * 4 / 14, dq_per_counted=(3 * 4 + 3 * 3) * 4 / 21)}
    for r, fields in want.items():
        for k, v in fields.items():
            if not close(got[r][k], v):
                fails.append(f"rows={r} {k}: {got[r][k]} != {v}")
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tile_work.py"), bad],
                             capture_output=True, text=True)
        if res.returncode == 0 or f"tile_work: {bad}: not a graph export" not in res.stderr:
            fails.append(f"bad file: rc={res.returncode} stderr={res.stderr!r}")
        good = os.path.join(tmp, "g.json")
        with open(good, "w") as f:
            json.dump(EXPORT, f)
        res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tile_work.py"), good, "--rows", "2"],
                             capture_output=True, text=True)
        if res.returncode != 0 or "| 2 | 1.14 | 0.57 | 0.86 | 1.57 | 2.00 |" not in res.stdout:
            fails.append(f"table: rc={res.returncode} stdout={res.stdout!r}")
    for f in fails:
        print("FAIL", f)
    print("ok" if not fails else f"{len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
