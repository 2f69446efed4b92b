"""mla_decode as the serving engines call it (issue #32): vLLM's merge_attn_states contract, the
registered op through torch.ops, aiter's metadata split, both emulator targets in one process,
the fp8 flavour of raw bits, and a catalog csv that aiter's codegen cannot take for its own.

Expected values come from float64 references written here or in test_mla_decode.py, never from
the code under test. Run by ctest ("python: mla_decode") beside test_mla_decode.py.
"""
import contextlib
import copy
import csv
import glob
import json
import math
import os
import unittest

import numpy as np
import torch

import mla_decode
import test_mla_decode as tm
from mla_decode import get_mla_metadata, get_mla_metadata_info, merge_attn_states, mla_decode_fwd
from test_mla_decode import SCALE, Case, bf16_to_f64, halves, make_problem, random_bits, run

INDEX = ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_lens")


@contextlib.contextmanager
def reference_target(target):
    """The float64 reference of test_mla_decode decodes fp8 bits in `target`'s flavour meanwhile."""
    old = tm.TARGET
    tm.TARGET = target
    try:
        yield
    finally:
        tm.TARGET = old


def bf16_tensor(bits):
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(torch.bfloat16)


def merge64(o_p, l_p, o_s, l_s):
    """vLLM's merge in float64: o [T, H, D] (float64), lse [H, T]; +inf counts as -inf (empty);
    a row with both empty gets o = 0, lse = -inf (this package's choice; vLLM's kernels give NaN)."""
    l_p = np.where(np.isposinf(l_p), -np.inf, l_p).astype(np.float64).T  # [T, H]
    l_s = np.where(np.isposinf(l_s), -np.inf, l_s).astype(np.float64).T
    m = np.maximum(l_p, l_s)
    empty = np.isneginf(m)
    m_safe = np.where(empty, 0.0, m)
    w_p, w_s = np.exp(l_p - m_safe), np.exp(l_s - m_safe)
    tot = w_p + w_s
    o = (w_p[..., None] * o_p + w_s[..., None] * o_s) / np.where(tot == 0, 1, tot)[..., None]
    o[empty] = 0.0
    lse = np.where(empty, -np.inf, m_safe + np.log(np.where(tot == 0, 1, tot)))
    return o, lse.T  # lse as [H, T]


# ---- merge_attn_states with vLLM's contract ----------------------------------------------------


def merge_inputs(rng, T, H):
    """Two bf16 partial outputs [T, H, 512] and their lse [H, T] (vLLM's layout), drawn fresh."""
    o_p, o_s = random_bits(rng, "bf16", (T, H, 512)), random_bits(rng, "bf16", (T, H, 512))
    return o_p, o_s, rng.uniform(-2, 2, (H, T)).astype(np.float32), rng.uniform(-2, 2, (H, T)).astype(np.float32)

