"""Median tokens/s per mode from run.sh's logs (progress lines after the first 50 steps) -> summary.json."""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]
summary = {}
for mode in ("keep", "flush"):
    rounds = []
    for log in sorted(glob.glob(os.path.join(out, f"{mode}-r*.log"))):
        rates = [float(m.group(1)) for m in re.finditer(r"^step +\d+ .* (\d+) tok/s", open(log).read(), re.M)][1:]
        res = json.loads(open(log).read().strip().splitlines()[-1])  # the stopped run's record
        rounds.append({"log": os.path.basename(log), "median_tokens_per_s": statistics.median(rates),
                       "denormals": res.get("denormals"), "final_loss": res.get("final_loss"),
                       "steps": res.get("steps"), "git_commit": res.get("git_commit"), "cpu": res.get("cpu"),
                       "simd_target": res.get("simd_target"), "threads": res.get("threads")})
    summary[mode] = {"rounds": rounds, "median_tokens_per_s": statistics.median(r["median_tokens_per_s"] for r in rounds)}
summary["speedup_flush_over_keep"] = summary["flush"]["median_tokens_per_s"] / summary["keep"]["median_tokens_per_s"]
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps({m: summary[m]["median_tokens_per_s"] for m in ("keep", "flush")}),
      "speedup %.2f" % summary["speedup_flush_over_keep"])
