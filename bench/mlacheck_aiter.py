#!/usr/bin/env python3
"""aiter's side of mlacheck (bench/check.cpp): times aiter's mla_decode_fwd on a GPU.

  mlacheck_aiter.py --probe            exit 0 when aiter and a ROCm torch import and see a GPU;
                                       else print why and exit 1
  mlacheck_aiter.py --request FILE     time aiter on the request's shape and kv lengths (random
                                       inputs, page-table layout as aiter's tests build it); prints
                                       JSON {"median_us": ..., "runs": ..., ...} or {"not_run": why}

The inputs are random values of the same shape, dtypes and kv lengths as the batch mlacheck timed,
not the same bytes. aiter is never vendored here: it must be installed by the user.
"""
import argparse
import json
import sys


def probe():
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure is the reason
        return f"torch: {type(e).__name__}: {e}"
    try:
        import aiter  # noqa: F401
        from aiter.mla import mla_decode_fwd  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"aiter: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return "torch sees no GPU (torch.cuda.is_available() is False)"
    return ""


def run(req):
    import torch
    from aiter.mla import mla_decode_fwd

    dev = "cuda"
    fp8 = torch.float8_e4m3fn if req["target"] == "gfx950" else torch.float8_e4m3fnuz
    qd = fp8 if req["q_dtype"] == "fp8" else torch.bfloat16
    kvd = fp8 if req["kv_dtype"] == "fp8" else torch.bfloat16
    heads, qs, page = req["heads"], req["qseqlen"], req["page_size"]
    lens = req["kv_lens"]
    batch = len(lens)
    pages = [(n + page - 1) // page for n in lens]
    kv_indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    num_pages = int(kv_indptr[-1])
    kv_indices = torch.randperm(num_pages, device=dev).to(torch.int32)
    last = torch.tensor([n - (p - 1) * page for n, p in zip(lens, pages)], dtype=torch.int32, device=dev)
    qo_indptr = torch.arange(0, (batch + 1) * qs, qs, dtype=torch.int32, device=dev)
    q = torch.randn(batch * qs, heads, 576, device=dev).to(qd)
    kv = torch.randn(num_pages, page, 1, 576, device=dev).to(kvd)
    o = torch.empty(batch * qs, heads, 512, dtype=torch.bfloat16, device=dev)
    one = torch.ones(1, dtype=torch.float32, device=dev)
    kw = {}
    if req["q_dtype"] == "fp8":
        kw["q_scale"] = one
    if req["kv_dtype"] == "fp8":
        kw["kv_scale"] = one

    def call():
        mla_decode_fwd(q, kv, o, qo_indptr, kv_indptr, kv_indices, last, qs, page_size=page,
                       sm_scale=1 / 192 ** 0.5, **kw)

    for _ in range(req["warmup"]):
        call()
    torch.cuda.synchronize()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(req["runs"])]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(req["runs"])]
    for i in range(req["runs"]):
        start[i].record()
        call()
        end[i].record()
    torch.cuda.synchronize()
    us = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(start, end))
    n = len(us)
    med = us[n // 2] if n % 2 else 0.5 * (us[n // 2 - 1] + us[n // 2])
    import aiter
    return {"median_us": med, "min_us": us[0], "runs": n, "warmup": req["warmup"],
            "aiter_version": getattr(aiter, "__version__", "unknown"),
            "timing": "torch.cuda events around each mla_decode_fwd call (random inputs of the same shape and lengths)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--request")
    a = ap.parse_args()
    if a.probe:
        why = probe()
        if why:
            print(why)
            return 1
        return 0
    if not a.request:
        ap.error("--probe or --request FILE")
    why = probe()
    if why:
        print(json.dumps({"not_run": why}))
        return 0
    with open(a.request) as f:
        req = json.load(f)
    try:
        print(json.dumps(run(req)))
    except Exception as e:  # noqa: BLE001 - reported, not raised: the check goes on
        print(json.dumps({"not_run": f"aiter's mla_decode_fwd failed: {type(e).__name__}: {e}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