class TestVllmMerge(Case):
    def assertMerged(self, out_bits, out_lse, o_p, l_p, o_s, l_s):
        want_o, want_lse = merge64(bf16_to_f64(o_p), np.asarray(l_p), bf16_to_f64(o_s), np.asarray(l_s))
        got = bf16_to_f64(np.asarray(out_bits))
        # bf16 output: within one bf16 rounding of the float64 merge.
        np.testing.assert_array_less(np.abs(got - want_o), np.abs(want_o) * 2.0 ** -8 + 1e-30)
        if out_lse is not None:
            out_lse = np.asarray(out_lse, np.float64)
            np.testing.assert_array_equal(np.isneginf(out_lse), np.isneginf(want_lse))
            finite = np.isfinite(want_lse)
            np.testing.assert_allclose(out_lse[finite], want_lse[finite], rtol=1e-5, atol=1e-5)

    def test_dcp_halves_as_vllm_passes_them(self):
        # Two ranks' (o, lse) from mla_decode_fwd (lse [tokens, heads]) merged as vLLM calls its
        # merge: lse as .transpose(0, 1) views, output_lse a [heads, tokens] tensor.
        p = make_problem(np.random.default_rng(101), "fp8", "fp8", 16, [150, 60, 97])
        a, b = halves(p, [70, 59, 10])
        outs = []
        for half in (a, b):
            o = torch.full((3, 16, 512), float("nan"), dtype=torch.bfloat16)
            lse = torch.full((3, 16), float("nan"))
            mla_decode_fwd(torch.from_numpy(half["q"]), torch.from_numpy(half["kv_buffer"]), o,
                           *(torch.from_numpy(half[k]) for k in INDEX), 1, sm_scale=SCALE, return_lse=True, lse=lse)
            outs.append((o, lse))
        (o_a, l_a), (o_b, l_b) = outs
        output = torch.full((3, 16, 512), float("nan"), dtype=torch.bfloat16)
        output_lse = torch.full((16, 3), float("nan"))
        res = merge_attn_states(output, o_a, l_a.transpose(0, 1), o_b, l_b.transpose(0, 1), output_lse)
        self.assertIsNone(res)  # vLLM's returns None
        bits = output.view(torch.int16).numpy().view(np.uint16)
        self.assertMerged(bits, output_lse.numpy(), o_a.view(torch.int16).numpy().view(np.uint16),
                          l_a.numpy().T, o_b.view(torch.int16).numpy().view(np.uint16), l_b.numpy().T)
        # And the merge is the attention over the whole KV (float64 reference of the whole).
        self.assertClose(bits, p, True, output_lse.numpy().T)

    def test_strided_views_numpy_and_torch(self):
        rng = np.random.default_rng(102)
        T, H = 5, 3
        o_p, o_s = random_bits(rng, "bf16", (T, H, 512)), random_bits(rng, "bf16", (T, H, 512))
        # lse as slices of wider buffers (vLLM's suffix_lse[:, start:end]) and transposed views.
        wide = rng.uniform(-4, 4, (H, T + 4)).astype(np.float32)
        l_p = wide[:, 2:2 + T]
        l_s = np.ascontiguousarray(rng.uniform(-4, 4, (T, H)).astype(np.float32)).T
        out = np.full((T, H, 512), 0xFFFF, np.uint16)
        out_lse_buf = np.full((T, H), np.nan, np.float32)
        merge_attn_states(out, o_p, l_p, o_s, l_s, out_lse_buf.T)
        self.assertMerged(out, out_lse_buf.T, o_p, l_p, o_s, l_s)
        # torch: a non-contiguous output (every other head of a wider buffer) is written in place.
        big = torch.full((T, 2 * H, 512), float("nan"), dtype=torch.bfloat16)
        view = big[:, ::2]
        tl_p, tl_s = torch.from_numpy(np.ascontiguousarray(l_p)), torch.from_numpy(np.ascontiguousarray(l_s.T)).T
        merge_attn_states(view, bf16_tensor(o_p), tl_p, bf16_tensor(o_s), tl_s)
        got = big.view(torch.int16).numpy().view(np.uint16)
        np.testing.assert_array_equal(got[:, ::2], out)
        self.assertTrue(torch.isnan(big[:, 1::2].float()).all())  # the other heads untouched

    def test_plus_inf_counts_as_empty(self):
        rng = np.random.default_rng(103)
        T, H = 4, 2
        o_p, o_s, l_p, l_s = merge_inputs(rng, T, H)
        l_p[0, 1] = np.inf            # FlashAttention-2's empty prefix: the suffix comes through
        l_p[1, 2] = l_s[1, 2] = np.inf  # both empty: o = 0, lse = -inf
        l_s[0, 3] = -np.inf           # FlashAttention-3's empty suffix
        out = np.full((T, H, 512), 0xFFFF, np.uint16)
        out_lse = np.full((H, T), np.nan, np.float32)
        merge_attn_states(out, o_p, l_p, o_s, l_s, out_lse)
        self.assertFalse(np.isnan(bf16_to_f64(out)).any())
        np.testing.assert_array_equal(out[1, 0], o_s[1, 0])
        np.testing.assert_array_equal(out[3, 0], o_p[3, 0])
        np.testing.assert_array_equal(bf16_to_f64(out[2, 1]), 0.0)
        self.assertEqual(out_lse[1, 2], -np.inf)
        self.assertAlmostEqual(float(out_lse[0, 1]), float(l_s[0, 1]), places=5)
        self.assertMerged(out, out_lse, o_p, l_p, o_s, l_s)

    def test_square_lse_layout_is_refused_unless_told(self):
        rng = np.random.default_rng(104)
        N = 4  # tokens == heads
        o_p, o_s = random_bits(rng, "bf16", (N, N, 512)), random_bits(rng, "bf16", (N, N, 512))
        l_p = rng.uniform(-3, 3, (N, N)).astype(np.float32)
        l_s = rng.uniform(-3, 3, (N, N)).astype(np.float32)
        out = np.full((N, N, 512), 0xFFFF, np.uint16)
        with self.assertRaisesRegex(ValueError, r"prefix_lse: shape \[4, 4\] is square .* cannot be told apart.*"
                                                r"lse.transpose\(0, 1\).*lse_layout=\"heads_tokens\""):
            merge_attn_states(out, o_p, l_p, o_s, l_s)
        np.testing.assert_array_equal(out, 0xFFFF)  # refused before anything ran
        # Told: a row-major [heads, tokens] lse.
        merge_attn_states(out, o_p, l_p, o_s, l_s, lse_layout="heads_tokens")
        self.assertMerged(out, None, o_p, l_p, o_s, l_s)
        # A transposed view (mla_decode_fwd's [tokens, heads] passed as vLLM passes it) needs no word.
        out2 = np.full((N, N, 512), 0xFFFF, np.uint16)
        merge_attn_states(out2, o_p, np.ascontiguousarray(l_p.T).T, o_s, np.ascontiguousarray(l_s.T).T)
        np.testing.assert_array_equal(out2, out)
        with self.assertRaisesRegex(ValueError, r"lse_layout: got 'tokens_heads'"):
            merge_attn_states(out, o_p, l_p, o_s, l_s, lse_layout="tokens_heads")

    def test_untransposed_decode_lse_is_refused_with_the_fix(self):
        o = np.zeros((3, 16, 512), np.uint16)
        lse_th = np.zeros((3, 16), np.float32)  # mla_decode_fwd's layout, not transposed
        with self.assertRaisesRegex(ValueError, r"prefix_lse: shape \[3, 16\], expected \[NUM_HEADS, NUM_TOKENS\] = "
                                                r"\[16, 3\].*pass prefix_lse.transpose\(0, 1\)"):
            merge_attn_states(o, o, lse_th, o, lse_th.T)
        with self.assertRaisesRegex(TypeError, r"suffix_lse: dtype numpy.float64 is not allowed; expected float32"):
            merge_attn_states(o, o, lse_th.T, o, lse_th.T.astype(np.float64))
        with self.assertRaisesRegex(ValueError, r"output_scale: fp8 output is not supported"):
            merge_attn_states(o, o, lse_th.T, o, lse_th.T, output_scale=torch.tensor([1.0]))
        with self.assertRaisesRegex(ValueError, r"prefill_tokens_with_context: got 4; allowed None or an integer "
                                                r"0..NUM_TOKENS = 0..3"):
            merge_attn_states(o, o, lse_th.T, o, lse_th.T, prefill_tokens_with_context=4)

    def test_prefill_tokens_with_context(self):
        # vLLM: tokens at index >= prefill_tokens_with_context take the suffix as it is.
        rng = np.random.default_rng(105)
        T, H = 5, 3
        o_p, o_s, l_p, l_s = merge_inputs(rng, T, H)
        l_s[1, 4] = np.inf  # copied raw past the merged tokens, as vLLM's kernel stores it
        out = np.full((T, H, 512), 0xFFFF, np.uint16)
        out_lse = np.full((H, T), np.nan, np.float32)
        merge_attn_states(out, o_p, l_p, o_s, l_s, out_lse, prefill_tokens_with_context=2)
        self.assertMerged(out[:2], out_lse[:, :2], o_p[:2], l_p[:, :2], o_s[:2], l_s[:, :2])
        np.testing.assert_array_equal(out[2:], o_s[2:])
        np.testing.assert_array_equal(out_lse[:, 2:], l_s[:, 2:])


