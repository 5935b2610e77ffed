#!/usr/bin/env python3
# test_task_groups.py: plots/task_groups.py, accuracy by distance against the reach prediction (python3 ...).
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plots"))
import task_groups  # noqa: E402


def rec(pattern, degree, seed, accs, reach, answers=400, length=512, late_gain=0.01):
    """A task record with one bucket per (distance, accuracy) and the graph's reach fraction for each; its valid
    accuracy gains `late_gain` over the last 20% of its 300 steps."""
    by = [{"lo": d, "hi": d, "answers": answers, "accuracy": a} for d, a in accs]
    rb = [{"lo": d, "hi": d, "fraction_reachable": f, "min_hops": 1 if f else 3, "max_hops": 2 if f else 3}
          for (d, _), f in zip(accs, reach)]
    return {"kind": "train", "status": "ok", "pattern": pattern, "label": pattern, "length": length, "degree": degree,
            "layers": 2, "seed": seed, "config_id": f"{pattern}/n={length}", "tokens_per_s": 1000.0, "steps": 300,
            "evals": [{"kind": "eval", "split": "valid", "step": 150, "accuracy": 0.2},
                      {"kind": "eval", "split": "valid", "step": 240, "accuracy": 0.5 - late_gain},
                      {"kind": "eval", "split": "valid", "step": 300, "accuracy": 0.5}],
            "task": {"name": "recall_distance", "chance": 0.0625, "params": {}}, "test_accuracy": 0.5,
            "accuracy_by_distance": by, "reach": {"layers": 2, "buckets": rb}}


