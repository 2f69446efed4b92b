"""The Python layer's host cost per decode step and per layer (issues #31 item 8, #42), for mlabench.

    python3 bench/python_host_cost.py --target gfx950 (--catalog DIR | --shapes FILE) [--runs N] [--json FILE]

Needs PYTHONPATH=<repo>/python and MLA_RUNTIME_LIB (libmla_runtime.so). Per shape it times, with the
host arrays an engine holds (vLLM's seq_lens_cpu, ATOM's CpuGpuBuffer.np):
  - update_us: MlaDecodeMetadata.update() = aiter's index arrays -> kv lengths, mla_plan_update and
    mla_plan_upload (on the emulator the upload is a host memcpy into its memory);
    update_c_us: those two C calls alone, made directly with the same lengths;
    update_python_us: what update() adds to them (median of the paired differences);
  - decode_python_us: mla_decode_fwd(..., metadata=meta) on host NumPy arrays, the emulator's path
    (an fp8 q is scanned for bytes that are NaN in the target's flavour; inputs staged by copies);
  - decode_gpu_python_us: the same call on the path a ROCm GPU tensor takes (no host scan, no
    staging: data_ptr()s and the current stream), and decode_gpu_scales_python_us with one-element
    float32 q_scale / kv_scale tensors as vLLM passes them. There is no GPU here: the tensors are
    torch tensors that say they are on cuda:0 (gpu_stand_in()), the metadata runs on a HIP-labelled
    copy of its runtime, and torch.cuda.current_stream is a stub (on a GPU, its own cost comes on
    top). Without torch these two are null.
In the decode timings the C library's decode and copy calls are stubbed by a C function that
returns 0 and reads no argument (libm's fegetround) under the same ctypes signature, so the ctypes
argument conversion is timed but not the C call's own work: that is measured by mlabench
(decode_ops: checks + kernarg packing). Medians over --runs calls after warm-up.
"""
import argparse
import contextlib
import copy
import ctypes
import json
import os
import sys
import time

import numpy as np

from mla_decode import MlaDecodeMetadata, _capi, mla_decode_fwd

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

STUBBED = ("mla_decode", "mla_memcpy_h2d", "mla_memcpy_d2h")


def median_us(fn, runs, warmup=20):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(t))


def paired_us(fn, base, runs, warmup=20):
    """Medians of fn, of base, and of fn - base, timed alternately (the same conditions for both)."""
    for _ in range(warmup):
        fn()
        base()
    a, b = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        base()
        t2 = time.perf_counter()
        a.append((t1 - t0) * 1e6)
        b.append((t2 - t1) * 1e6)
    return float(np.median(a)), float(np.median(b)), float(np.median(np.subtract(a, b)))


@contextlib.contextmanager
def stubbed_c_calls(lib):
    """The C decode and copies replaced by a C function returning 0 with their ctypes signatures."""
    real = {n: getattr(lib, n) for n in STUBBED}
    try:
        libm = ctypes.CDLL("libm.so.6")
        for n, f in real.items():
            stub = libm._FuncPtr(("fegetround", libm))  # one function object per signature
            stub.restype, stub.argtypes = f.restype, f.argtypes
            setattr(lib, n, stub)
    except (OSError, AttributeError):  # no libm by that name: Python no-ops (ctypes conversion untimed)
        for n in real:
            setattr(lib, n, lambda *a: 0)
    try:
        yield
    finally:
        for n, f in real.items():
            setattr(lib, n, f)


