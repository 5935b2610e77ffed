#!/usr/bin/env python3
# test_seed_groups.py: plots/seed_groups.py grouping over seeds and pairing (python3 tests/plots/test_seed_groups.py).
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plots"))
import seed_groups  # noqa: E402


def rec(label, pattern, length, degree, seed, test=None, valid=None, status="ok", **more):
    cid = f"{label}/n={length}"
    r = {"kind": "train", "status": status, "label": label, "pattern": pattern, "length": length, "degree": degree,
         "causal": True, "config_id": cid, "seed": seed, "point": f"{cid}/seed={seed}", "test_bpc": test,
         "valid_bpc": valid, "steps": 100}
    r.update(more)
    return r


def three(label, pattern, length, degree, tests):
    return [rec(label, pattern, length, degree, s, t, t + 0.02) for s, t in zip((1, 2, 3), tests)]


def find(comps, kind, base, other):
    hits = [c for c in comps if c["kind"] == kind and c["baseline"]["config_id"] == base and
            c["other"]["config_id"] == other]
    assert len(hits) == 1, f"{kind} {base} -> {other}: {len(hits)} comparisons"
    return hits[0]


class Grouping(unittest.TestCase):
    def test_groups_by_config_id_over_seeds(self):
        rows = three("bpt(k=4)", "bpt", 64, 16.0, [2.40, 2.43, 2.41]) + [
            rec("bpt(k=4)", "bpt", 64, 16.0, 4, status="failed", reason="killed")]
        [g] = seed_groups.group_train(rows)
        self.assertEqual((g["n"], g["seeds"], g["metric"]), (3, [1, 2, 3], "test_bpc"))
        self.assertEqual(g["not_ok"], [{"seed": 4, "status": "failed", "reason": "killed"}])
        self.assertAlmostEqual(g["test_bpc"]["mean"], 2.413333, places=5)
        self.assertAlmostEqual(g["valid_bpc"]["mean"], 2.433333, places=5)

    def test_old_records_are_one_seed_each_by_point(self):
        old = [{"kind": "train", "status": "ok", "label": "bpt(k=1)", "pattern": "bpt", "length": n, "degree": 5.0,
                "point": f"bpt/k=1/n={n}", "test_bpc": 8.0} for n in (32, 64)]
        groups = seed_groups.group_train(old)
        self.assertEqual([(g["config_id"], g["n"], g["seeds"]) for g in groups],
                         [("bpt/k=1/n=32", 1, [None]), ("bpt/k=1/n=64", 1, [None])])
        self.assertIsNone(groups[0]["test_bpc"]["ci95"])

    def test_a_seed_twice_is_reported_and_kept_once(self):
        rows = three("w", "window", 64, 8.0, [2.5, 2.6, 2.7]) + [rec("w", "window", 64, 8.0, 2, 9.9)]
        warnings = []
        [g] = seed_groups.group_train(rows, warnings.append)
        self.assertEqual(g["n"], 3)
        self.assertAlmostEqual(g["test_bpc"]["mean"], 2.6, places=12)
        self.assertEqual(len(warnings), 1)
        self.assertIn("seed 2 of w/n=64 recorded twice", warnings[0])

    def test_lens_drop_and_flattening_per_seed(self):
        lens = [{"context": 16, "bpc": 2.9}, {"context": 64, "bpc": 2.5}]
        evals = [{"split": "valid", "step": 80, "bpc": 2.51}, {"split": "valid", "step": 100, "bpc": 2.5}]
        [g] = seed_groups.group_train([rec("b", "bpt", 64, 9.0, 1, 2.4, 2.5, context_lens=lens, evals=evals)])
        self.assertAlmostEqual(g["per_seed"][0]["lens_drop"], 0.4, places=12)
        self.assertEqual(g["flattened"], {"count": 1, "of": 1})
        self.assertEqual([(e["context"], e["n"]) for e in g["context_lens"]], [(16, 1), (64, 1)])

    def test_lens_drop_needs_both_contexts(self):
        self.assertIsNone(seed_groups.lens_drop([{"context": 16, "bpc": 2.9}], 64))
        self.assertIsNone(seed_groups.lens_drop(None, 64))