class Prediction(unittest.TestCase):
    def setUp(self):
        self.records = []
        for s, noise in ((1, 0.00), (2, 0.01), (3, -0.01)):
            # window: retrieves at 8, at chance at 64 (beyond its reach), far above chance at 128 (a leak: fails)
            self.records.append(rec("window", 48.0, s, [(8, 0.9 + noise), (64, 0.0625 + noise / 2),
                                                        (128, 0.5 + noise)], [1.0, 0.0, 0.0]))
            self.records.append(rec("bpt", 47.5, s, [(8, 0.8 + noise), (64, 0.7 + noise), (128, 0.6 + noise)],
                                    [1.0, 1.0, 1.0]))

    def test_holds_fails_and_retrieves(self):
        groups = {g["pattern"]: g for g in task_groups.group_tasks(self.records)}
        w = groups["window"]["buckets"]
        self.assertEqual([b["prediction"] for b in w], ["retrieves", "holds", "fails"])
        # Under chance beyond reach is no retrieval either (MQAR: the values it can see are other keys').
        below = [rec("window", 48.0, s, [(8, 0.9), (64, 0.02), (128, 0.06)], [1.0, 0.0, 0.0]) for s in (1, 2, 3)]
        self.assertEqual([b["prediction"] for b in task_groups.group_tasks(below)[0]["buckets"]],
                         ["retrieves", "holds (below chance)", "holds"])
        self.assertEqual(w[1]["answers"], 1200)
        self.assertAlmostEqual(w[1]["accuracy"]["mean"], 0.0625, places=12)
        self.assertEqual([b["prediction"] for b in groups["bpt"]["buckets"]], ["retrieves"] * 3)

    def test_contrasts_beyond_reach_are_one_corrected_family(self):
        cs = task_groups.contrasts(task_groups.group_tasks(self.records))
        self.assertEqual([(c["lo"], c["other_beyond_reach"]) for c in cs], [(8, False), (64, True), (128, True)])
        far = [c for c in cs if c["other_beyond_reach"]]
        self.assertEqual(len({c["family"] for c in far}), 1)
        for c in far:
            self.assertGreaterEqual(c["p_holm"], c["p"])
        self.assertEqual(cs[0]["family"], "recall_distance@512: bpt vs window within its reach")
        self.assertAlmostEqual(cs[1]["mean"], 0.7 - 0.0625, places=12)
        self.assertEqual(cs[1]["verdict"], "supports")
        self.assertEqual(cs[1]["gates_failed"], [])

    def test_verdicts_need_trained_and_flattened_runs(self):
        # bpt seed 2 still learning; the window's seed 3 at chance within its reach
        recs = [dict(r) for r in self.records]
        for i, r in enumerate(recs):
            if r["pattern"] == "bpt" and r["seed"] == 2:
                recs[i] = rec("bpt", 47.5, 2, [(8, 0.81), (64, 0.71), (128, 0.61)], [1.0] * 3, late_gain=0.10)
            if r["pattern"] == "window" and r["seed"] == 3:
                recs[i] = rec("window", 48.0, 3, [(8, 0.07), (64, 0.06), (128, 0.49)], [1.0, 0.0, 0.0])
        groups = {g["pattern"]: g for g in task_groups.group_tasks(recs)}
        self.assertEqual(groups["bpt"]["gates"][1], [])
        self.assertTrue(groups["bpt"]["gates"][2][0].startswith("not flattened (valid accuracy +10.0 points"))
        self.assertTrue(groups["window"]["gates"][3][0].startswith("not trained"))
        far = [c for c in task_groups.contrasts(list(groups.values())) if c["other_beyond_reach"]]
        self.assertEqual(far[0]["gates_failed"], ["not flattened (1 of 6 runs)", "not trained (1 of 6 runs)"])
        self.assertEqual(far[0]["verdict"], "inconclusive")
        self.assertTrue(far[0]["verdict_reason"].startswith("gate failed: not flattened (1 of 6 runs)"))
        self.assertIsNone(task_groups.accuracy_flattened([{"split": "valid", "step": 300, "accuracy": 0.5}], 300))

    def test_trained_looks_at_every_distance_within_reach(self):
        # MQAR: the nearest queries are the hardest (0%), the farther ones within reach retrieve: trained. Beyond
        # reach does not count, and a run with nothing within reach is not trained.
        mqar = rec("dense", 32.5, 1, [(4, 0.0), (16, 0.3), (32, 0.6)], [1.0, 1.0, 1.0], answers=100)
        self.assertEqual(task_groups.run_gates(mqar, 0.0625), [])
        window = rec("window", 8.4, 1, [(4, 0.0), (16, 0.07), (32, 0.9)], [1.0, 1.0, 0.0], answers=100)
        self.assertEqual(task_groups.run_gates(window, 0.0625), ["not trained (at chance within its reach)"])
        blind = rec("window", 8.4, 1, [(16, 0.5)], [0.5], answers=100)
        self.assertEqual(task_groups.run_gates(blind, 0.0625), ["not trained (no answers at a distance within its reach)"])

    def test_mqar_bar_is_one_of_the_sequences_values(self):
        # 8 pairs: 14% within reach is about what naming one of the sequence's 8 values scores (12.5%), not retrieval;
        # records of the generator whose values repeated, or whose answers were inputs after their queries, fail
        # whatever they score.
        def mqar(acc, values="distinct within a sequence", answers="hidden"):
            r = rec("bpt", 8.8, 1, [(16, acc), (32, acc)], [1.0, 1.0], answers=500)
            r["task"] = {"name": "mqar", "chance": 0.0625,
                         "params": {"pairs": 8, "values": values, "answers": answers}}
            return r
        self.assertEqual(task_groups.run_gates(mqar(0.14), 0.0625),
                         ["not trained (within its reach no better than 12.5%, one of the sequence's values)"])
        self.assertEqual(task_groups.run_gates(mqar(0.40), 0.0625), [])
        # Per bucket too: 14% over 500 answers is above chance but not above 12.5% ("one of the values").
        near = mqar(0.40)
        near["accuracy_by_distance"][1]["accuracy"] = 0.14
        (group,) = task_groups.group_tasks([near])
        self.assertEqual([b["prediction"] for b in group["buckets"]], ["retrieves", "one of the values"])
        old = mqar(0.40)
        del old["task"]["params"]["values"]
        self.assertEqual(task_groups.run_gates(old, 0.0625),
                         ["not trained (mqar values repeat within a sequence: scores need no key matching)"])
        revealed = "not trained (mqar answers revealed after their queries: scores need no key matching)"
        self.assertEqual(task_groups.run_gates(mqar(0.40, answers="revealed"), 0.0625), [revealed])
        before_the_field = mqar(0.40)
        del before_the_field["task"]["params"]["answers"]
        self.assertEqual(task_groups.run_gates(before_the_field, 0.0625), [revealed])

    def test_a_lead_without_retrieval_says_so(self):
        # 4 pairs: bpt at 25.5% only names one of the sequence's values (25%); leading a window at chance beyond its
        # reach is no recall, and the verdict's reason says so. At 60% bpt retrieves and the reason is the plain one.
        def four(pattern, degree, seed, far, reach):
            r = rec(pattern, degree, seed, [(8, 0.9), (48, far + seed / 1000)], reach, answers=600)
            r["task"] = {"name": "mqar", "chance": 0.0625,
                         "params": {"pairs": 4, "values": "distinct within a sequence", "answers": "hidden"}}
            return r
        windows = [four("window", 8.4, s, 0.06, [1.0, 0.0]) for s in (1, 2, 3)]
        for bpt_far, level in ((0.255, "one of the values"), (0.60, "retrieves")):
            recs = [four("bpt", 8.8, s, bpt_far, [1.0, 1.0]) for s in (1, 2, 3)] + windows
            (far,) = [c for c in task_groups.contrasts(task_groups.group_tasks(recs)) if c["other_beyond_reach"]]
            self.assertEqual((far["verdict"], far["bpt_level"]), ("supports", level))
            if level == "retrieves":
                self.assertNotIn("not retrieval", far["verdict_reason"])
            else:
                self.assertTrue(far["verdict_reason"].endswith(f'; bpt there is at "{level}", not retrieval'))


