#!/usr/bin/env python3
"""Runs mlacheck and checks its report against what it must hold (tests/mlacheck/CMakeLists.txt).

  check_report.py --mlacheck EXE --out DIR --backend emulator|hip [--expect-kernels N] -- ARGS...

Checks made here, not by mlacheck: report.json and report.md exist; the device and ROCm entries;
every kernel passed, every problem has an empty request whose rows were checked, a cascade problem
ran the prefix kernel; the sha256 of every code object, computed here with hashlib, is the one in
the report; the times say they are not hardware; the model's time is a positive number; aiter's
absence is explained; on the HIP backend the device's output equals the emulator's (0 elements differ).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys


def fail(msg):
    print(f"check_report: FAIL: {msg}")
    sys.exit(1)


def tamper(a, args):
    import shutil
    cat = os.path.join(a.out, "catalog")
    shutil.rmtree(cat, ignore_errors=True)
    shutil.copytree(a.tamper_catalog, cat)
    changed = []
    for gfx in os.listdir(os.path.join(cat, "hsa")):
        cj = os.path.join(cat, "hsa", gfx, "mla", "catalog.json")
        j = json.load(open(cj))
        for k in j["kernels"]:
            if k["name"].startswith("mla_decode_"):
                k["co_sha256"] = "0" * 64
                changed.append(k["name"])
        json.dump(j, open(cj, "w"))
    cmd = [a.mlacheck, "--backend", a.backend, "--out", a.out, "--catalog", cat] + args
    print("check_report: running", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 1:
        fail(f"mlacheck on a catalog whose recorded sha256 is wrong exited {r.returncode}, expected 1: {r.stderr[-2000:]}")
    rep = json.load(open(os.path.join(a.out, "report.json")))
    k = rep["kernels"][0]
    f = [f for f in k["files"] if f["name"] == k["name"]][0]
    if k["pass"] or f["matches_catalog"] or f["catalog_sha256"] != "0" * 64:
        fail(f"the tampered sha256 was not reported: {f}, pass {k['pass']}")
    if rep["summary"]["failed"] != 1:
        fail(f"summary {rep['summary']}")
    print(f"check_report: the wrong recorded sha256 of {k['name']} fails the check, as it must")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlacheck", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", required=True, choices=["emulator", "hip"])
    ap.add_argument("--expect-kernels", type=int, default=1)
    ap.add_argument("--tamper-catalog", help="copy this catalog, change the decode kernel's recorded sha256, and "
                    "check that mlacheck fails naming the mismatch")
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [x for x in a.rest if x != "--"]
    if a.tamper_catalog:
        return tamper(a, args)
    for name in ("report.json", "report.md"):  # stale files from an earlier run must not pass
        p = os.path.join(a.out, name)
        if os.path.exists(p):
            os.remove(p)
    cmd = [a.mlacheck, "--backend", a.backend, "--out", a.out] + args
    print("check_report: running", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(r.stdout[-4000:])
    sys.stdout.write(r.stderr[-4000:])
    if r.returncode != 0:
        fail(f"mlacheck exited {r.returncode}")
    for name in ("report.json", "report.md"):
        if not os.path.isfile(os.path.join(a.out, name)):
            fail(f"{name} was not written to {a.out}")
    rep = json.load(open(os.path.join(a.out, "report.json")))
    md = open(os.path.join(a.out, "report.md")).read()

    dev = rep["device"]
    if dev["backend"] != a.backend:
        fail(f"device.backend {dev['backend']!r}, expected {a.backend!r}")
    if dev["target"] not in ("gfx942", "gfx950") or dev["num_cus"] <= 0 or not dev["name"]:
        fail(f"device entry incomplete: {dev}")
    if dev["hardware"]:
        fail("device.hardware is true on a machine without a GPU")
    if "rocm_version" not in rep["rocm"]:
        fail(f"no rocm_version in {rep['rocm']}")
    if a.backend == "hip" and "libamdhip64" not in rep["rocm"]:
        fail(f"the HIP runtime in the process is not named: {rep['rocm']}")
    if "not hardware" not in rep["timing_kind"]:
        fail(f"times not labelled as not hardware: {rep['timing_kind']!r}")
    if rep["aiter"]["available"] or not rep["aiter"]["reason"].startswith("not run"):
        fail(f"aiter entry: {rep['aiter']}")
    ks = rep["kernels"]
    if len(ks) != a.expect_kernels or rep["summary"]["passed"] != a.expect_kernels or rep["summary"]["failed"] != 0:
        fail(f"{len(ks)} kernels, summary {rep['summary']}; expected {a.expect_kernels} passing")
    for k in ks:
        if k["name"] not in md:
            fail(f"{k['name']} missing from report.md")
        if not k["pass"] or "error" in k:
            fail(f"{k['name']}: {k.get('error', 'did not pass')}")
        kinds = set()
        for f in k["files"]:
            sha = hashlib.sha256(open(f["co"], "rb").read()).hexdigest()
            if f["sha256"] != sha:
                fail(f"{f['name']}: report sha256 {f['sha256']}, file {sha}")
            if f["sha256"] not in md:
                fail(f"{f['name']}'s sha256 missing from report.md")
            kinds.add(f["name"].split("_")[1])
        if not {"decode", "reduce"} <= kinds:
            fail(f"{k['name']}: files {kinds}: the decode and reduce kernels must be listed")
        empty_rows = 0
        cascaded = False
        for p in k["problems"]:
            ref = p["reference"]
            if not p["pass"] or not ref["pass"]:
                fail(f"{k['name']} {p['label']}: {ref['summary']}")
            if not (0 <= ref["d"] <= ref["tolerance"]["d"]):
                fail(f"{k['name']} {p['label']}: d {ref['d']} outside [0, {ref['tolerance']['d']}]")
            if ref["unwritten"] or ref["nonfinite"] or ref["empty_request_values_not_zero_or_minus_inf"]:
                fail(f"{k['name']} {p['label']}: {ref}")
            empty_rows += ref["empty_request_rows"]
            cascaded = cascaded or p.get("cascaded", False)
            if a.backend == "hip":
                ve = p["vs_emulator"]
                if not isinstance(ve, dict) or ve["o_elements"] == 0 or ve["o_elements_differing"] != 0:
                    fail(f"{k['name']} {p['label']}: HIP test device against the emulator: {ve}")
        if empty_rows == 0:
            fail(f"{k['name']}: no empty request was checked")
        if "prefix" in " ".join(f["name"] for f in k["files"]) and not cascaded:
            fail(f"{k['name']}: has a prefix kernel but no problem cascaded")
        t = k["timing"]
        if not (t["median_us"] > 0 and t["runs"] >= 1 and "not hardware" in t["kind"]):
            fail(f"{k['name']}: timing {t}")
        m = k["model"]
        if not (m.get("modeled_us", 0) > 0 and m.get("bound")):
            fail(f"{k['name']}: model {m}")
        if "not_run" not in k["aiter"]:
            fail(f"{k['name']}: aiter {k['aiter']}")
    print(f"check_report: {len(ks)} kernel(s) pass, report.json and report.md complete")


if __name__ == "__main__":
    main()