# ---- the registered op ---------------------------------------------------------------------------

def vllm_style_impl(q, kv_buffer, o, qo_indptr, max_seqlen_qo, kv_indptr, kv_indices, kv_last_page_lens,
                    sm_scale=1.0, logit_cap=0.0, q_scale=None, kv_scale=None, metadata_handle=0):
    """What vLLM's _rocm_aiter_mla_decode_fwd_impl becomes with this package (docs/engines.md)."""
    torch.ops.mla_decode.decode_fwd(q, kv_buffer.view(-1, 1, 1, q.shape[-1]), o, qo_indptr, max_seqlen_qo,
                                    kv_indptr, kv_indices, kv_last_page_lens, sm_scale=sm_scale,
                                    logit_cap=logit_cap, q_scale=q_scale, kv_scale=kv_scale,
                                    metadata_handle=metadata_handle)


class TestRegisteredOp(Case):
    def test_schema(self):
        schema = str(torch.ops.mla_decode.decode_fwd.default._schema)
        self.assertIn("Tensor(a!) o", schema)
        self.assertIn("Tensor(b!)? lse=None", schema)
        self.assertIn("int metadata_handle=0", schema)
        self.assertTrue(schema.endswith("-> ()"), schema)

    def test_eager_through_torch_ops(self):
        p = make_problem(np.random.default_rng(110), "fp8", "fp8", 16, [120, 33])
        t = {k: torch.from_numpy(p[k]) for k in INDEX}
        o = torch.full((2, 16, 512), float("nan"), dtype=torch.bfloat16)
        kv = torch.from_numpy(p["kv_buffer"]).view(-1, 576)  # vLLM's cache view; the impl reshapes it
        vllm_style_impl(torch.from_numpy(p["q"]), kv, o, t["qo_indptr"], 1, t["kv_indptr"], t["kv_indices"],
                        t["kv_last_page_lens"], sm_scale=SCALE, q_scale=torch.tensor([1.0]),
                        kv_scale=torch.tensor([1.0]))
        bits = o.view(torch.int16).numpy().view(np.uint16)
        self.assertClose(bits, p, True)
        np.testing.assert_array_equal(bits, run(p, sm_scale=SCALE)[0])

    def test_with_metadata_handle_and_lse(self):
        meta = get_mla_metadata_info(4, 2, 16, "bf16", "bf16", page_size=16, return_lse=True, max_total_tokens=1024)
        self.assertIsInstance(meta.handle, int)
        for step, lens in enumerate([[40, 70], [41, 0, 90]]):
            p = make_problem(np.random.default_rng(111 + step), "bf16", "bf16", 16, lens, qseqlen=2, page_size=16)
            get_mla_metadata(meta, seq_lens=np.array(lens, np.int32))
            t = {k: torch.from_numpy(p[k]) for k in INDEX}
            o = torch.full((2 * len(lens), 16, 512), float("nan"), dtype=torch.bfloat16)
            lse = torch.full((2 * len(lens), 16), float("nan"))
            torch.ops.mla_decode.decode_fwd(bf16_tensor(p["q"]), bf16_tensor(p["kv_buffer"]), o, t["qo_indptr"], 2,
                                            t["kv_indptr"], t["kv_indices"], t["kv_last_page_lens"], page_size=16,
                                            sm_scale=SCALE, lse=lse, metadata_handle=meta.handle)
            self.assertClose(o.view(torch.int16).numpy().view(np.uint16), p, False, lse.numpy())
        handle = meta.handle
        meta.close()
        with self.assertRaisesRegex(ValueError, rf"metadata_handle: {handle} names no live MlaDecodeMetadata"):
            torch.ops.mla_decode.decode_fwd(bf16_tensor(p["q"]), bf16_tensor(p["kv_buffer"]), o, t["qo_indptr"], 2,
                                            t["kv_indptr"], t["kv_indices"], t["kv_last_page_lens"], page_size=16,
                                            metadata_handle=handle)

    def test_fake_implementation(self):
        # Meta tensors carry shapes only: the fake implementation checks them and writes nothing.
        m = lambda *shape, dtype=torch.float32: torch.empty(*shape, device="meta", dtype=dtype)
        i = m(3, dtype=torch.int32)
        torch.ops.mla_decode.decode_fwd(m(2, 16, 576), m(9, 1, 1, 576), m(2, 16, 512), i, 1, i, i, m(2, dtype=torch.int32),
                                        lse=m(2, 16))
        with self.assertRaisesRegex(ValueError, r"o: expected \[tokens, heads, 512\] = \[2, 16, 512\], got shape "
                                                r"\[2, 12, 512\]"):
            torch.ops.mla_decode.decode_fwd(m(2, 16, 576), m(9, 1, 1, 576), m(2, 12, 512), i, 1, i, i, i)