class TokensPerCpu(unittest.TestCase):
    def test_seeds_run_on_two_cpus_get_one_mean_each(self):
        xeon, epyc = "Intel Xeon (family 6 model 207, AVX-512)", "AMD EPYC (family 25 model 1, AVX2)"
        records = [dict(rec("bpt", 8.8, s, [(8, 0.6)], [1.0]), cpu=cpu, tokens_per_s=tps)
                   for s, cpu, tps in ((1, xeon, 40000.0), (2, xeon, 38000.0), (3, epyc, 31000.0))]
        g = task_groups.group_tasks(records)[0]
        self.assertEqual(sorted(g["tokens_per_s_by_cpu"]), [epyc, xeon])
        self.assertAlmostEqual(g["tokens_per_s_by_cpu"][xeon]["mean"], 39000.0)
        self.assertEqual(g["tokens_per_s_by_cpu"][epyc]["n"], 1)
        try:
            import plot_run
        except ImportError as e:
            self.skipTest(f"plot_run needs matplotlib: {e}")
        self.assertEqual(plot_run.fmt_tokens(g), "31000 on AMD EPYC (n=1); 39000 on Intel Xeon (n=2)")
        # One CPU (or none named): the plain mean, as before.
        one = task_groups.group_tasks([dict(r, cpu=xeon) for r in records])[0]
        self.assertEqual(plot_run.fmt_tokens(one), "36333")
        unnamed = task_groups.group_tasks([{k: v for k, v in r.items() if k != "cpu"} for r in records])[0]
        self.assertEqual(plot_run.fmt_tokens(unnamed), "36333")


class LearningCurves(unittest.TestCase):
    def test_one_panel_per_group_with_every_seed_chance_and_the_flattening_count(self):
        try:
            import plot_run
        except ImportError as e:
            self.skipTest(f"plot_run needs matplotlib: {e}")
        records = [rec("window", 8.4, s, [(8, 0.3)], [1.0], late_gain=g) for s, g in ((1, 0.0), (2, 0.05), (3, 0.01))]
        for s in (1, 2):
            r = rec("bpt", 8.8, s, [(8, 0.6)], [1.0])
            r["task"] = {"name": "mqar", "chance": 0.0625,
                         "params": {"pairs": 8, "values": "distinct within a sequence", "answers": "hidden"}}
            records.append(r)
        silent = rec("dense", 32.5, 1, [(8, 0.4)], [1.0])
        silent["evals"] = []  # no valid evaluation: no panel
        records.append(silent)
        captured = {}
        save = plot_run.save
        plot_run.save = lambda fig, out_dir, name, written: captured.update({name: fig})
        try:
            plot_run.plot_task_learning_curves(task_groups.group_tasks(records), None, [])
        finally:
            plot_run.save = save
        axes = [ax for ax in captured["task_learning_curves"].axes if ax.get_visible()]
        self.assertEqual([ax.get_title() for ax in axes],
                         ["mqar: bpt, context 512: flattened 2/2", "recall_distance: window, context 512: flattened 2/3"])
        bpt, window = ([line.get_label() for line in ax.get_lines()] for ax in axes)
        self.assertEqual(window, ["seed 1", "seed 2", "seed 3", "chance", "80% of steps"])
        self.assertEqual(bpt, ["seed 1", "seed 2", "chance", "one of the sequence's values", "80% of steps"])
        self.assertEqual(list(axes[0].get_lines()[0].get_ydata()), [0.2, 0.49, 0.5])


if __name__ == "__main__":
    unittest.main()
