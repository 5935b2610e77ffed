#!/usr/bin/env python3
# test_stats.py: plots/stats.py against hand-computed values and tables (run: python3 tests/plots/test_stats.py).
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plots"))
import stats  # noqa: E402


def evals_of(curve):
    return [{"kind": "eval", "split": "valid", "step": s, "bpc": b, "bytes": 4096} for s, b in curve]


class MeanSd(unittest.TestCase):
    def test_three_values(self):
        self.assertAlmostEqual(stats.mean([2.0, 2.2, 2.4]), 2.2, places=12)
        self.assertAlmostEqual(stats.sample_sd([2.0, 2.2, 2.4]), 0.2, places=12)

    def test_sd_uses_n_minus_1(self):
        # [1, 3]: deviations +-1, sum of squares 2, over n - 1 = 1 -> sd sqrt(2) (not 1, the population sd)
        self.assertAlmostEqual(stats.sample_sd([1.0, 3.0]), math.sqrt(2.0), places=12)

    def test_too_few_values(self):
        self.assertIsNone(stats.sample_sd([2.5]))
        with self.assertRaisesRegex(ValueError, "mean: no values"):
            stats.mean([])


class StudentT(unittest.TestCase):
    def test_quantiles_against_tables(self):
        for df, want in ((1, 12.706205), (2, 4.302653), (3, 3.182446), (10, 2.228139), (30, 2.042272)):
            self.assertAlmostEqual(stats.t_quantile(0.975, df), want, places=5, msg=f"df={df}")

    def test_large_df_tends_to_normal(self):
        self.assertAlmostEqual(stats.t_quantile(0.975, 1e6), 1.959964, places=5)
        self.assertAlmostEqual(stats.t_quantile(0.975, 1e4), 1.960201, places=5)

    def test_cdf_symmetry_and_values(self):
        # df=1 is the Cauchy distribution: P(T <= 1) = 3/4 exactly
        self.assertAlmostEqual(stats.t_cdf(1.0, 1), 0.75, places=12)
        self.assertAlmostEqual(stats.t_cdf(2.0, 5), 0.9490303, places=7)
        self.assertAlmostEqual(stats.t_cdf(-2.0, 5), 1.0 - 0.9490303, places=7)
        self.assertEqual(stats.t_cdf(0.0, 4), 0.5)

    def test_lower_quantile_is_negative(self):
        self.assertAlmostEqual(stats.t_quantile(0.025, 2), -4.302653, places=5)

    def test_bad_arguments_name_the_parameter(self):
        with self.assertRaisesRegex(ValueError, "p must lie in"):
            stats.t_quantile(1.0, 3)
        with self.assertRaisesRegex(ValueError, "df must be > 0"):
            stats.t_cdf(1.0, 0)


class Summary(unittest.TestCase):
    def test_interval_of_three(self):
        s = stats.summary([2.0, 2.2, 2.4])
        self.assertEqual(s["n"], 3)
        # half width = t(0.975, 2) * sd / sqrt(n) = 4.302653 * 0.2 / sqrt(3) = 0.496827
        self.assertAlmostEqual(s["half_width"], 0.496827, places=5)
        self.assertAlmostEqual(s["ci95"][0], 2.2 - 0.496827, places=5)
        self.assertAlmostEqual(s["ci95"][1], 2.2 + 0.496827, places=5)

    def test_interval_of_two_uses_df_1(self):
        s = stats.summary([1.0, 3.0])  # half width = 12.706205 * sqrt(2) / sqrt(2)
        self.assertAlmostEqual(s["half_width"], 12.706205, places=5)

    def test_one_value_has_no_interval(self):
        s = stats.summary([2.5])
        self.assertEqual((s["n"], s["mean"], s["sd"], s["ci95"], s["half_width"]), (1, 2.5, None, None, None))

    def test_no_values(self):
        self.assertEqual(stats.summary([])["n"], 0)
        self.assertIsNone(stats.summary([])["mean"])


