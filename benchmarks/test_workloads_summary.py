#!/usr/bin/env python3
"""Tests of workloads_summary.py's judgment (the README's "targets held" rest on it): rounds written as
run_workloads.sh writes them (one JSON per workload, allocator and round; a .timeout file for a round past
the time limit), loaded and judged, every verdict against numbers worked out by hand here.
Run by the test command's docs stage (scripts/test); by hand: python3 benchmarks/test_workloads_summary.py
"""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads_summary as ws  # noqa: E402

FAST_NS, SLOW_NS = 90.0, 400.0  # a line round trip in each of the VM's phases


class Rounds:
    """A results directory of synthetic rounds."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="workloads-summary-")

    def add(self, workload, allocator, rnd, ms, peak=10.0, final=1.0, decayed=None, slow=False, co=None,
            malloc=None):
        b = {"name": "%s/x/iterations:1/manual_time" % workload, "real_time": ms, "time_unit": "ms",
             "peak_rss_mib": peak, "final_rss_mib": final, "scale": 1.0,
             "line_round_trip_ns": SLOW_NS if slow else FAST_NS}
        if decayed is not None:
            b["decayed_rss_mib"] = decayed
        if co is not None:
            b["pairs_co_located"] = co
        doc = {"context": {"malloc": malloc or ws.EXPECTED_MALLOC[allocator]}, "benchmarks": [b]}
        with open(os.path.join(self.dir, "%s-%s-%d.json" % (workload, allocator, rnd)), "w") as f:
            json.dump(doc, f)

    def timeout(self, workload, allocator, rnd, limit_s):
        with open(os.path.join(self.dir, "%s-%s-%d.timeout" % (workload, allocator, rnd)), "w") as f:
            f.write("%g\n" % limit_s)

    def judge(self, workload):
        runs, warnings, _, failed = ws.load(self.dir)
        return ws.judge(workload, runs, failed, ws.medians(runs, workload)), warnings

    def close(self):
        shutil.rmtree(self.dir)


def verdicts(j):
    return {name.split(" (")[0]: (ok, detail) for name, ok, detail in j["targets"]}


class Judge(unittest.TestCase):
    def setUp(self):
        self.r = Rounds()

    def tearDown(self):
        self.r.close()

    def test_oversubscribed_glibc_target_holds_in_each_phase_both_ran_in(self):
        w = "producer_consumer_oversubscribed"
        # numaplace 100 ms fast, 400 slow; glibc 150 fast, 300 slow: overall medians 250 against 225
        for rnd, (mine, theirs, slow) in enumerate([(100, 150, False), (400, 300, True), (100, 150, False),
                                                    (400, 300, True)], 1):
            self.r.add(w, "numaplace", rnd, mine, slow=slow, decayed=0.5)
            self.r.add(w, "glibc", rnd, theirs, slow=slow)
        j, _ = self.r.judge(w)
        ok, detail = verdicts(j)["speed >= 0.8x glibc"]
        self.assertAlmostEqual(j["vs_glibc"], 225 / 250)  # 0.9: over all rounds it would hold
        self.assertFalse(ok)  # but the slow phase is 300 / 400 = 0.75
        self.assertEqual(detail, "0.90x (fast 1.50x, 2/2 rounds; slow 0.75x, 2/2 rounds)")

    def test_oversubscribed_with_one_phase_in_common_is_judged_there_whatever_the_mix(self):
        w = "larson"
        self.r.add(w, "numaplace", 1, 100, slow=False, decayed=0.5)
        self.r.add(w, "numaplace", 2, 390, slow=True, decayed=0.5)
        self.r.add(w, "numaplace", 3, 390, slow=True, decayed=0.5)
        self.r.add(w, "glibc", 1, 120, slow=False)
        self.r.add(w, "glibc", 2, 130, slow=False)  # glibc never ran slow: only the fast phase compares
        j, _ = self.r.judge(w)
        ok, detail = verdicts(j)["speed >= 0.8x glibc"]
        self.assertAlmostEqual(j["vs_glibc"], 125 / 390)  # the medians mix the phases: shown, not judged
        self.assertTrue(ok)
        self.assertEqual(detail, "0.32x (fast 1.25x, 1/2 rounds)")

    def test_oversubscribed_with_no_phase_in_common_is_judged_on_its_medians(self):
        w = "producer_consumer_oversubscribed"
        self.r.add(w, "numaplace", 1, 100, slow=True, decayed=0.5)
        self.r.add(w, "glibc", 1, 79, slow=False)
        j, _ = self.r.judge(w)
        ok, detail = verdicts(j)["speed >= 0.8x glibc"]
        self.assertFalse(ok)  # 79 / 100: below 0.8, and no phase names a ratio of its own
        self.assertEqual(detail, "0.79x")

    def test_each_speed_target_holds_at_its_bound_exactly(self):
        w = "map"
        self.r.add(w, "numaplace", 1, 100, decayed=1.0)
        self.r.add(w, "glibc", 1, 80)      # 0.8x glibc
        self.r.add(w, "jemalloc", 1, 50)   # 0.5x the best peer
        self.r.add(w, "memkind", 1, 100)   # 1.0x the best NUMA-aware
        v = verdicts(self.r.judge(w)[0])
        self.assertEqual((v["speed >= 0.8x glibc"][0], v["speed >= 1.0x best NUMA-aware"][0],
                          v["within 2x of best peer"][0]), (True, True, True))
        r = Rounds()
        try:  # and misses just past it
            r.add(w, "numaplace", 1, 100, decayed=1.0)
            r.add(w, "glibc", 1, 79.99)
            r.add(w, "jemalloc", 1, 49.99)
            r.add(w, "memkind", 1, 99.99)
            v = verdicts(r.judge(w)[0])
            self.assertEqual((v["speed >= 0.8x glibc"][0], v["speed >= 1.0x best NUMA-aware"][0],
                              v["within 2x of best peer"][0]), (False, False, False))
        finally:
            r.close()

    def test_a_workload_not_oversubscribed_is_judged_on_its_medians_alone(self):
        w = "map"
        self.r.add(w, "numaplace", 1, 100, slow=True, final=2.0)
        self.r.add(w, "numaplace", 2, 120, slow=False, final=2.0)
        self.r.add(w, "glibc", 1, 90, slow=True)
        self.r.add(w, "glibc", 2, 100, slow=False)
        j, _ = self.r.judge(w)
        ok, detail = verdicts(j)["speed >= 0.8x glibc"]
        self.assertTrue(ok)
        self.assertEqual(detail, "0.86x")  # 95 / 110, no phases named

    def test_best_numa_aware_takes_the_fastest_and_reports_each_round(self):
        w = "work_buffers"
        for rnd, (mine, mk, pool) in enumerate([(100, 110, 200), (100, 90, 300), (50, 60, 70)], 1):
            self.r.add(w, "numaplace", rnd, mine, decayed=1.0)
            self.r.add(w, "glibc", rnd, 200)
            self.r.add(w, "memkind", rnd, mk)
            self.r.add(w, "tbb_pool", rnd, pool)
        j, _ = self.r.judge(w)
        self.assertEqual(j["aware"]["name"], "memkind")  # medians 90 (memkind) and 200 (pool)
        self.assertEqual(j["aware"]["mark"], "")
        self.assertAlmostEqual(j["aware"]["ratio"], 90 / 100)
        self.assertEqual([round(x, 4) for x in j["aware"]["per_round"]], [0.9, 1.1, 1.2])  # 90/100, 110/100, 60/50
        ok, detail = verdicts(j)["speed >= 1.0x best NUMA-aware"]
        self.assertFalse(ok)
        self.assertEqual(detail, "0.90x, per round 0.90 1.10 1.20")

    def test_an_allocator_that_always_timed_out_counts_at_its_limit_as_a_lower_bound(self):
        w = "producer_consumer"
        for rnd in (1, 2):
            self.r.add(w, "numaplace", rnd, 500, decayed=1.0)
            self.r.add(w, "glibc", rnd, 600)
            self.r.timeout(w, "libnuma", rnd, 30)
        j, _ = self.r.judge(w)
        self.assertEqual(j["aware"]["name"], "libnuma")
        self.assertEqual(j["aware"]["mark"], "> ")
        self.assertAlmostEqual(j["aware"]["ratio"], 30 / 0.5)
        ok, detail = verdicts(j)["speed >= 1.0x best NUMA-aware"]
        self.assertTrue(ok)
        self.assertEqual(detail, "> 60.00x")  # no round of libnuma ran: no per-round ratios
        # one that ran beats the bound of one that timed out when it is faster
        for rnd in (1, 2):
            self.r.add(w, "memkind", rnd, 400)
        j, _ = self.r.judge(w)
        self.assertEqual((j["aware"]["name"], j["aware"]["mark"]), ("memkind", ""))

    def test_peak_bound_is_1_6x_glibc_oversubscribed_and_1_3x_otherwise(self):
        for w, bound in (("producer_consumer_oversubscribed", 1.6), ("fragmentation", 1.3)):
            for peak, held in ((bound * 10.0 - 0.01, True), (bound * 10.0 + 0.01, False)):
                r = Rounds()
                try:
                    r.add(w, "numaplace", 1, 100, peak=peak, decayed=1.0)
                    r.add(w, "glibc", 1, 100, peak=10.0)
                    j, _ = r.judge(w)
                    ok, _ = verdicts(j)["peak RSS <= %.1fx glibc" % bound]
                    self.assertEqual(ok, held, (w, peak))
                finally:
                    r.close()

    def test_final_rss_is_judged_after_the_decay_within_8_mib(self):
        w = "vector_growth"
        for decayed, held in ((8.0, True), (8.01, False)):
            r = Rounds()
            try:
                r.add(w, "numaplace", 1, 100, final=50.0, decayed=decayed)  # 50 MiB right after freeing
                r.add(w, "glibc", 1, 100)
                j, _ = r.judge(w)
                ok, detail = verdicts(j)["final RSS <= start + 8 MiB"]
                self.assertEqual(ok, held)
                self.assertEqual(detail, "%.1f MiB" % decayed)
            finally:
                r.close()

    def test_a_preload_that_did_not_take_is_warned_about(self):
        w = "map"
        self.r.add(w, "numaplace", 1, 100)
        self.r.add(w, "glibc", 1, 100)
        self.r.add(w, "mimalloc", 1, 50, malloc="glibc")
        _, warnings = self.r.judge(w)
        self.assertEqual(len(warnings), 1)
        self.assertIn("malloc in the process was glibc, not mimalloc", warnings[0])

    def test_without_numaplace_or_glibc_nothing_is_judged(self):
        self.r.add("map", "numaplace", 1, 100)
        j, _ = self.r.judge("map")
        self.assertIsNone(j)


if __name__ == "__main__":
    unittest.main(verbosity=1)
