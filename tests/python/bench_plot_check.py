"""mlabench's plot (bench/plot.py, matplotlib): run mlabench on one small shape, then check the
PNG it wrote and that every plotted series says modeled, measured or published.

Run by ctest ("python: bench plot") with MLABENCH_EXE and MLA_SOURCE_DIR.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.environ["MLA_SOURCE_DIR"], "bench"))
import plot  # noqa: E402  (bench/plot.py)


class TestBenchPlot(unittest.TestCase):
    def test_mlabench_writes_a_matplotlib_plot_with_labelled_series(self):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([os.environ["MLABENCH_EXE"], "--set", "none", "--shape",
                                "gfx942:bf16/fp8:h16:pg1:4096x2", "--out", d], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("bench.png (matplotlib)", r.stderr)
            with open(os.path.join(d, "bench.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            with open(os.path.join(d, "bench.json")) as f:
                bench = json.load(f)
        plotted = 0
        for panel, label, values in plot.series(bench):
            self.assertRegex(label, r"\((modeled|measured|published)", f"{panel}: '{label}' says neither")
            plotted += any(v is not None for v in values)
        self.assertGreaterEqual(plotted, 3)  # latency, ceiling fraction, bytes of the one shape
        self.assertGreater(plot.series(bench)[0][2][0], 0)

    def test_published_and_cascade_series_come_from_their_fields(self):
        bench = {"machines": [{"name": "MI300X", "hbm_bytes_per_s": 5.3e12}],
                 "shapes": [{"name": "32K x1", "shape": "gfx942 q=bf16 kv=fp8 heads=16",
                             "modeled": {"modeled_total_us": 30.0, "modeled_tbps": 2.65},
                             "published_seed001": {"aiter_us": 184.96, "ours_us": 27.08},
                             "measured": {"bytes": {"read": 3e7, "written": 1e6}}}]}
        s = {label: values for _, label, values in plot.series(bench)}
        self.assertEqual(s["aiter (published, seed 001)"], [184.96])
        self.assertEqual(s["seed 001's kernel (published)"], [27.08])
        self.assertEqual(s["ours, shared-prefix cascade (modeled)"], [None])
        # mlabench --aiter-dir: aiter's code objects on the same model; absent (not run) here.
        self.assertEqual(s["aiter's code objects, same model (modeled; mlabench --aiter-dir)"], [None])
        self.assertAlmostEqual(s["modeled bandwidth / achievable HBM ceiling (modeled; MI300X 5.3 TB/s)"][0], 0.5)


if __name__ == "__main__":
    unittest.main()