class Comparisons(unittest.TestCase):
    def setUp(self):
        self.groups = seed_groups.group_train(
            three("bpt(k=2)", "bpt", 64, 10.0, [2.50, 2.52, 2.49]) +
            three("bpt(k=4)", "bpt", 64, 16.0, [2.40, 2.43, 2.41]) +
            three("bpt(k=8)", "bpt", 64, 24.0, [2.30, 2.33, 2.31]) +
            three("window(w=16)", "window", 64, 15.5, [2.55, 2.59, 2.56]) +
            three("window(w=12)", "window", 64, 12.5, [2.45, 2.47, 2.46]) +
            three("bpt(k=4)", "bpt", 128, 18.0, [2.38, 2.44, 2.40])[:2])
        self.comps = seed_groups.comparisons(self.groups)

    def test_matched_degree_takes_nearest_ratio(self):
        c = find(self.comps, "matched_degree", "bpt(k=4)/n=64", "window(w=16)/n=64")
        self.assertAlmostEqual(c["degree_ratio"], 15.5 / 16.0, places=12)
        self.assertAlmostEqual(c["mean"], (0.15 + 0.16 + 0.15) / 3, places=12)
        self.assertEqual((c["paper_sign"], c["raw_verdict"]), (1, "supports"))
        # 12.5 is nearer 10 than 16 by ratio (1.25 against 1.28)
        find(self.comps, "matched_degree", "bpt(k=2)/n=64", "window(w=12)/n=64")
        self.assertEqual(len([c for c in self.comps if c["kind"] == "matched_degree"]), 2)

    def test_degree_trend_consecutive_and_extremes(self):
        trend = [(c["baseline"]["config_id"], c["other"]["config_id"], c["pair"])
                 for c in self.comps if c["kind"] == "degree_trend" and c["baseline"]["pattern"] == "bpt"]
        self.assertEqual(trend, [("bpt(k=2)/n=64", "bpt(k=4)/n=64", "consecutive"),
                                 ("bpt(k=4)/n=64", "bpt(k=8)/n=64", "consecutive"),
                                 ("bpt(k=2)/n=64", "bpt(k=8)/n=64", "extremes")])
        c = find(self.comps, "degree_trend", "bpt(k=2)/n=64", "bpt(k=8)/n=64")
        self.assertAlmostEqual(c["mean"], -0.19, places=12)
        self.assertEqual((c["paper_sign"], c["raw_verdict"]), (-1, "supports"))
        w = find(self.comps, "degree_trend", "window(w=12)/n=64", "window(w=16)/n=64")
        self.assertEqual(w["raw_verdict"], "contradicts")

    def test_context_trend_pairs_common_seeds(self):
        c = find(self.comps, "context_trend", "bpt(k=4)/n=64", "bpt(k=4)/n=128")
        self.assertEqual((c["n"], c["seeds"], c["dropped_seeds"]), (2, [1, 2], [3]))
        self.assertAlmostEqual(c["mean"], ((2.38 - 2.40) + (2.44 - 2.43)) / 2, places=12)
        self.assertEqual(c["raw_verdict"], "unresolved")

    def test_valid_bpc_when_no_test_is_shared(self):
        groups = seed_groups.group_train(
            [rec("a", "bpt", 64, 10.0, s, None, v) for s, v in ((1, 2.5), (2, 2.6))] +
            [rec("b", "window", 64, 10.0, s, 2.0, v) for s, v in ((1, 2.7), (2, 2.8))])
        [c] = [c for c in seed_groups.comparisons(groups) if c["kind"] == "matched_degree"]
        self.assertEqual((c["metric"], c["n"]), ("valid_bpc", 2))
        self.assertAlmostEqual(c["mean"], 0.2, places=12)

    def test_no_shared_seed_is_unresolved(self):
        groups = seed_groups.group_train([rec("a", "bpt", 64, 10.0, 1, 2.5), rec("b", "window", 64, 10.0, 2, 2.7)])
        [c] = [c for c in seed_groups.comparisons(groups) if c["kind"] == "matched_degree"]
        self.assertEqual((c["n"], c["mean"], c["ci95"], c["raw_verdict"]), (0, None, None, "unresolved"))
        self.assertEqual((c["verdict"], c["verdict_reason"]), ("inconclusive", "gate failed: runs not flattened (0 of 0)")
                         if c["gates_failed"] else ("inconclusive", "fewer than 2 paired seeds"))
        self.assertEqual(c["dropped_seeds"], [1, 2])


def flat(label, pattern, length, degree, tests, valid=2.3):
    """Three seeds that pass the gates: flattened (gain 0.01 after 80%) and valid BPC within the bound."""
    evals = [{"split": "valid", "step": 80, "bpc": valid + 0.01}, {"split": "valid", "step": 100, "bpc": valid}]
    return [rec(label, pattern, length, degree, s, t, valid, evals=evals) for s, t in zip((1, 2, 3), tests)]