# ---- aiter's metadata split ----------------------------------------------------------------------

class TestMetadataSplit(Case):
    def test_info_once_then_update_per_step_from_cpu_copies(self):
        meta = get_mla_metadata_info(4, 1, 16, "fp8", "fp8", max_total_tokens=2048)
        ws = meta.workspace_bytes
        grids = {k: meta.plan_info()[k] for k in ("decode_grid", "reduce_grid", "num_launches")}
        for step, lens in enumerate([[30, 60], [31, 61, 9], [0, 120]]):
            p = make_problem(np.random.default_rng(120 + step), "fp8", "fp8", 16, lens)
            cpu = torch.tensor(lens, dtype=torch.int32) if step % 2 else np.array(lens, np.int32)
            get_mla_metadata(meta, seq_lens=cpu)
            o_meta, _ = run(p, sm_scale=SCALE, metadata=meta)
            self.assertClose(o_meta, p, True)
            np.testing.assert_array_equal(o_meta, run(p, sm_scale=SCALE)[0])
            # The fixed buffers and grids do not change per step.
            self.assertEqual(meta.workspace_bytes, ws)
            self.assertEqual({k: meta.plan_info()[k] for k in grids}, grids)
            # aiter's index tensors give the same plan as seq_lens.
            get_mla_metadata(meta, p["qo_indptr"], p["kv_indptr"], p["kv_last_page_lens"])
            np.testing.assert_array_equal(run(p, sm_scale=SCALE, metadata=meta)[0], o_meta)
        with self.assertRaisesRegex(ValueError, r"seq_lens: request 1 has -1"):
            get_mla_metadata(meta, seq_lens=np.array([5, -1], np.int32))
        with self.assertRaisesRegex(ValueError, r"seq_lens: given with qo_indptr"):
            get_mla_metadata(meta, p["qo_indptr"], seq_lens=np.array([5], np.int32))
        with self.assertRaisesRegex(ValueError, r"qo_indptr: missing"):
            get_mla_metadata(meta)
        with self.assertRaisesRegex(TypeError, r"seq_lens: dtype numpy.int64 is not allowed; expected int32"):
            get_mla_metadata(meta, seq_lens=np.array([5], np.int64))
        with self.assertRaisesRegex(TypeError, r"metadata: expected the MlaDecodeMetadata"):
            get_mla_metadata("meta", seq_lens=np.array([5], np.int32))
        meta.close()

    def test_kv_lengths_quick_check_agrees_with_the_checked_one(self):
        # update() takes a batch whose every request has pages through a few comparisons; anything
        # else goes through the check that names the bad request. Both give one answer (issue #42).
        from mla_decode.decode import _kv_lens, _kv_lens_checked

        def outcome(f, *a):
            try:
                lens, total = f(*a)
                return "ok", [int(x) for x in lens], total
            except ValueError as e:
                return "error", str(e)

        rng = np.random.default_rng(150)
        seen = set()
        for trial in range(600):
            batch, qseqlen, page = int(rng.integers(0, 7)), int(rng.choice([1, 2, 4])), int(rng.choice([1, 16, 128]))
            pages = rng.integers(1, 6, batch)
            last = rng.integers(1, page + 1, batch)
            qo = np.arange(batch + 1) * qseqlen
            kvp = np.concatenate([[0], np.cumsum(pages)])
            if batch and trial % 2:  # one thing wrong (or a request without KV, which is right)
                b, what = int(rng.integers(0, batch)), int(rng.integers(0, 7))
                if what == 0:
                    qo[b + 1] += 1
                elif what == 1:
                    kvp[b + 1:] -= pages[b]  # request b has no pages
                elif what == 2:
                    kvp[b + 1] = kvp[b] - 1  # fewer pages than the request before
                elif what == 3:
                    last[b] = 0 if rng.integers(0, 2) else page + 1
                elif what == 4:
                    kvp[0] = 1
                elif what == 5:  # one token, fewer than qseqlen (when > 1)
                    kvp[b + 1:] -= pages[b] - 1
                    last[b] = 1
                else:
                    kvp[b + 1:] += 2**31 // page  # a length past int32
            arrays = [np.asarray(a, np.int64).astype(np.int32) for a in (qo, kvp, last)]
            got = outcome(_kv_lens, *arrays, qseqlen, page)
            self.assertEqual(got, outcome(_kv_lens_checked, *arrays, qseqlen, page), (qo, kvp, last, qseqlen, page))
            seen.add(got[0])
        self.assertEqual(seen, {"ok", "error"})


