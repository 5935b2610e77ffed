#!/usr/bin/env python3
# test_seed_spread.py: plots/seed_spread.py and the chi-square helpers behind it in plots/stats.py (python3 ...).
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

PLOTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plots")
sys.path.insert(0, PLOTS)
import stats  # noqa: E402

SCRIPT = os.path.join(PLOTS, "seed_spread.py")


class ChiSquare(unittest.TestCase):
    def test_closed_forms(self):
        for x in (0.1, 1.0, 2.0, 7.5, 30.0):
            self.assertAlmostEqual(stats.chi2_cdf(x, 2), 1.0 - math.exp(-x / 2.0), places=12, msg=f"df=2, x={x}")
            self.assertAlmostEqual(stats.chi2_cdf(x, 4), 1.0 - math.exp(-x / 2.0) * (1.0 + x / 2.0), places=12,
                                   msg=f"df=4, x={x}")

    def test_tabled_quantiles(self):
        for x, df in ((3.841459, 1), (5.991465, 2), (11.070498, 5), (18.307038, 10)):
            self.assertAlmostEqual(stats.chi2_cdf(x, df), 0.95, places=6, msg=f"df={df}")
        self.assertEqual(stats.chi2_cdf(0.0, 3), 0.0)

    def test_half_width_probability(self):
        # k = 3: the half-width 4.3027 s / sqrt(3) is within h when s <= h sqrt(3) / 4.3027, and 2 s^2 / sd^2 is
        # chi-square with 2 degrees of freedom: P = 1 - exp(-s_max^2 / sd^2).
        s_max = 5.0 * math.sqrt(3.0) / 4.302653
        self.assertAlmostEqual(stats.half_width_probability(2.4, 3, 5.0), 1.0 - math.exp(-(s_max / 2.4) ** 2),
                               places=5)
        self.assertEqual(stats.half_width_probability(0.0, 3, 5.0), 1.0)
        self.assertGreater(stats.half_width_probability(2.4, 6, 5.0), stats.half_width_probability(2.4, 3, 5.0))
        with self.assertRaisesRegex(ValueError, "k >= 2"):
            stats.half_width_probability(1.0, 1, 5.0)

    def test_seeds_for_half_width(self):
        # sd 2.4: 3 seeds give 4.3027 * 2.4 / sqrt(3) = 5.96, 4 give 3.1824 * 2.4 / 2 = 3.82.
        self.assertEqual(stats.seeds_for_half_width(2.4, 5.0), 4)
        self.assertEqual(stats.seeds_for_half_width(1.0, 5.0), 3)  # 2 seeds: 12.706 / sqrt(2) = 8.98 > 5
        self.assertIsNone(stats.seeds_for_half_width(100.0, 0.01, most=50))


def record(label, seed, acc, point, late_gain=0.0):
    """A finished MQAR record whose runs pass the task gates unless `late_gain` is 3 points or more."""
    return {"kind": "train", "status": "ok", "label": label, "pattern": label.split("(")[0], "seed": seed,
            "test_accuracy": acc, "train_dir": f"elsewhere/train/{point}", "steps": 100,
            "task": {"name": "mqar", "chance": 0.0625,
                     "params": {"pairs": 8, "values": "distinct within a sequence", "answers": "hidden"}},
            "evals": [{"kind": "eval", "split": "valid", "step": 80, "accuracy": acc - late_gain},
                      {"kind": "eval", "split": "valid", "step": 100, "accuracy": acc}],
            "accuracy_by_distance": [{"lo": 2, "hi": 3, "answers": 2048, "accuracy": acc}],
            "reach": {"buckets": [{"lo": 2, "hi": 3, "fraction_reachable": 1}]}}


def write_run(root, name, rows, weight_decay=0.1):
    """A run directory: records.jsonl and each point's result.json with its training configuration."""
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "records.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
            point = os.path.join(d, "train", os.path.basename(r["train_dir"]))
            os.makedirs(point)
            cfg = {"seed": r["seed"], "out_dir": point, "threads": 1, "steps": 100, "weight_decay": weight_decay,
                   "task": "mqar", "model": {"pattern": r["pattern"], "layers": 3, "pattern_params": {"w": 9}}}
            with open(os.path.join(point, "result.json"), "w") as g:
                json.dump({"config": cfg}, g)
    return d


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)


