"""python/mla_decode against mlarun (the C++ path, bit for bit) and a float64 NumPy reference.

Run by ctest ("python: mla_decode") with PYTHONPATH=<repo>/python, MLA_RUNTIME_LIB, MLA_CATALOG_DIR
(tests/python/catalog.json, built at test time), MLARUN_EXE and MLA_EMULATOR_TARGET=gfx950.
"""
import json
import math
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch  # python3-torch (scripts/setup.sh); required: the torch paths are tested

import mla_decode
from mla_decode import MlaDecodeMetadata, mla_decode_fwd

TARGET = os.environ.get("MLA_EMULATOR_TARGET", "gfx950")
SCALE = 1.0 / math.sqrt(192.0)


# ---- numbers ------------------------------------------------------------------------------------

def fp8_table(target):
    """float64 value of every e4m3 byte: OCP e4m3fn (bias 7) on gfx950, FNUZ (bias 8) on gfx942."""
    bias = 8 if target == "gfx942" else 7
    out = np.empty(256)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 0xF, b & 7
        out[b] = sign * (2.0 ** (e - bias) * (1 + m / 8) if e else 2.0 ** (1 - bias) * m / 8)
    if target == "gfx942":
        out[0x80] = np.nan
    else:
        out[0x7F] = out[0xFF] = np.nan
    return out


def to_f64(bits):
    if bits.dtype == np.uint8:
        return fp8_table(TARGET)[bits]
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def random_bits(rng, kind, shape):
    if kind == "fp8":  # small finite e4m3 values of either sign (never a NaN code)
        return ((1 + rng.integers(0, 0x37, shape)) | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)
    x = (rng.standard_normal(shape) * 0.5).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def reference(q, kv, qo_indptr, kv_indptr, kv_indices, last, qseqlen, page_size, scale):
    """softmax(q k^T * scale) v in float64; row r of a request with kv_len L sees tokens < L - qseqlen + r + 1."""
    qf, kvf = to_f64(q), to_f64(kv.reshape(kv.shape[0], page_size, 576))
    rows, heads = q.shape[0], q.shape[1]
    o = np.zeros((rows, heads, 512))
    lse = np.zeros((rows, heads))
    for b in range(len(qo_indptr) - 1):
        pages = kv_indices[kv_indptr[b]:kv_indptr[b + 1]]
        L = (len(pages) - 1) * page_size + last[b] if len(pages) else 0
        keys = kvf[pages].reshape(-1, 576)[:L]
        for r in range(qseqlen):
            row = qo_indptr[b] + r
            if L == 0:  # a request with no KV: o = 0, lse = -inf
                lse[row] = -np.inf
                continue
            visible = keys[:L - qseqlen + r + 1]
            s = qf[row] @ visible.T * scale  # [heads, tokens]
            mx = s.max(axis=1, keepdims=True)
            p = np.exp(s - mx)
            o[row] = (p / p.sum(axis=1, keepdims=True)) @ visible[:, :512]
            lse[row] = (mx + np.log(p.sum(axis=1, keepdims=True)))[:, 0]
    return o, lse