# ---- the path of a GPU tensor --------------------------------------------------------------------

@contextlib.contextmanager
def gpu_stand_in(meta):
    """What a call with ROCm GPU tensors and `meta` does, on this GPU-less machine: torch.Tensor says
    it is on cuda:0 (device, is_cuda, get_device patched), meta runs on a HIP-labelled copy of its
    runtime, torch.version.hip is set, torch.cuda.current_stream returns stream 0x5EA. mla_decode is
    recorded, not run (yields the list of (args fields, stream, plan)); a host copy fails the test."""
    lib, calls = mla_decode._capi.lib(), []

    def decode(ctx, plan, args, workspace, workspace_bytes, stream):
        calls.append(({f: getattr(args._obj, f) for f, _ in args._obj._fields_}, stream, plan))
        return 0

    def host_copy(*args):
        raise AssertionError("a host copy on the path of a GPU tensor")

    class Stream:
        cuda_stream = 0x5EA

    cuda0 = torch.device("cuda", 0)
    patched = {(torch.Tensor, "device"): property(lambda self: cuda0),
               (torch.Tensor, "is_cuda"): property(lambda self: True),
               (torch.Tensor, "get_device"): lambda self: 0, (torch.version, "hip"): "stand-in",
               (torch.cuda, "current_stream"): lambda device=None: Stream(), (lib, "mla_decode"): decode,
               (lib, "mla_memcpy_h2d"): host_copy, (lib, "mla_memcpy_d2h"): host_copy}
    saved = {k: k[0].__dict__.get(k[1]) for k in patched}
    runtime = copy.copy(meta.runtime)
    runtime.backend, runtime.key = mla_decode._capi.MLA_BACKEND_HIP, ("hip", 0, runtime.key[2])
    saved_meta = (meta.runtime, meta.device)
    meta.runtime, meta.device = runtime, "cuda:0"
    for (obj, name), value in patched.items():
        setattr(obj, name, value)
    try:
        yield calls
    finally:
        for (obj, name), value in saved.items():
            if value is None:
                delattr(obj, name)
            else:
                setattr(obj, name, value)
        meta.runtime, meta.device = saved_meta