class GatedVerdicts(unittest.TestCase):
    def test_unflattened_runs_make_a_clear_difference_inconclusive(self):
        rows = three("bpt(k=4)", "bpt", 64, 16.0, [2.40, 2.41, 2.42]) + three("w", "window", 64, 16.0, [2.60, 2.62, 2.61])
        c = find(seed_groups.comparisons(seed_groups.group_train(rows)), "matched_degree", "bpt(k=4)/n=64", "w/n=64")
        self.assertEqual(c["raw_verdict"], "supports")
        self.assertEqual(c["verdict"], "inconclusive")
        self.assertIn("runs not flattened (6 of 6)", c["verdict_reason"])

    def test_runs_above_the_bound_are_named(self):
        rows = flat("bpt(k=4)", "bpt", 64, 16.0, [2.40, 2.41, 2.42], valid=2.5) + \
            flat("w", "window", 64, 16.0, [2.60, 2.62, 2.61])
        c = find(seed_groups.comparisons(seed_groups.group_train(rows)), "matched_degree", "bpt(k=4)/n=64", "w/n=64")
        self.assertEqual(c["verdict"], "inconclusive")
        self.assertIn("valid BPC above the 2.4 bound (3 of 6)", c["verdict_reason"])
        self.assertNotIn("flattened", c["verdict_reason"])

    def test_gated_runs_with_a_surviving_interval_decide(self):
        rows = flat("bpt(k=4)", "bpt", 64, 16.0, [2.40, 2.41, 2.42]) + flat("w", "window", 64, 16.0, [2.60, 2.62, 2.61])
        comps = seed_groups.comparisons(seed_groups.group_train(rows))
        c = find(comps, "matched_degree", "bpt(k=4)/n=64", "w/n=64")
        self.assertEqual((c["verdict"], c["family_size"]), ("supports", 1))
        self.assertAlmostEqual(c["p"], c["p_holm"], places=15)  # alone in its family
        [m] = [x for x in comps if x["kind"] == "matched_degree_mean"]
        self.assertAlmostEqual(m["mean"], 0.2, places=12)
        self.assertEqual(m["verdict"], "supports")

    def test_holm_within_a_family_can_undo_a_raw_decision(self):
        # Two matched-degree pairs, each with differences 0.02, 0.03, 0.04 (t = 5.2, df 2, p = 0.035 < 0.05): Holm
        # multiplies the smaller p by 2, so neither survives the correction for the other.
        rows = (flat("bpt(k=2)", "bpt", 64, 8.0, [2.40, 2.40, 2.40]) + flat("a", "window", 64, 8.0, [2.42, 2.43, 2.44]) +
                flat("bpt(k=8)", "bpt", 64, 32.0, [2.40, 2.40, 2.40]) + flat("b", "window", 64, 32.0, [2.42, 2.43, 2.44]))
        comps = seed_groups.comparisons(seed_groups.group_train(rows))
        for other, base in (("a/n=64", "bpt(k=2)/n=64"), ("b/n=64", "bpt(k=8)/n=64")):
            c = find(comps, "matched_degree", base, other)
            self.assertAlmostEqual(c["p"], 0.0351, places=3)
            self.assertEqual((c["raw_verdict"], c["family_size"]), ("supports", 2))
            self.assertAlmostEqual(c["p_holm"], 2 * c["p"], places=12)
            self.assertEqual(c["verdict"], "inconclusive")
            self.assertIn("Holm", c["verdict_reason"])

    def test_context_slope_per_seed(self):
        # BPC rises 0.1, 0.2, 0.3 per doubling for seeds 1, 2, 3 (exact lines in log2 context).
        rows = []
        for n, k in ((64, 0), (128, 1), (256, 2)):
            rows += flat("bpt(k=4)", "bpt", n, 16.0, [2.0 + 0.1 * k, 2.0 + 0.2 * k, 2.0 + 0.3 * k])
        [c] = [x for x in seed_groups.comparisons(seed_groups.group_train(rows)) if x["kind"] == "context_slope"]
        self.assertEqual((c["n"], c["lengths"]), (3, [64, 128, 256]))
        self.assertAlmostEqual(c["mean"], 0.2, places=12)
        self.assertAlmostEqual(c["sd"], 0.1, places=12)
        self.assertEqual(c["raw_verdict"], "unresolved")  # t(2) * 0.1 / sqrt(3) = 0.248 > 0.2


if __name__ == "__main__":
    unittest.main()