@contextlib.contextmanager
def gpu_stand_in(meta):
    """Makes mla_decode_fwd(..., metadata=meta) take the path of ROCm GPU tensors on this GPU-less
    machine; yields to_gpu(array) -> a stand-in tensor. Meanwhile torch.Tensor says it is on cuda:0
    (its device, is_cuda and get_device are patched, in Python: slower than torch's getters, so the
    figures err high; every other attribute is torch's own, as on a GPU tensor), meta points at a copy of its runtime labelled HIP (the C calls are stubbed:
    no device is touched), torch.version.hip is set and torch.cuda.current_stream returns a
    stand-in stream. All restored on exit. Yields None without torch."""
    try:
        import torch
    except ImportError:
        yield None
        return

    cuda0 = torch.device("cuda", 0)

    class Stream:
        cuda_stream = 0

    def to_gpu(a):
        return torch.from_numpy(a.view(np.int16) if a.dtype == np.uint16 else a)

    runtime = copy.copy(meta.runtime)
    runtime.backend, runtime.key = _capi.MLA_BACKEND_HIP, ("hip", 0, meta.runtime.key[2])
    patched = {"device": property(lambda self: cuda0), "is_cuda": property(lambda self: True),
               "get_device": lambda self: 0}
    saved_attrs = {n: torch.Tensor.__dict__.get(n) for n in patched}
    saved = (meta.runtime, meta.device, getattr(torch.version, "hip", None), torch.cuda.current_stream)
    try:
        meta.runtime, meta.device = runtime, "cuda:0"
        torch.version.hip = "stand-in"
        torch.cuda.current_stream = lambda device=None: Stream()
        for n, v in patched.items():
            setattr(torch.Tensor, n, v)
        yield to_gpu
    finally:
        for n, v in saved_attrs.items():
            if v is None:
                delattr(torch.Tensor, n)
            else:
                setattr(torch.Tensor, n, v)
        meta.runtime, meta.device, torch.version.hip, torch.cuda.current_stream = saved


def measure(name, target, heads, q_kind, page, lens, runs, catalog_dir=None):
    batch = len(lens)
    pages = [-(-n // page) for n in lens]
    kv_indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    last = np.array([n - (p - 1) * page for n, p in zip(lens, pages)], np.int32)
    qo_indptr = np.arange(batch + 1, dtype=np.int32)
    meta = MlaDecodeMetadata(batch, 1, heads, q_kind, "fp8", page_size=page, max_total_tokens=0,
                             catalog_dir=catalog_dir)
    lib = _capi.lib()
    lens32 = np.array(lens, np.int32)
    lens_p = lens32.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))

    def c_update():  # what update() calls in C, with the lengths it computes
        lib.mla_plan_update(meta.runtime.ctx, meta._plan, lens_p, batch, 0)
        lib.mla_plan_upload(meta.runtime.ctx, meta._plan, meta._workspace, meta.workspace_bytes, 1.0, 1.0, None)

    update_us, update_c_us, update_python_us = paired_us(lambda: meta.update(qo_indptr, kv_indptr, last), c_update,
                                                         runs)
    meta.update(qo_indptr, kv_indptr, last)
    info = meta.plan_info()
    # Small stand-ins for q and the cache: with metadata, nothing reads them on the host but the
    # emulator path's NaN-byte scan of an fp8 q (q has its real size).
    q = np.zeros((batch, heads, 576), np.uint8 if q_kind == "fp8" else np.uint16)
    kv = np.zeros((8, page, 1, 576), np.uint8)
    o = np.zeros((batch, heads, 512), np.uint16)
    kv_indices = np.zeros(int(kv_indptr[-1]), np.int32)
    with stubbed_c_calls(lib):
        decode_us = median_us(lambda: mla_decode_fwd(q, kv, o, qo_indptr, kv_indptr, kv_indices, last, 1,
                                                     page_size=page, sm_scale=0.0721, metadata=meta), runs)
        decode_gpu_us = decode_gpu_scales_us = None
        with gpu_stand_in(meta) as to_gpu:
            if to_gpu is not None:
                g = [to_gpu(a) for a in (q, kv, o, qo_indptr, kv_indptr, kv_indices, last)]
                one = to_gpu(np.ones(1, np.float32))
                decode_gpu_us = median_us(lambda: mla_decode_fwd(*g, 1, page_size=page, sm_scale=0.0721,
                                                                 metadata=meta), runs)
                decode_gpu_scales_us = median_us(lambda: mla_decode_fwd(*g, 1, page_size=page, sm_scale=0.0721,
                                                                        q_scale=one, kv_scale=one, metadata=meta),
                                                 runs)
    meta.close()
    return {"name": name, "target": target, "batch": batch, "update_us": update_us, "update_c_us": update_c_us,
            "update_python_us": update_python_us, "decode_python_us": decode_us,
            "decode_gpu_python_us": decode_gpu_us, "decode_gpu_scales_python_us": decode_gpu_scales_us,
            "upload_bytes": info["upload_bytes"], "launches_per_layer": info["num_launches"]}


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
