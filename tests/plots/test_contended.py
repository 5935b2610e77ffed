#!/usr/bin/env python3
# test_contended.py: plots/plot_run.py's report.md: points timed on a busy machine listed (the throughput figure draws
# them hollow), and the settings a run used stated beside the scenario's prose (run: python3
# tests/plots/test_contended.py; exit 77 without matplotlib).
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "plots"))
try:
    import matplotlib  # noqa: F401
except ImportError:
    print("SKIP: matplotlib is not installed")
    sys.exit(77)
import plot_run  # noqa: E402

RULE = "busy when the median count of runnable tasks not of this process exceeds the free cores"


def record(length, tps, busy, threads=2):
    r = {"kind": "attention", "status": "ok", "label": "bpt(k=4)", "pattern": "bpt", "mode": "forward",
         "causal": True, "length": length, "batch": 1, "threads": threads, "threads_used": threads,
         "degree": 10.0, "tokens_per_s": tps, "tokens_per_s_min": tps, "tokens_per_s_max": tps,
         "cpu_share": 0.55 if busy else 0.97, "busy_machine": busy,
         "busy_reasons": ["1 other runnable tasks (median of 4 samples) > 0 free cores"] if busy else [],
         "contention": {"runnable_others": 1 if busy else 0, "run_wait_share": 0.31 if busy else 0.0, "rule": RULE}}
    return r


class Contended(unittest.TestCase):
    def test_selects_busy_records_only(self):
        recs = [record(256, 2e6, False), record(512, 1e5, True), {"kind": "attention", "status": "ok"}]
        self.assertEqual([r["length"] for r in plot_run.contended(recs)], [512])

    def test_report_lists_contended_points(self):
        recs = [record(256, 2.0e6, False), record(512, 1.2e5, True), record(1024, 1.1e5, True)]
        with tempfile.TemporaryDirectory() as d:
            plot_run.write_report(d, {"scenario_name": "t"}, recs, [], [], None, [], [])
            with open(os.path.join(d, "report.md")) as f:
                text = f.read()
        self.assertIn("## Contended points", text)
        self.assertIn("2 of 3 timed points ran on a busy machine", text)
        self.assertIn(f"Rule: {RULE}.", text)
        section = text.split("## Contended points")[1]
        rows = [ln for ln in section.splitlines() if ln.startswith("| bpt(k=4)")]
        self.assertEqual(len(rows), 2)
        self.assertIn("| 512 | 2 | 120000 | 0.55 | 1 | 31% | 1 other runnable", rows[0])
        # The throughput table marks them too; the quiet point stays plain.
        self.assertIn("| 120000 (busy) |", text)
        self.assertIn("| 2000000 |", text)

    def test_no_section_when_quiet(self):
        with tempfile.TemporaryDirectory() as d:
            plot_run.write_report(d, {}, [record(256, 2e6, False)], [], [], None, [], [])
            with open(os.path.join(d, "report.md")) as f:
                self.assertNotIn("Contended", f.read())

    def test_report_states_settings_as_run(self):
        # A run made with --set keeps the file's description; the report must say what actually ran.
        run = {"scenario_name": "t", "scenario": {"description": "one head, absolute positions",
                                                  "model": {"heads": 1, "positions": "relative"},
                                                  "train": {"lr": 0.001, "task": "mqar"}}}
        with tempfile.TemporaryDirectory() as d:
            plot_run.write_report(d, run, [], [], [], None, [], [])
            with open(os.path.join(d, "report.md")) as f:
                text = f.read()
        self.assertIn('Settings as run (the scenario with any `--set` applied): `model` {"heads": 1, '
                      '"positions": "relative"}; `train` {"lr": 0.001, "task": "mqar"}.', text)
        with tempfile.TemporaryDirectory() as d:
            plot_run.write_report(d, {"scenario": {"description": "timing only"}}, [], [], [], None, [], [])
            with open(os.path.join(d, "report.md")) as f:
                self.assertNotIn("Settings as run", f.read())

    def test_report_names_each_machine_of_a_resumed_run(self):
        # The table names the first session's machine; points resumed elsewhere must not pass as run on it.
        xeon, epyc = "Intel Xeon (AVX-512)", "AMD EPYC (AVX2)"
        run = {"scenario_name": "t", "cpu": xeon, "simd_target": "AVX3", "commit": "aaa",
               "resumed": [{"time": "T1", "cpu": xeon, "simd_target": "AVX3", "commit": "aaa"},
                           {"time": "T2", "cpu": epyc, "simd_target": "AVX2", "commit": "bbb"}]}
        recs = [dict(record(64, 7e4, False), kind="train", seed=1, cpu=xeon),
                dict(record(64, 5e4, False), kind="train", seed=2, cpu=epyc)]
        with tempfile.TemporaryDirectory() as d:
            plot_run.write_report(d, run, recs, [], [], None, [], [])
            with open(os.path.join(d, "report.md")) as f:
                text = f.read()
        self.assertIn("Resumed on another machine or build: T2 on AMD EPYC (AVX2) (AVX2), commit bbb.", text)
        self.assertNotIn("T1 on", text)
        self.assertIn("The points ran on 2 CPUs; tokens/s compare only among points of one CPU:", text)
        self.assertIn(f"- {epyc}: bpt(k=4) n=64 seed 2", text)
        self.assertIn(f"- {xeon}: bpt(k=4) n=64 seed 1", text)
        # Task runs' table averages tokens/s over seeds: the line says it gives one mean per CPU.
        task = {"name": "mqar", "chance": 0.0625, "params": {}}
        with tempfile.TemporaryDirectory() as d:
            plot_run.write_report(d, run, [dict(r, task=task) for r in recs], [], [], None, [], [])
            with open(os.path.join(d, "report.md")) as f:
                self.assertIn("one CPU (the task table gives one mean per CPU):", f.read())
        # One machine throughout: no such lines.
        with tempfile.TemporaryDirectory() as d:
            plot_run.write_report(d, {"cpu": xeon, "resumed": [{"time": "T1", "cpu": xeon}]}, recs[:1], [], [],
                                  None, [], [])
            with open(os.path.join(d, "report.md")) as f:
                text = f.read()
        self.assertNotIn("Resumed on another", text)
        self.assertNotIn("CPUs;", text)

    def test_figure_draws_busy_points_hollow(self):
        recs = [record(256, 2.0e6, False), record(512, 1.2e5, True), record(1024, 1.9e6, False)]
        drawn = []
        real_save = plot_run.save

        def keep(fig, out_dir, name, written):
            drawn.append(fig)
            written.append(name)

        plot_run.save = keep
        try:
            written = []
            plot_run.plot_throughput(recs, "unused", written)
        finally:
            plot_run.save = real_save
        self.assertEqual(written, ["throughput_vs_length"])
        ax = drawn[0].axes[0]
        hollow = [ln for ln in ax.get_lines() if ln.get_markerfacecolor() == "white"]
        self.assertEqual(len(hollow), 1)
        self.assertEqual(list(hollow[0].get_xdata()), [512])
        self.assertIn("hollow markers: 1 point(s)", " ".join(t.get_text() for t in drawn[0].texts))


if __name__ == "__main__":
    unittest.main()