class Cli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        # window: seeds 1-3 in one directory, 4 in another (same configuration: one group of four seeds)
        self.a = write_run(self.root, "a", [record("window(w=9)", s, x, f"000{s}") for s, x in
                                            ((1, 0.60), (2, 0.61), (3, 0.62))])
        self.b = write_run(self.root, "b", [record("window(w=9)", 4, 0.70, "0000", late_gain=0.05)])
        # the same pattern under another weight decay: its own group
        self.c = write_run(self.root, "c", [record("window(w=9)", 1, 0.50, "0000")], weight_decay=0.01)

    def tearDown(self):
        self.tmp.cleanup()

    def test_pools_seeds_of_one_configuration_only(self):
        out = os.path.join(self.root, "spread.json")
        p = run(self.a, self.b, self.c, "--json", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            accounts = json.load(f)
        self.assertEqual([(a["config"], a["seeds"]) for a in accounts],
                         [({"weight_decay": 0.01}, [1]), ({"weight_decay": 0.1}, [1, 2, 3, 4])])
        four = accounts[1]
        want = stats.summary([60.0, 61.0, 62.0, 70.0])
        self.assertAlmostEqual(four["summary"]["half_width"], want["half_width"], places=9)
        # Of the four 3-seed subsets only {60, 61, 62} (sd 1: +-2.48) is within +-5; each with 70 is not.
        self.assertEqual(four["subsets"], {"meeting": 1, "total": 4})
        self.assertAlmostEqual(four["normal"], stats.half_width_probability(want["sd"], 3, 5.0), places=12)
        self.assertEqual(four["seeds_needed"], stats.seeds_for_half_width(want["sd"], 5.0))
        self.assertEqual(list(four["gates_failed"]), ["4"])
        self.assertIn("not flattened", four["gates_failed"]["4"][0])
        self.assertIsNone(accounts[0]["subsets"])  # one seed: no interval, no estimate
        self.assertIn("| window(w=9) | weight_decay=0.1 | 1, 2, 3, 4 | 60.0, 61.0, 62.0, 70.0 |", p.stdout)
        self.assertIn("window(w=9) (weight_decay=0.1) seed 4: not flattened", p.stdout)

    def test_target_and_subset_size(self):
        p = run(self.a, self.b, "--seeds", "4", "--half-width", "20", "--json", os.path.join(self.root, "j"))
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.root, "j")) as f:
            acc = json.load(f)[0]
        self.assertEqual(acc["subsets"], {"meeting": 1, "total": 1})
        self.assertIn("4-seed subsets within ±20", p.stdout)

    def test_one_run_twice_is_refused(self):
        p = run(self.a, self.a)
        self.assertEqual(p.returncode, 2)
        self.assertIn(f"{self.a}: window(w=9) seed 1: already read from {self.a}", p.stderr)

    def test_bad_input_names_what(self):
        p = run(os.path.join(self.root, "missing"))
        self.assertEqual(p.returncode, 2)
        self.assertIn(os.path.join(self.root, "missing", "records.jsonl") + ": no such file", p.stderr)
        os.remove(os.path.join(self.a, "train", "0002", "result.json"))
        p = run(self.a)
        self.assertEqual(p.returncode, 2)
        self.assertIn(os.path.join(self.a, "train", "0002", "result.json") + ": field config", p.stderr)
        with open(os.path.join(self.c, "records.jsonl"), "a") as f:
            f.write("{broken\n")
        p = run(self.c)
        self.assertEqual(p.returncode, 2)
        self.assertIn(os.path.join(self.c, "records.jsonl") + ": line 2: not a JSON record", p.stderr)
        for bad in (("--seeds", "1"), ("--half-width", "0")):
            p = run(self.b, *bad)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn(f"{bad[0]} {bad[1]}", p.stderr)


if __name__ == "__main__":
    unittest.main()