class TestGpuPath(Case):
    def test_metadata_call_passes_data_ptrs_and_reads_nothing_on_the_host(self):
        # Issue #42: with metadata, a GPU tensor's call checks shapes, dtypes and devices, and passes
        # data_ptr()s on the current stream: no host scan of q, no staging copy, no readback.
        meta = get_mla_metadata_info(4, 1, 16, "fp8", "fp8", return_lse=True, max_total_tokens=2048)
        p = make_problem(np.random.default_rng(145), "fp8", "fp8", 16, [40, 12])
        get_mla_metadata(meta, seq_lens=np.array([40, 12], np.int32))
        p["q"][1, 3, 7] = 0x7F  # NaN in e4m3fn: the host scan of CPU tensors would refuse it
        t = {k: torch.from_numpy(p[k]) for k in ("q", "kv_buffer") + INDEX}
        o, lse = torch.zeros(2, 16, 512, dtype=torch.bfloat16), torch.zeros(2, 16)
        q_scale, kv_scale = torch.tensor([0.5]), torch.tensor([2.0])
        with gpu_stand_in(meta) as calls:
            got = mla_decode_fwd(t["q"], t["kv_buffer"], o, t["qo_indptr"], t["kv_indptr"], t["kv_indices"],
                                 t["kv_last_page_lens"], 1, sm_scale=SCALE, q_scale=q_scale, kv_scale=kv_scale,
                                 return_lse=True, lse=lse, metadata=meta)
        self.assertIs(got[0], o)
        self.assertIs(got[1], lse)
        self.assertEqual(len(calls), 1)
        args, stream, plan = calls[0]
        self.assertEqual(getattr(stream, "value", stream), 0x5EA)  # an int or a c_void_p
        self.assertIs(plan, meta._plan)
        self.assertEqual((args["q"], args["kv"], args["kv_indices"], args["o"], args["lse"]),
                         (t["q"].data_ptr(), t["kv_buffer"].data_ptr(), t["kv_indices"].data_ptr(), o.data_ptr(),
                          lse.data_ptr()))
        self.assertEqual((args["q_scale_ptr"], args["kv_scale_ptr"]), (q_scale.data_ptr(), kv_scale.data_ptr()))
        self.assertEqual((args["q_scale"], args["kv_scale"]), (1.0, 1.0))  # the tensors are read on the device
        self.assertEqual(args["num_pages"], p["kv_buffer"].shape[0])
        self.assertAlmostEqual(args["sm_scale"], SCALE, places=6)
        self.assertTrue(torch.equal(o, torch.zeros_like(o)))  # nothing copied back
        # The checks still hold on this path: a batch the metadata was not updated for is refused.
        with gpu_stand_in(meta) as calls:
            with self.assertRaisesRegex(ValueError, r"last updated for 2 requests"):
                mla_decode_fwd(t["q"][:1], t["kv_buffer"], o[:1], t["qo_indptr"][:2], t["kv_indptr"][:2],
                               t["kv_indices"], t["kv_last_page_lens"][:1], 1, return_lse=True, lse=lse[:1],
                               metadata=meta)
        self.assertEqual(calls, [])
        meta.close()


# ---- both emulator targets in one process --------------------------------------------------------

class TestTwoTargets(Case):
    def test_gfx942_and_gfx950_calls_in_one_process(self):
        # The same fp8 bits are other numbers on the two targets (e4m3fnuz vs e4m3fn): a call that
        # ran on the other target's runtime or reused its cached plan would miss the reference.
        p = make_problem(np.random.default_rng(130), "fp8", "fp8", 16, [90, 41])
        results = {}
        for target in ("gfx942", "gfx950", "gfx942"):
            o, _ = run(p, sm_scale=SCALE, emulator_target=target)
            with reference_target(target):
                self.assertClose(o, p, True)
            results.setdefault(target, o)
            np.testing.assert_array_equal(o, results[target])
        self.assertFalse(np.array_equal(results["gfx942"], results["gfx950"]))
        # The environment variable selects the target too (the cache keys on it).
        old = os.environ.get("MLA_EMULATOR_TARGET")
        try:
            for target in ("gfx942", "gfx950"):
                os.environ["MLA_EMULATOR_TARGET"] = target
                np.testing.assert_array_equal(run(p, sm_scale=SCALE)[0], results[target])
        finally:
            os.environ["MLA_EMULATOR_TARGET"] = old if old is not None else "gfx950"
        # Metadata objects of both targets side by side.
        m942 = get_mla_metadata_info(2, 1, 16, "fp8", "fp8", max_total_tokens=512, emulator_target="gfx942")
        m950 = get_mla_metadata_info(2, 1, 16, "fp8", "fp8", max_total_tokens=512, emulator_target="gfx950")
        for m, target in ((m942, "gfx942"), (m950, "gfx950")):
            self.assertEqual(m.runtime.target, target)
            get_mla_metadata(m, seq_lens=np.array([90, 41], np.int32))
            np.testing.assert_array_equal(run(p, sm_scale=SCALE, metadata=m)[0], results[target])
        with self.assertRaisesRegex(ValueError, r"emulator_target: 'gfx950', but metadata was made for gfx942"):
            run(p, sm_scale=SCALE, metadata=m942, emulator_target="gfx950")
        with self.assertRaisesRegex(ValueError, r"emulator_target: got 'gfx90a'; allowed gfx942 or gfx950"):
            run(p, sm_scale=SCALE, emulator_target="gfx90a")
        m942.close()
        m950.close()