class Paired(unittest.TestCase):
    def test_aligned_by_seed_with_missing_seed_dropped(self):
        x = {1: 2.50, 2: 2.52, 3: 2.49, 4: 9.0}
        y = [(3, 2.41), (1, 2.40), (2, 2.43), (5, 0.0)]
        d = stats.paired_difference(x, y)
        self.assertEqual(d["seeds"], [1, 2, 3])
        self.assertEqual(d["dropped_seeds"], [4, 5])
        self.assertEqual(d["n"], 3)
        # differences 0.10, 0.09, 0.08: mean 0.09, sd 0.01, half width 4.302653 * 0.01 / sqrt(3)
        self.assertAlmostEqual(d["mean"], 0.09, places=12)
        self.assertAlmostEqual(d["sd"], 0.01, places=12)
        self.assertAlmostEqual(d["ci95"][0], 0.09 - 0.0248414, places=6)
        self.assertAlmostEqual(d["ci95"][1], 0.09 + 0.0248414, places=6)

    def test_one_common_seed_gives_no_interval(self):
        d = stats.paired_difference({1: 2.0, 2: 2.1}, {2: 2.0, 3: 1.0})
        self.assertEqual((d["n"], d["seeds"], d["ci95"]), (1, [2], None))
        self.assertAlmostEqual(d["mean"], 0.1, places=12)

    def test_no_common_seed(self):
        d = stats.paired_difference({1: 2.0}, {2: 2.0})
        self.assertEqual((d["n"], d["mean"], d["ci95"]), (0, None, None))


class Verdict(unittest.TestCase):
    def test_every_branch(self):
        self.assertEqual(stats.verdict(0.1, 0.3, +1), "supports")
        self.assertEqual(stats.verdict(0.1, 0.3, -1), "contradicts")
        self.assertEqual(stats.verdict(-0.3, -0.1, -1), "supports")
        self.assertEqual(stats.verdict(-0.3, -0.1, +1), "contradicts")
        self.assertEqual(stats.verdict(-0.1, 0.3, +1), "unresolved")
        self.assertEqual(stats.verdict(-0.1, 0.3, -1), "unresolved")

    def test_zero_on_the_edge_is_not_excluded(self):
        self.assertEqual(stats.verdict(0.0, 0.3, +1), "unresolved")
        self.assertEqual(stats.verdict(-0.3, 0.0, -1), "unresolved")

    def test_no_interval_is_unresolved(self):
        self.assertEqual(stats.verdict(None, None, +1), "unresolved")
        one_seed = stats.paired_difference({1: 3.0}, {1: 2.0})  # a large difference, but one seed
        self.assertEqual(stats.verdict(*(one_seed["ci95"] or [None, None]), +1), "unresolved")

    def test_zero_sign_refused(self):
        with self.assertRaisesRegex(ValueError, "paper_sign"):
            stats.verdict(0.1, 0.2, 0)


class Flattened(unittest.TestCase):
    def test_still_improving(self):
        # last eval at or before 80 of 100 steps is step 80 (2.60); the last eval is 2.50: gained 0.10
        imp, flat = stats.flattened(evals_of([(20, 3.0), (40, 2.8), (60, 2.7), (80, 2.60), (100, 2.50)]), 100)
        self.assertAlmostEqual(imp, 0.10, places=12)
        self.assertFalse(flat)

    def test_flat(self):
        imp, flat = stats.flattened(evals_of([(25, 2.7), (50, 2.52), (75, 2.51), (100, 2.50)]), 100)
        self.assertAlmostEqual(imp, 0.01, places=12)  # step 75 is the last at or before 80
        self.assertTrue(flat)

    def test_threshold(self):
        self.assertTrue(stats.flattened(evals_of([(80, 2.529), (100, 2.50)]), 100)[1])
        self.assertFalse(stats.flattened(evals_of([(80, 2.531), (100, 2.50)]), 100)[1])

    def test_unsorted_evals_and_other_splits(self):
        evals = evals_of([(100, 2.50), (40, 2.9), (80, 2.60)])
        evals.append({"kind": "eval", "split": "test", "step": 90, "bpc": 1.0})
        self.assertAlmostEqual(stats.flattened(evals, 100)[0], 0.10, places=12)

    def test_too_few_evals(self):
        self.assertIsNone(stats.flattened([], 100))
        self.assertIsNone(stats.flattened(None, 100))
        self.assertIsNone(stats.flattened(evals_of([(100, 2.5)]), 100))  # only the final one
        self.assertIsNone(stats.flattened(evals_of([(90, 2.6), (100, 2.5)]), 100))  # none at or before 80
        self.assertIsNone(stats.flattened(evals_of([(20, 2.6), (60, 2.5)]), 100))  # the last one is before 80
        self.assertIsNone(stats.flattened(evals_of([(20, 2.6), (100, 2.5)]), None))