def make_problem(rng, q_kind, kv_kind, heads, kv_lens, qseqlen=1, page_size=1, spare_pages=7):
    """aiter's tensors as NumPy arrays: pages of each request scattered over a larger cache."""
    batch = len(kv_lens)
    pages_per = [-(-L // page_size) for L in kv_lens]
    num_pages = sum(pages_per) + spare_pages
    kv_indices = rng.permutation(num_pages)[:sum(pages_per)].astype(np.int32)
    return dict(
        q=random_bits(rng, q_kind, (batch * qseqlen, heads, 576)),
        kv_buffer=random_bits(rng, kv_kind, (num_pages, page_size, 1, 576)),
        o=np.full((batch * qseqlen, heads, 512), 0xFFFF, np.uint16),
        qo_indptr=(np.arange(batch + 1) * qseqlen).astype(np.int32),
        kv_indptr=np.concatenate([[0], np.cumsum(pages_per)]).astype(np.int32),
        kv_indices=kv_indices,
        kv_last_page_lens=np.array([L - (p - 1) * page_size for L, p in zip(kv_lens, pages_per)], np.int32),
        max_seqlen_q=qseqlen, page_size=page_size)


def bf16_to_f64(o_bits):
    return (np.asarray(o_bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def run(p, **kw):
    args = dict(p)
    if isinstance(p["o"], np.ndarray) and p["o"].flags.c_contiguous:
        args["o"] = p["o"].copy()  # the problem stays reusable
    o, lse = mla_decode_fwd(args.pop("q"), args.pop("kv_buffer"), args.pop("o"), args.pop("qo_indptr"),
                            args.pop("kv_indptr"), args.pop("kv_indices"), args.pop("kv_last_page_lens"),
                            args.pop("max_seqlen_q"), **args, **kw)
    return o, lse


class Case(unittest.TestCase):
    def assertClose(self, o_bits, p, fp8, lse=None, scale=SCALE):
        ref_o, ref_lse = reference(p["q"], p["kv_buffer"], p["qo_indptr"], p["kv_indptr"], p["kv_indices"],
                                   p["kv_last_page_lens"], p["max_seqlen_q"], p["page_size"], scale)
        got = bf16_to_f64(o_bits)
        self.assertFalse(np.any(np.asarray(o_bits) == 0xFFFF), "o has unwritten (0xFFFF) entries")
        d = 1 - 2 * np.sum(got * ref_o) / np.sum(got ** 2 + ref_o ** 2)
        err = np.max(np.abs(got - ref_o)) / np.max(np.abs(ref_o))
        self.assertLess(d, 1e-3 if fp8 else 1e-4, f"d = {d}")
        self.assertLess(err, 0.06 if fp8 else 0.02, f"max error {err} of max|ref|")
        if lse is not None:
            lse = np.asarray(lse, np.float64)
            np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))  # the empty requests' rows
            finite = np.isfinite(ref_lse)
            if finite.any():
                self.assertLess(np.max(np.abs(lse[finite] - ref_lse[finite])), 0.1 if fp8 else 1e-3)


# ---- against mlarun: the same problem through the C++ path, bit for bit ------------------------

class TestAgainstMlarun(Case):
    def check(self, dtype, heads, qseqlen, page_size, kv_lens, lse):
        mlarun = os.environ["MLARUN_EXE"]
        with tempfile.TemporaryDirectory() as d:
            cmd = [mlarun, "make-problem", d, "--target", TARGET, "--heads", str(heads), "--dtype", dtype,
                   "--qseqlen", str(qseqlen), "--page-size", str(page_size), "--kv-lens", kv_lens, "--seed", "7"]
            subprocess.run(cmd + (["--lse"] if lse else []), check=True, capture_output=True)
            subprocess.run([mlarun, "--catalog", os.environ["MLA_CATALOG_DIR"], "--problem", d], check=True,
                           capture_output=True)
            with open(os.path.join(d, "problem.json")) as f:
                meta = json.load(f)
            t = {n: np.load(os.path.join(d, n + ".npy")) for n in
                 ("q", "kv", "qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_lens", "o")}
            kv = t["kv"].reshape(t["kv"].shape[0], page_size, 1, 576)  # aiter's [pages, page_size, 1, 576]
            o = np.zeros_like(t["o"])
            o, got_lse = mla_decode_fwd(t["q"], kv, o, t["qo_indptr"], t["kv_indptr"], t["kv_indices"],
                                        t["kv_last_page_lens"], qseqlen, page_size=page_size,
                                        sm_scale=meta["sm_scale"], q_scale=meta["q_scale"],
                                        kv_scale=meta["kv_scale"], return_lse=lse)
            np.testing.assert_array_equal(o, t["o"])
            if lse:
                np.testing.assert_array_equal(got_lse, np.load(os.path.join(d, "lse.npy")))
            else:
                self.assertIsNone(got_lse)

    def test_fp8_page1(self):
        self.check("fp8/fp8", 16, 1, 1, "300,17,90", lse=False)

    def test_fp8_page1_lse(self):
        self.check("fp8/fp8", 16, 1, 1, "129,40", lse=True)

    def test_bf16_qseqlen2_page16(self):
        self.check("bf16/bf16", 16, 2, 16, "70,16,33", lse=True)


# ---- against the float64 reference; NumPy and torch tensors -------------------------------------

class TestReference(Case):
    def test_numpy_fp8_lse(self):
        p = make_problem(np.random.default_rng(1), "fp8", "fp8", 16, [200, 5, 77])
        o, lse = run(p, sm_scale=SCALE, return_lse=True)
        self.assertEqual(lse.dtype, np.float32)
        self.assertEqual(lse.shape, (3, 16))
        self.assertClose(o, p, True, lse)

    def test_default_sm_scale_is_aiters(self):
        # aiter: sm_scale = 1/sqrt(qk_head_dim) with qk_head_dim = kv_buffer.shape[-1] = 576.
        p = make_problem(np.random.default_rng(2), "fp8", "fp8", 16, [50])
        o, _ = run(p)
        self.assertClose(o, p, True, scale=1 / math.sqrt(576))

    def test_torch_bf16_causal_paged(self):
        p = make_problem(np.random.default_rng(3), "bf16", "bf16", 16, [40, 2, 33], qseqlen=2, page_size=16)
        t = {k: torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if k in ("q", "kv_buffer", "o")
             else (torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in p.items()}
        o, lse = mla_decode_fwd(t["q"], t["kv_buffer"], t["o"], t["qo_indptr"], t["kv_indptr"], t["kv_indices"],
                                t["kv_last_page_lens"], 2, page_size=16, sm_scale=SCALE, return_lse=True)
        self.assertIs(o, t["o"])
        self.assertIsInstance(lse, torch.Tensor)
        self.assertEqual((lse.dtype, tuple(lse.shape)), (torch.float32, (6, 16)))
        o_bits = o.view(torch.int16).numpy().view(np.uint16)
        self.assertClose(o_bits, p, False, lse.numpy())
        # The same bits as raw int16 tensors and as NumPy arrays give the same bits.
        o16 = torch.from_numpy(p["o"].view(np.int16).copy())
        mla_decode_fwd(torch.from_numpy(p["q"].view(np.int16)), torch.from_numpy(p["kv_buffer"].view(np.int16)),
                       o16, t["qo_indptr"], t["kv_indptr"], t["kv_indices"], t["kv_last_page_lens"], 2,
                       page_size=16, sm_scale=SCALE, return_lse=True)
        np.testing.assert_array_equal(o16.numpy().view(np.uint16), o_bits)
        o_np, _ = run(p, sm_scale=SCALE, return_lse=True)
        np.testing.assert_array_equal(o_np, o_bits)

    def test_torch_fp8(self):
        p = make_problem(np.random.default_rng(4), "fp8", "fp8", 16, [64, 100])
        fp8 = getattr(torch, "float8_e4m3fn", None) if TARGET == "gfx950" else getattr(torch, "float8_e4m3fnuz", None)
        q, kv = torch.from_numpy(p["q"].copy()), torch.from_numpy(p["kv_buffer"].copy())
        if fp8 is not None:  # torch >= 2.1; Debian's 1.13 has no fp8 dtype: uint8 bits then
            q, kv = q.view(fp8), kv.view(fp8)
        o = torch.zeros(p["o"].shape, dtype=torch.bfloat16)
        mla_decode_fwd(q, kv, o, *(torch.from_numpy(p[k]) for k in
                                   ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_lens")),
                       1, sm_scale=SCALE, q_scale=torch.tensor([1.0]), kv_scale=torch.tensor([1.0]))
        o_bits = o.view(torch.int16).numpy().view(np.uint16)
        self.assertClose(o_bits, p, True)
        o_np, _ = run(p, sm_scale=SCALE)
        np.testing.assert_array_equal(o_np, o_bits)

    def test_fp8_scales(self):
        # q_scale * kv_scale multiplies the scores (0.5 * 2 = 1: unchanged), kv_scale the output.
        p = make_problem(np.random.default_rng(5), "fp8", "fp8", 16, [90])
        o, _ = run(p, sm_scale=SCALE, q_scale=0.5, kv_scale=np.array([2.0], np.float32))
        o_scaled = bf16_to_f64(o)
        o_plain = bf16_to_f64(run(p, sm_scale=SCALE)[0])
        np.testing.assert_allclose(o_scaled, 2.0 * o_plain, rtol=0.02, atol=1e-3)
        # A scale tensor is read by the kernels at every call (never on the host): any change is
        # seen, also one that does not bump the version counter (.data.copy_(), a kernel's write),
        # and a new tensor at a freed one's address (issue #31: d = 0.73 with a cached host value).
        kv_scale = torch.tensor([2.0])
        o_t = run(p, sm_scale=SCALE, q_scale=0.5, kv_scale=kv_scale)[0]
        np.testing.assert_array_equal(o_t, o)
        plain = run(p, sm_scale=SCALE)[0]
        kv_scale.fill_(1.0)
        np.testing.assert_array_equal(run(p, sm_scale=SCALE, q_scale=1.0, kv_scale=kv_scale)[0], plain)
        kv_scale.data.copy_(torch.tensor([2.0]))  # no version bump
        np.testing.assert_array_equal(run(p, sm_scale=SCALE, q_scale=0.5, kv_scale=kv_scale)[0], o)
        for value, expected in ((0.5, None), (1.0, plain)):
            t = torch.tensor([value])  # likely at the address the previous one freed
            got = run(p, sm_scale=SCALE, q_scale=torch.tensor([1.0]), kv_scale=t)[0]
            if expected is not None:
                np.testing.assert_array_equal(got, expected)
            del t
        with self.assertRaisesRegex(TypeError, r"kv_scale: dtype torch.float64 is not allowed"):
            run(p, sm_scale=SCALE, kv_scale=torch.tensor([1.0], dtype=torch.float64))
        with self.assertRaisesRegex(ValueError, r"q_scale: expected a number or a one-element tensor"):
            run(p, sm_scale=SCALE, q_scale=torch.tensor([1.0, 2.0]))


# ---- the metadata object: made once, updated per step ------------------------------------------

class TestMetadata(Case):
    def test_update_per_step_equals_plain_call(self):
        meta = MlaDecodeMetadata(max_batch=4, max_seqlen_q=1, num_heads=16, q_dtype="fp8", kv_dtype="fp8",
                                 max_total_tokens=4096)
        self.assertEqual(meta.decode_kernel, "mla_decode_fp8fp8_h16_qs1_pg1")
        self.assertGreater(meta.workspace_bytes, 0)
        for step, lens in enumerate([[30, 60], [31, 61, 9]]):
            p = make_problem(np.random.default_rng(10 + step), "fp8", "fp8", 16, lens)
            meta.update(p["qo_indptr"], p["kv_indptr"], p["kv_last_page_lens"])
            self.assertEqual(meta.plan_info()["batch"], len(lens))
            o_meta, _ = run(p, sm_scale=SCALE, metadata=meta)
            o_plain, _ = run(p, sm_scale=SCALE)
            np.testing.assert_array_equal(o_meta, o_plain)
        # A repeated step allocates nothing (the emulator's staging buffers are reused too).
        lib = mla_decode._capi.lib()
        mallocs = []
        real_malloc = lib.mla_malloc
        lib.mla_malloc = lambda *a: mallocs.append(a) or real_malloc(*a)
        try:
            o_again, _ = run(p, sm_scale=SCALE, metadata=meta)
        finally:
            lib.mla_malloc = real_malloc
        self.assertEqual(mallocs, [])
        np.testing.assert_array_equal(o_again, o_meta)
        with self.assertRaisesRegex(TypeError, r"q_dtype: 'fp16' is not an MLA dtype"):
            MlaDecodeMetadata(4, 1, 16, "fp16", "fp8")
        # A batch the metadata was not updated for is refused before anything runs.
        p = make_problem(np.random.default_rng(12), "fp8", "fp8", 16, [10])
        with self.assertRaisesRegex(ValueError, r"last updated for 3 requests"):
            run(p, sm_scale=SCALE, metadata=meta)
        with self.assertRaisesRegex(ValueError, r"metadata: made for"):
            run(p, sm_scale=SCALE, metadata=meta, return_lse=True)
        with self.assertRaisesRegex(ValueError, r"MLA_ERROR_CAPACITY"):
            q = make_problem(np.random.default_rng(13), "fp8", "fp8", 16, [10] * 5)
            meta.update(q["qo_indptr"], q["kv_indptr"], q["kv_last_page_lens"])
        meta.close()

    def test_shared_prefix_groups(self):
        # Three requests whose first 2 pages (32 tokens) are the same page ids.
        p = make_problem(np.random.default_rng(20), "bf16", "bf16", 16, [70, 50, 40], qseqlen=2, page_size=16)
        ind, ptr = p["kv_indices"], p["kv_indptr"]
        for b in (1, 2):
            ind[ptr[b]:ptr[b] + 2] = ind[0:2]
        meta = MlaDecodeMetadata(3, 2, 16, "bf16", "bf16", page_size=16, return_lse=True, max_total_tokens=1024)
        for kw in (dict(prefix_groups=[(0, 3, 32)]), dict(kv_indices=ind, detect_shared_prefixes=True)):
            meta.update(p["qo_indptr"], p["kv_indptr"], p["kv_last_page_lens"], **kw)
            groups = json.loads(meta.describe_json())["prefix_groups"]
            self.assertEqual(len(groups), 1, groups)
            o, lse = run(p, sm_scale=SCALE, return_lse=True, metadata=meta)
            self.assertClose(o, p, False, lse)
        o, lse = run(p, sm_scale=SCALE, return_lse=True, prefix_groups=[(0, 3, 32)])
        self.assertClose(o, p, False, lse)
        with self.assertRaisesRegex(ValueError, r"MLA_ERROR_INVALID_ARGUMENT"):
            meta.update(p["qo_indptr"], p["kv_indptr"], p["kv_last_page_lens"], prefix_groups=[(0, 4, 32)])


# ---- requests with no KV, and empty batches (issue #31 item 5) ---------------------------------

class TestEmptyRequests(Case):
    def test_empty_requests_get_zero_and_minus_inf(self):
        # ATOM pads a graph batch with 0-page requests; a context-parallel rank may hold no token
        # of a request and relies on lse = -inf there.
        p = make_problem(np.random.default_rng(40), "fp8", "fp8", 16, [0, 120, 0, 33], spare_pages=5)
        o, lse = run(p, sm_scale=SCALE, return_lse=True)
        self.assertClose(o, p, True, lse)
        for row in (0, 2):
            np.testing.assert_array_equal(o[row], 0)
            self.assertTrue(np.all(np.isneginf(lse[row])))

    def test_metadata_steps_with_empty_requests_and_batches(self):
        meta = MlaDecodeMetadata(4, 2, 16, "bf16", "bf16", page_size=16, return_lse=True, max_total_tokens=2048)
        for step, lens in enumerate([[40, 0, 70], [0, 0, 0], [], [41, 16, 0, 90], [0]]):
            p = make_problem(np.random.default_rng(50 + step), "bf16", "bf16", 16, lens, qseqlen=2, page_size=16)
            meta.update(p["qo_indptr"], p["kv_indptr"], p["kv_last_page_lens"])
            self.assertEqual(meta.plan_info()["batch"], len(lens))
            o, lse = run(p, sm_scale=SCALE, return_lse=True, metadata=meta)
            if any(lens):
                self.assertClose(o, p, False, lse)
            else:  # no KV at all (or no request): every row o = 0, lse = -inf
                np.testing.assert_array_equal(o, 0)
                self.assertTrue(np.all(np.isneginf(lse)))
                self.assertEqual(o.shape[0], 2 * len(lens))
        info = meta.plan_info()
        self.assertEqual(info["num_launches"], 3)  # decode, prefix, reduce: fixed by the capacity
        meta.close()


    def same_bits_over_two_steps(self, ref, meta, seed):
        """Two steps (empty requests included) through both metadata: meta's output matches the
        reference and ref's bit for bit; returns the last step's problem."""
        for step, lens in enumerate([[300, 0, 45], [301, 46, 0, 700]]):
            p = make_problem(np.random.default_rng(seed + step), "fp8", "fp8", 16, lens)
            for m in (ref, meta):
                m.update(p["qo_indptr"], p["kv_indptr"], p["kv_last_page_lens"])
            o_ref, lse_ref = run(p, sm_scale=SCALE, return_lse=True, metadata=ref)
            o, lse = run(p, sm_scale=SCALE, return_lse=True, metadata=meta)
            self.assertClose(o, p, True, lse)
            np.testing.assert_array_equal(o, o_ref)
            np.testing.assert_array_equal(lse, lse_ref)
            self.assertGreater(meta.plan_info()["num_partials"], 0)  # requests were split: merges ran
        return p

    def test_merge_in_launch_is_one_launch_and_the_same_bits(self):
        # Issue #33: the decode launch merges the splits (MLA_OPTION_MERGE); empty requests included.
        two = MlaDecodeMetadata(4, 1, 16, "fp8", "fp8", return_lse=True, max_total_tokens=4096)
        one = MlaDecodeMetadata(4, 1, 16, "fp8", "fp8", return_lse=True, max_total_tokens=4096, merge_in_launch=True)
        p = self.same_bits_over_two_steps(two, one, 60)
        self.assertEqual(one.plan_info()["num_launches"], 1)
        self.assertEqual(two.plan_info()["num_launches"], 3)
        with self.assertRaisesRegex(ValueError, r"merge_in_launch=True"):
            one.update(p["qo_indptr"], p["kv_indptr"], p["kv_last_page_lens"], prefix_groups=[(0, 2, 16)])
        one.close()
        two.close()

    def test_without_cascades_two_launches_and_the_same_bits(self):
        # An engine that never shares prefixes: no prefix launch (MLA_OPTION_CASCADE 2 at creation).
        three = MlaDecodeMetadata(4, 1, 16, "fp8", "fp8", return_lse=True, max_total_tokens=4096)
        two = MlaDecodeMetadata(4, 1, 16, "fp8", "fp8", return_lse=True, max_total_tokens=4096, cascades=False)
        self.assertEqual(three.plan_info()["num_launches"], 3)
        self.assertEqual(two.plan_info()["num_launches"], 2)
        self.assertEqual(two.plan_info()["prefix_grid"][0], 0)
        p = self.same_bits_over_two_steps(three, two, 70)
        with self.assertRaisesRegex(ValueError, r"cascades=False"):
            two.update(p["qo_indptr"], p["kv_indptr"], p["kv_last_page_lens"], detect_shared_prefixes=True)
        # The shared context's option is back to its default: a later metadata cascades again.
        again = MlaDecodeMetadata(4, 1, 16, "fp8", "fp8", max_total_tokens=4096)
        self.assertEqual(again.plan_info()["num_launches"], 3)
        for meta in (three, two, again):
            meta.close()


# ---- bad input: the argument, what it got, what is allowed --------------------------------------

class TestErrors(Case):
    def setUp(self):
        self.p = make_problem(np.random.default_rng(30), "fp8", "fp8", 16, [20, 9])

    def call(self, **changes):
        p = dict(self.p)
        p.update(changes)
        return run(p, sm_scale=SCALE)

    def test_shape(self):
        with self.assertRaisesRegex(ValueError, r"q: expected \[tokens, heads, 576\], got shape \[2, 16, 512\]"):
            self.call(q=self.p["q"][:, :, :512].copy())
        with self.assertRaisesRegex(ValueError, r"o: expected \[tokens, heads, 512\] = \[2, 16, 512\].*\[2, 8, 512\]"):
            self.call(o=self.p["o"][:, :8].copy())
        with self.assertRaisesRegex(ValueError, r"kv_buffer: expected \[num_pages, page_size = 1, 1, 576\]"):
            self.call(kv_buffer=self.p["kv_buffer"].reshape(-1, 2, 1, 576))

    def test_dtype(self):
        with self.assertRaisesRegex(TypeError, r"q: dtype numpy.float32 is not allowed; numpy takes .*uint8"):
            self.call(q=self.p["q"].astype(np.float32))
        with self.assertRaisesRegex(TypeError, r"o: dtype torch.float32 is not allowed"):
            self.call(o=torch.zeros(2, 16, 512))
        with self.assertRaisesRegex(TypeError, r"kv_indices: dtype numpy.int64 is not allowed; expected int32"):
            self.call(kv_indices=self.p["kv_indices"].astype(np.int64))
        with self.assertRaisesRegex(TypeError, r"q: expected a torch.Tensor or a numpy.ndarray, got list"):
            self.call(q=self.p["q"].tolist())

    def test_non_contiguous(self):
        q = np.ascontiguousarray(self.p["q"].transpose(1, 0, 2)).transpose(1, 0, 2)
        with self.assertRaisesRegex(ValueError, r"q: must be contiguous.*strides \[576, 1152, 1\]"):
            self.call(q=q)
        o = torch.zeros(16, 2, 512, dtype=torch.bfloat16).transpose(0, 1)
        with self.assertRaisesRegex(ValueError, r"o: must be contiguous.*\.contiguous\(\)"):
            self.call(o=o)

    def test_mismatched_qo_indptr(self):
        with self.assertRaisesRegex(ValueError, r"qo_indptr: every request must have max_seqlen_q = 1 query rows.*"
                                                r"request 1 has 2 query rows"):
            self.call(qo_indptr=np.array([0, 1, 3], np.int32))
        with self.assertRaisesRegex(ValueError, r"kv_last_page_lens: request 0 has 0; allowed 1..page_size = 1..1"):
            self.call(kv_last_page_lens=np.array([0, 1], np.int32))
        with self.assertRaisesRegex(ValueError, r"q: 2 rows, but qo_indptr describes 3 requests"):
            self.call(qo_indptr=np.array([0, 1, 2, 3], np.int32), kv_indptr=np.array([0, 20, 29, 30], np.int32),
                      kv_last_page_lens=np.ones(3, np.int32))

    def test_page_id_out_of_range(self):
        ind = self.p["kv_indices"].copy()
        ind[3] = self.p["kv_buffer"].shape[0]
        with self.assertRaisesRegex(ValueError, r"kv_indices\[3\] = 36 is outside 0..num_pages-1 = 0..35"):
            self.call(kv_indices=ind)

    def test_no_kernel(self):
        # 12 heads is not in the test catalog: the C library's message names the closest kernels.
        p = make_problem(np.random.default_rng(31), "fp8", "fp8", 12, [20])
        with self.assertRaisesRegex(ValueError, r"(?s)MLA_ERROR_NO_KERNEL.*heads=12.*Closest:.*mla_decode_fp8fp8_h16_qs1_pg1") as cm:
            run(p, sm_scale=SCALE)
        self.assertIsInstance(cm.exception, mla_decode.MlaInputError)
        self.assertIn("allow_padding=True", str(cm.exception))
        # Asked for, the 16-head kernel runs the 12 heads (q padded in the workspace, o copied back).
        o, _ = run(p, sm_scale=SCALE, allow_padding=True)
        self.assertClose(o, p, True)

    def test_unsupported_arguments(self):
        with self.assertRaisesRegex(ValueError, r"nhead_kv: .*got 2, allowed 1"):
            run(self.p, nhead_kv=2)
        with self.assertRaisesRegex(ValueError, r"return_logits"):
            run(self.p, return_logits=True)


if __name__ == "__main__":
    unittest.main()


# ---- merge_attn_states (decode context parallelism) ----------------------------------------------

def halves(p, cut):
    """Two page-1 problems holding tokens [0, cut[b]) and [cut[b], L) of each request of p."""
    out = []
    for part in (0, 1):
        idx, indptr, last = [], [0], []
        for b in range(len(p["kv_indptr"]) - 1):
            pages = p["kv_indices"][p["kv_indptr"][b]:p["kv_indptr"][b + 1]]
            mine = pages[:cut[b]] if part == 0 else pages[cut[b]:]
            idx.extend(mine)
            indptr.append(indptr[-1] + len(mine))
            last.append(1)
        h = dict(p)
        h["kv_indices"] = np.array(idx, np.int32)
        h["kv_indptr"] = np.array(indptr, np.int32)
        h["kv_last_page_lens"] = np.array(last, np.int32)
        h["o"] = np.full_like(p["o"], 0xFFFF)
        out.append(h)
    return out


class TestMerge(Case):
    def test_two_halves_merge_to_the_whole(self):
        # Each rank of decode context parallelism holds part of every request's KV; the engine
        # merges the ranks' (o, lse): the result is the attention over the whole KV.
        p = make_problem(np.random.default_rng(11), "fp8", "fp8", 16, [300, 150, 77])
        a, b = halves(p, [100, 149, 40])
        oa, la = run(a, sm_scale=SCALE, return_lse=True)
        ob, lb = run(b, sm_scale=SCALE, return_lse=True)
        out = np.full_like(p["o"], 0xFFFF)
        out_lse = np.full(la.shape[::-1], np.nan, np.float32)  # vLLM's [heads, tokens]
        # vLLM's layout: lse [heads, tokens]; mla_decode_fwd's [tokens, heads] goes in transposed.
        self.assertIsNone(mla_decode.merge_attn_states(out, oa, la.T, ob, lb.T, out_lse))
        out_lse = out_lse.T
        self.assertClose(out, p, True, out_lse)
        # And exactly the merge of the two halves, computed here in float64 (to bf16 rounding).
        m = np.maximum(la, lb).astype(np.float64)
        wa, wb = np.exp(la - m)[..., None], np.exp(lb - m)[..., None]
        want = (wa * bf16_to_f64(oa) + wb * bf16_to_f64(ob)) / (wa + wb)
        got = bf16_to_f64(out)
        self.assertLessEqual(np.max(np.abs(got - want) / (np.abs(want) + 1e-30)), 2.0 ** -8)
        np.testing.assert_allclose(out_lse, m + np.log((wa + wb)[..., 0]), rtol=1e-5, atol=1e-5)

    def test_torch_bf16_and_no_output_lse(self):
        rng = np.random.default_rng(12)
        o1 = torch.from_numpy(random_bits(rng, "bf16", (5, 3, 512)).view(np.int16)).view(torch.bfloat16)
        o2 = torch.from_numpy(random_bits(rng, "bf16", (5, 3, 512)).view(np.int16)).view(torch.bfloat16)
        l1 = torch.from_numpy(rng.uniform(-3, 3, (5, 3)).astype(np.float32))
        l2 = torch.from_numpy(rng.uniform(-3, 3, (5, 3)).astype(np.float32))
        l1[0, 0] = -math.inf  # only the suffix saw tokens: its o comes through unchanged
        out = torch.empty(5, 3, 512, dtype=torch.bfloat16)
        self.assertIsNone(mla_decode.merge_attn_states(out, o1, l1.transpose(0, 1), o2, l2.transpose(0, 1)))
        self.assertTrue(torch.equal(out[0, 0], o2[0, 0]))
        w1 = torch.exp(l1 - torch.maximum(l1, l2)).double()[..., None]
        w2 = torch.exp(l2 - torch.maximum(l1, l2)).double()[..., None]
        want = (w1 * o1.double() + w2 * o2.double()) / (w1 + w2)
        self.assertLessEqual(float(((out.double() - want).abs() / (want.abs() + 1e-30)).max()), 2.0 ** -8)

    def test_bad_input(self):
        o = np.zeros((2, 4, 512), np.uint16)
        lse = np.zeros((2, 4), np.float32)
        merge = mla_decode.merge_attn_states
        # lse is vLLM's [heads, tokens]: [tokens, heads] is refused with the fix named.
        with self.assertRaisesRegex(ValueError, r"prefix_lse: shape \[2, 4\], expected \[NUM_HEADS, NUM_TOKENS\] = "
                                                r"\[4, 2\].*transpose\(0, 1\)"):
            merge(o, o, lse, o, lse.T)
        with self.assertRaisesRegex(TypeError, r"suffix_lse: dtype numpy.float64 is not allowed; expected float32"):
            merge(o, o, lse.T, o, lse.T.astype(np.float64))
        with self.assertRaisesRegex(ValueError, r"output: expected \[NUM_TOKENS, NUM_HEADS, 512\] bf16, got shape "
                                                r"\[2, 4, 256\]"):
            merge(np.zeros((2, 4, 256), np.uint16), o, lse.T, o, lse.T)
        with self.assertRaisesRegex(ValueError, r"prefix_output: the last \(head_size\) dimension must have stride 1"):
            merge(o, np.zeros((2, 4, 1024), np.uint16)[:, :, ::2], lse.T, o, lse.T)