# ---- fp8 flavour ---------------------------------------------------------------------------------

class TestFp8Flavour(Case):
    def test_raw_bits_of_another_flavour_are_refused(self):
        p = make_problem(np.random.default_rng(140), "fp8", "fp8", 16, [40])
        with self.assertRaisesRegex(ValueError, r"fp8_format: 'e4m3fnuz', but gfx950 reads fp8 as e4m3fn"):
            run(p, sm_scale=SCALE, fp8_format="e4m3fnuz", emulator_target="gfx950")
        with self.assertRaisesRegex(ValueError, r"fp8_format: 'e4m3fn', but gfx942 reads fp8 as e4m3fnuz"):
            run(p, sm_scale=SCALE, fp8_format="e4m3fn", emulator_target="gfx942")
        with self.assertRaisesRegex(ValueError, r"fp8_format: got 'e5m2'; allowed 'e4m3fnuz'"):
            run(p, sm_scale=SCALE, fp8_format="e5m2")
        # The target's own flavour, said or not, runs.
        o, _ = run(p, sm_scale=SCALE, fp8_format="e4m3fn", emulator_target="gfx950")
        with reference_target("gfx950"):
            self.assertClose(o, p, True)

    def test_a_byte_that_is_nan_in_the_targets_flavour(self):
        p = make_problem(np.random.default_rng(141), "fp8", "fp8", 16, [40, 12])
        q = p["q"].copy()
        q[1, 3, 7] = 0x7F  # e4m3fn NaN; +240 in e4m3fnuz: fnuz bits on gfx950
        with self.assertRaisesRegex(ValueError, r"q: byte 0x7F at \[1, 3, 7\] is NaN in e4m3fn, the fp8 gfx950 reads, "
                                                r"but a number in e4m3fnuz"):
            run(dict(p, q=q), sm_scale=SCALE, emulator_target="gfx950")
        q[0, 2, 1] = 0xFF  # the other e4m3fn NaN (-240 in e4m3fnuz), and the first of the two in q
        with self.assertRaisesRegex(ValueError, r"q: byte 0xFF at \[0, 2, 1\] is NaN in e4m3fn"):
            run(dict(p, q=q), sm_scale=SCALE, emulator_target="gfx950")
        q = p["q"].copy()
        q[0, 0, 5] = 0x80  # e4m3fnuz NaN; -0 in e4m3fn: fn bits on gfx942
        with self.assertRaisesRegex(ValueError, r"q: byte 0x80 at \[0, 0, 5\] is NaN in e4m3fnuz, the fp8 gfx942 reads"):
            run(dict(p, q=q), sm_scale=SCALE, emulator_target="gfx942")

    def test_the_nan_byte_scan_finds_the_first(self):
        from mla_decode.decode import _first_nan_byte
        rng = np.random.default_rng(143)
        for flavour, nans in (("float8_e4m3fn", (0x7F, 0xFF)), ("float8_e4m3fnuz", (0x80,))):
            for n in (1, 65535, 65536, 65537, 200003):
                a = rng.integers(0, 256, size=n, dtype=np.uint8)
                for b in nans:
                    a[a == b] = 0
                self.assertIsNone(_first_nan_byte(a, flavour))
                for pos in sorted({0, n // 2, 65535 % n, 65536 % n, n - 1}):
                    for b in nans:
                        c = a.copy()
                        c[pos] = b
                        c[-1] = nans[0]  # a later NaN byte: the first one is reported
                        self.assertEqual(_first_nan_byte(c, flavour), pos, (flavour, n, pos, b))

    def test_torch_float8_dtype_of_the_wrong_flavour(self):
        # Debian's torch 1.13 has no float8 dtype; the check is then run on a stand-in whose dtype
        # name is the wrong flavour's (the same code path reads Tensor.dtype).
        from mla_decode import _tensors
        from mla_decode.decode import _check_fp8_flavour
        fake = _tensors.Tensor(np.ones((1, 16, 576), np.uint8), "kv_buffer")
        fake.dtype = "float8_e4m3fnuz"
        with self.assertRaisesRegex(TypeError, r"kv_buffer: dtype torch.float8_e4m3fnuz, but gfx950 reads fp8 as "
                                               r"float8_e4m3fn"):
            _check_fp8_flavour([fake], "gfx950", None)
        fake.dtype = "float8_e4m3fn"
        _check_fp8_flavour([fake], "gfx950", None)
        fn, fnuz = getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e4m3fnuz", None)
        if fn is None or fnuz is None:
            return
        p = make_problem(np.random.default_rng(142), "fp8", "fp8", 16, [40])
        with self.assertRaisesRegex(TypeError, r"q: dtype torch.float8_e4m3fnuz, but gfx950"):
            mla_decode_fwd(torch.from_numpy(p["q"]).view(fnuz), torch.from_numpy(p["kv_buffer"]).view(fn),
                           torch.zeros(1, 16, 512, dtype=torch.bfloat16), *(torch.from_numpy(p[k]) for k in INDEX), 1,
                           emulator_target="gfx950")


# ---- the engines' shapes of the default catalog, end to end -------------------------------------

def expand(entry):
    """The kernels of one configs/*.json entry (lists are alternatives, as mlagen expands them)."""
    def as_list(v):
        return v if isinstance(v, list) else [v]
    keys = ("target", "heads", "q_dtype", "kv_dtype", "qseqlen", "page_size", "return_lse")
    out = [{}]
    for k in keys:
        out = [dict(o, **{k: v}) for o in out for v in as_list(entry.get(k, False if k == "return_lse" else None))]
    return out


class TestEngineShapes(Case):
    def test_every_kernel_of_engine_shapes_json(self):
        # configs/engine_shapes.json (part of the default catalog) is also built into this test's
        # catalog; each of its kernels runs a small problem on its target against the float64
        # reference in that target's fp8 flavour.
        path = os.path.join(os.environ["MLA_SOURCE_DIR"], "configs", "engine_shapes.json")
        with open(path) as f:
            entries = json.load(f)["kernels"]
        shapes = [k for e in entries for k in expand(e)]
        self.assertGreaterEqual(len(shapes), 10)
        for i, k in enumerate(shapes):
            with self.subTest(**k):
                page = k["page_size"]
                lens = [page + 5, k["qseqlen"] + 3] if page > 1 else [40, k["qseqlen"] + 3]
                p = make_problem(np.random.default_rng(200 + i), k["q_dtype"], k["kv_dtype"], k["heads"], lens,
                                 qseqlen=k["qseqlen"], page_size=page)
                o, lse = run(p, sm_scale=SCALE, return_lse=k["return_lse"], emulator_target=k["target"])
                with reference_target(k["target"]):
                    self.assertClose(o, p, k["kv_dtype"] == "fp8", lse)
                if not k["return_lse"]:
                    self.assertIsNone(lse)


# ---- the catalog cannot be taken for aiter's ----------------------------------------------------

class TestCatalogCsv(unittest.TestCase):
    def test_no_csv_aiter_codegen_would_read(self):
        # aiter's hsa/codegen.py reads every hsa/<gfx>/<module>/**/*.csv and takes a file with
        # knl_name and co_name columns as a kernel table (launched with its 368-byte args).
        root = os.environ["MLA_CATALOG_DIR"]
        mla_dirs = glob.glob(os.path.join(root, "hsa", "*", "mla"))
        self.assertTrue(mla_dirs, f"no hsa/<gfx>/mla under {root}")
        for d in mla_dirs:
            self.assertFalse(os.path.exists(os.path.join(d, "mla_asm.csv")), d)
            csvs = glob.glob(os.path.join(d, "**", "*.csv"), recursive=True)
            self.assertEqual([os.path.basename(c) for c in csvs], ["mlagen_kernels.csv"])
            with open(csvs[0]) as f:
                rows = list(csv.DictReader(f))
            header = set(rows[0].keys()) if rows else set()
            self.assertFalse({"knl_name", "co_name"} & header, header)
            self.assertFalse({"qType", "kvType", "Gqa", "qSeqLen"} & header, header)
            # catalog.json is the source of truth: every csv row is a kernel of it.
            with open(os.path.join(d, "catalog.json")) as f:
                names = {k["name"]: k for k in json.load(f)["kernels"]}
            for r in rows:
                k = names[r["kernel"]]
                self.assertEqual(r["code_object"], k["co"])
                self.assertEqual((int(r["heads"]), int(r["qseqlen"]), int(r["page_size"])),
                                 (k["shape"]["heads"], k["shape"]["qseqlen"], k["shape"]["page_size"]))


if __name__ == "__main__":
    unittest.main()
