"""The Python layer's host cost per decode step and per layer (issue #31 item 8), for mlabench.

    python3 bench/python_host_cost.py --target gfx950 (--catalog DIR | --shapes FILE) [--runs N] [--json FILE]

Needs PYTHONPATH=<repo>/python and MLA_RUNTIME_LIB (libmla_runtime.so). Per shape it times, with the
host arrays an engine holds (vLLM's seq_lens_cpu, ATOM's CpuGpuBuffer.np):
  - update_us: MlaDecodeMetadata.update() = aiter's index arrays -> kv lengths, mla_plan_update and
    mla_plan_upload (on the emulator the upload is a host memcpy into its memory);
  - decode_python_us: mla_decode_fwd(..., metadata=meta) with the C library's decode and copy calls
    replaced by no-ops: the Python layer's own argument checks and ctypes packing per layer. The C
    call's own host cost is measured by mlabench (decode_ops: checks + kernarg packing).
Medians over --runs calls after warm-up. The emulator is the device (this machine has no GPU), so
the tensors are NumPy arrays; on a GPU the same code passes data_ptr()s instead of staging.
"""
import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np

import mla_decode
from mla_decode import MlaDecodeMetadata, mla_decode_fwd

SHAPES = {
    # name: (target, heads, q dtype, page size, kv lengths)
    "K3 c16 pg1": ("gfx950", 12, "fp8", 1, [68430 + b % 5 for b in range(16)]),
    "K3 c16 pg128": ("gfx950", 12, "fp8", 128, [68430 + b % 5 for b in range(16)]),
    "K3 c24 pg1": ("gfx950", 12, "fp8", 1, [68430 + b % 5 for b in range(24)]),
    "K3 c24 pg128": ("gfx950", 12, "fp8", 128, [68430 + b % 5 for b in range(24)]),
    "seed001 32K x1": ("gfx942", 16, "bf16", 1, [32768]),
    "seed001 32K x16": ("gfx942", 16, "bf16", 1, [32768] * 16),
    "seed001 8K x64": ("gfx942", 16, "bf16", 1, [8192] * 64),
    "seed001 8K x256": ("gfx942", 16, "bf16", 1, [8192] * 256),
}


def median_us(fn, runs, warmup=5):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(t))


def measure(name, target, heads, q_kind, page, lens, runs, catalog_dir=None):
    batch = len(lens)
    pages = [-(-n // page) for n in lens]
    kv_indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    last = np.array([n - (p - 1) * page for n, p in zip(lens, pages)], np.int32)
    qo_indptr = np.arange(batch + 1, dtype=np.int32)
    meta = MlaDecodeMetadata(batch, 1, heads, q_kind, "fp8", page_size=page, max_total_tokens=0,
                             catalog_dir=catalog_dir)
    update_us = median_us(lambda: meta.update(qo_indptr, kv_indptr, last), runs)
    info = meta.plan_info()
    # Small stand-ins for q and the cache: with metadata, nothing reads them on the host.
    q = np.zeros((batch, heads, 576), np.uint8 if q_kind == "fp8" else np.uint16)
    kv = np.zeros((8, page, 1, 576), np.uint8)
    o = np.zeros((batch, heads, 512), np.uint16)
    kv_indices = np.zeros(int(kv_indptr[-1]), np.int32)
    lib = mla_decode._capi.lib()
    real = {n: getattr(lib, n) for n in ("mla_decode", "mla_memcpy_h2d", "mla_memcpy_d2h")}
    for n in real:
        setattr(lib, n, lambda *a: 0)
    try:
        decode_us = median_us(lambda: mla_decode_fwd(q, kv, o, qo_indptr, kv_indptr, kv_indices, last, 1,
                                                     page_size=page, sm_scale=0.0721, metadata=meta), runs)
    finally:
        for n, f in real.items():
            setattr(lib, n, f)
    meta.close()
    return {"name": name, "target": target, "batch": batch, "update_us": update_us,
            "decode_python_us": decode_us, "upload_bytes": info["upload_bytes"],
            "launches_per_layer": info["num_launches"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, choices=["gfx942", "gfx950"])
    ap.add_argument("--catalog", help="one catalog for the built-in shapes")
    ap.add_argument("--shapes", help="JSON list of {name, target, heads, q_dtype, page_size, kv_lens, catalog} "
                                     "(mlabench writes it; kv dtype fp8)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--json")
    args = ap.parse_args()
    if bool(args.catalog) == bool(args.shapes):
        ap.error("give --catalog (the built-in shapes) or --shapes")
    os.environ["MLA_EMULATOR_TARGET"] = args.target  # read when the first runtime opens
    if args.shapes:
        with open(args.shapes) as f:
            shapes = [(d["name"], d["target"], d["heads"], d["q_dtype"], d["page_size"], d["kv_lens"], d["catalog"])
                      for d in json.load(f)]
    else:
        shapes = [(n, *v, args.catalog) for n, v in SHAPES.items()]
    out = [measure(n, t, h, q, p, lens, args.runs, cat) for n, t, h, q, p, lens, cat in shapes if t == args.target]
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