class Corrections(unittest.TestCase):
    def test_holm_by_hand(self):
        # Sorted 0.01, 0.02, 0.04 -> 3 x 0.01, max(0.03, 2 x 0.02), max(0.04, 1 x 0.04); None is not a test.
        adj = stats.holm([0.04, None, 0.01, 0.02])
        self.assertIsNone(adj[1])
        for got, want in zip([adj[0], adj[2], adj[3]], [0.04, 0.03, 0.04]):
            self.assertAlmostEqual(got, want, places=15)
        self.assertEqual(stats.holm([0.6, 0.9]), [1.0, 1.0])

    def test_t_test_p_matches_the_interval(self):
        # A mean whose 95% interval just touches zero has p = 0.05.
        s = stats.summary([1.0, 2.0, 3.0])
        shifted = stats.summary([x - s["ci95"][0] + s["mean"] - s["mean"] for x in (1.0, 2.0, 3.0)])
        self.assertAlmostEqual(stats.t_test_p(dict(shifted, mean=s["half_width"])), 0.05, places=9)
        self.assertIsNone(stats.t_test_p(stats.summary([1.0])))
        self.assertEqual(stats.t_test_p(stats.summary([1.0, 1.0])), 0.0)

    def test_gated_verdict_reasons(self):
        self.assertEqual(stats.gated_verdict(0.1, 0.2, +1, 0.01), ("supports", "interval excludes zero after the "
                                                                   "Holm correction"))
        self.assertEqual(stats.gated_verdict(-0.2, -0.1, +1, 0.01)[0], "contradicts")
        self.assertEqual(stats.gated_verdict(0.1, 0.2, +1, 0.2)[0], "inconclusive")
        self.assertEqual(stats.gated_verdict(-0.1, 0.2, +1, 0.01)[1], "95% interval contains zero")
        self.assertEqual(stats.gated_verdict(0.1, 0.2, +1, 0.01, ["runs not flattened (1 of 2)"]),
                         ("inconclusive", "gate failed: runs not flattened (1 of 2)"))
        self.assertEqual(stats.gated_verdict(None, None, +1)[1], "fewer than 2 paired seeds")

    def test_run_gates(self):
        self.assertEqual(stats.run_gates([{"flattened": True, "valid_bpc": 2.3}]), [])
        self.assertEqual(stats.run_gates([{"flattened": None, "valid_bpc": 2.5}, {"flattened": True, "valid_bpc": 2.3}]),
                         ["runs not flattened (1 of 2)", "valid BPC above the 2.4 bound (1 of 2)"])

    def test_slope_and_wilson(self):
        self.assertAlmostEqual(stats.slope([6, 7, 8, 9], [2.0, 2.1, 2.2, 2.3]), 0.1, places=12)
        with self.assertRaises(ValueError):
            stats.slope([1, 1], [2, 3])
        lo, hi = stats.binomial_interval(50, 100)
        self.assertAlmostEqual(lo + hi, 1.0, places=12)
        self.assertAlmostEqual(hi - 0.5, 0.0962, places=3)
        self.assertIsNone(stats.binomial_interval(0, 0))


if __name__ == "__main__":
    unittest.main()
