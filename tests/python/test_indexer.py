"""DeepGEMM's DSA indexer entries (mla_decode.deep_gemm: get_paged_mqa_logits_metadata,
fp8_paged_mqa_logits), vLLM's top_k_per_row_decode (mla_decode.vllm_ops) and the two in one call
(deep_gemm.indexer_topk_indices: cache slots for sparse MLA) on the emulator with CPU torch
tensors, over the kernels of configs/dsa_indexer.json (built into the Python test catalog,
tests/python/CMakeLists.txt; every entry implies the dsa_topk_per_row_decode kernel).

Every expected logit comes from the float64 reference written here: the fp8 bytes decoded by a
table of the target's e4m3 flavour (test_mla_decode.fp8_table; checked against torch's float8
dtypes when this torch has them), each token's f32 scale read from its block's tail, the per-head
dot products, ReLU, weights and sum in float64. Inputs are drawn fresh from a seed chosen per run
(MLA_TEST_SEED to replay one); the cache's unused blocks and slots hold random bytes (fp8 NaN codes
included), so a read of them shows. Every expected top-k comes from NumPy here: a stable sort by
value descending, then position (ties at the k-th value to the lowest positions, as the kernel
documents), compared as sets (neither vLLM nor the kernel orders a row); rows no longer than k
exactly 0 .. len - 1 then -1. Logits past each row's end are NaN, so a read of them shows. Run by
ctest ("python: mla_decode").
"""
import os
import secrets
import unittest

import numpy as np
import torch

import test_capi_layout
import test_mla_decode as tm
import test_sparse as tsp
from mla_decode import MlaInputError
from mla_decode import deep_gemm, flash_mla, vllm_ops

SEED = int(os.environ.get("MLA_TEST_SEED") or secrets.randbits(32))
TARGET = os.environ.get("MLA_EMULATOR_TARGET", "gfx950")
DIM, TOKEN_BYTES = 128, 132


def rng_for(test_id):
    return np.random.default_rng([SEED, test_id])


def fp8_bytes(rng, shape):
    """Finite e4m3 bytes of either sign in both flavours: magnitudes 0x01..0x76 (never a NaN code
    of either, never 0x80)."""
    return ((1 + rng.integers(0, 0x76, shape)) | (rng.integers(0, 2, shape) << 7)).astype(np.uint8)


def make_problem(rng, lens, next_n, heads, block_size, max_context_len, extra_blocks=3):
    """DeepGEMM's tensors (torch CPU): each request's blocks at random ids of a larger cache,
    block_table wider than needed with -1 past each request's blocks; every byte of the cache first
    random (garbage), then each request's tokens written as block_size x 128 fp8 values followed by
    block_size f32 scales per block (DeepGEMM's kv_cache_cast_to_fp8 layout)."""
    batch = len(lens)
    per = [-(-n // block_size) for n in lens]
    num_blocks = sum(per) + extra_blocks
    ids = rng.permutation(num_blocks).astype(np.int32)
    width = -(-max_context_len // block_size) + 2
    table = np.full((batch, width), -1, np.int32)
    kv = rng.integers(0, 256, (num_blocks, block_size * TOKEN_BYTES)).astype(np.uint8)
    used = 0
    for b, n in enumerate(lens):
        table[b, :per[b]] = ids[used:used + per[b]]
        used += per[b]
        t = np.arange(n)
        blk, off = table[b, t // block_size], t % block_size
        kv[blk[:, None], off[:, None] * DIM + np.arange(DIM)] = fp8_bytes(rng, (n, DIM))
        scales = (2.0 ** rng.uniform(-9, -3, n) * rng.uniform(0.5, 1, n)).astype("<f4")
        kv[blk[:, None], block_size * DIM + off[:, None] * 4 + np.arange(4)] = scales.view(np.uint8).reshape(n, 4)
    return dict(
        q=torch.from_numpy(fp8_bytes(rng, (batch, next_n, heads, DIM))),
        kv_cache=torch.from_numpy(kv.reshape(num_blocks, block_size, 1, TOKEN_BYTES)),
        weights=torch.from_numpy((rng.standard_normal((batch * next_n, heads)) * 0.125).astype(np.float32)),
        context_lens=torch.tensor(lens, dtype=torch.int32),
        block_table=torch.from_numpy(table),
        max_context_len=max_context_len)


def reference(p, target, row_lens=None):
    """logits [batch * next_n, max_context_len] float64; NaN where nothing is defined (t >= the
    row's length). row_lens [batch, next_n] (DeepGEMM's 2-D context_lens) or None: context_lens."""
    table = tm.fp8_table(target)
    q = table[p["q"].numpy()]
    batch, next_n, heads, _ = q.shape
    kv = p["kv_cache"].numpy().reshape(p["kv_cache"].shape[0], -1)
    block_size = p["kv_cache"].shape[1]
    w = p["weights"].numpy().astype(np.float64)
    lens, bt, m = p["context_lens"].numpy(), p["block_table"].numpy(), p["max_context_len"]
    out = np.full((batch * next_n, m), np.nan)
    for b in range(batch):
        n = min(int(lens[b]), m)
        t = np.arange(n)
        blk, off = bt[b, t // block_size], t % block_size
        k = table[kv[blk[:, None], off[:, None] * DIM + np.arange(DIM)]]
        scale = kv[blk[:, None], block_size * DIM + off[:, None] * 4 + np.arange(4)].copy().view("<f4")[:, 0]
        s = np.einsum("ihd,td->iht", q[b], k)
        logits = (np.maximum(s, 0) * w[b * next_n:(b + 1) * next_n, :, None]).sum(axis=1) * scale.astype(np.float64)
        for i in range(next_n):
            end = n if row_lens is None else min(int(row_lens[b][i]), m)
            out[b * next_n + i, :end] = logits[i, :end]
    return out


def causal_ends(lens, next_n, m):
    """DeepGEMM's clean_logits end of each row: context_lens[b] - next_n + i + 1, within [0, m]."""
    return [min(max(int(n) - next_n + i + 1, 0), m) for n in lens for i in range(next_n)]


def call(p, clean_logits, context_lens=None, **kw):
    lens = p["context_lens"] if context_lens is None else context_lens
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, p["kv_cache"].shape[1], 80)
    return deep_gemm.fp8_paged_mqa_logits(p["q"], p["kv_cache"], p["weights"], lens, p["block_table"], meta,
                                          p["max_context_len"], clean_logits=clean_logits, **kw)


class IndexerCase(unittest.TestCase):
    def assertLogits(self, got, ref, ends, minus_inf_past_end, what):
        """Row r: positions < ends[r] within 1e-5 x max|ref| of the row (over its defined positions);
        positions >= ends[r] exactly -inf when minus_inf_past_end."""
        msg = f"{what} (MLA_TEST_SEED={SEED})"
        m = ref.shape[1]
        self.assertEqual((got.dtype, tuple(got.shape)), (torch.float32, ref.shape), msg)
        self.assertEqual(got.stride(), (-(-m // 256) * 256, 1), f"DeepGEMM's 256-aligned row stride {msg}")
        g = got.double().numpy()
        for r, end in enumerate(ends):
            defined = ~np.isnan(ref[r])
            amax = np.max(np.abs(ref[r][defined])) if defined.any() else 0.0
            err = np.abs(g[r, :end] - ref[r, :end])
            self.assertTrue(np.all(err <= 1e-5 * amax), f"row {r}: max error {err.max() if end else 0} against "
                            f"1e-5 x {amax} {msg}")
            if minus_inf_past_end:
                self.assertTrue(np.all(np.isneginf(g[r, end:])), f"row {r}: not -inf at or past {end} {msg}")


class TestLogits(IndexerCase):
    def run_both(self, p, what, target=TARGET, **kw):
        """clean_logits False (every written position) and True (-inf from each causal end)."""
        ref = reference(p, target)
        next_n, m = p["q"].shape[1], p["max_context_len"]
        written = [min(int(n), m) for n in p["context_lens"].tolist() for _ in range(next_n)]
        self.assertLogits(call(p, False, **kw), ref, written, False, what + ", clean_logits=False")
        ends = causal_ends(p["context_lens"].tolist(), next_n, m)
        self.assertLogits(call(p, True, **kw), ref, ends, True, what + ", clean_logits=True")

    def test_block_64_next_n_1(self):
        # 64 heads (DeepSeek-V3.2); a request across two 512-token chunks ending mid-block (600), one
        # shorter than a tile (37, not a multiple of 32), one exactly a block, a single token.
        p = make_problem(rng_for(1), [600, 37, 64, 1], next_n=1, heads=64, block_size=64, max_context_len=640)
        self.run_both(p, "block 64, next_n 1")

    def test_block_1_next_n_2(self):
        # vLLM ROCm's block size 1, MTP with 2 rows, 32 heads (GLM-5): a request as long as
        # max_context_len, one of 45, a single token (row 0's causal end is 0: all -inf), an empty one.
        # block_table is a view of a wider table (its row stride is passed, as DeepGEMM's).
        p = make_problem(rng_for(2), [200, 45, 1, 0], next_n=2, heads=32, block_size=1, max_context_len=200)
        table = p["block_table"]
        wider = torch.full((table.shape[0], table.shape[1] + 5), 7, dtype=torch.int32)
        wider[:, :table.shape[1]] = table
        p["block_table"] = wider[:, :table.shape[1]]
        self.assertFalse(p["block_table"].is_contiguous())
        self.run_both(p, "block 1, next_n 2")

    def test_block_64_next_n_2_on_gfx942(self):
        # The same bytes mean other numbers in e4m3fnuz: the reference decodes them as gfx942 reads them.
        p = make_problem(rng_for(3), [129, 70, 3], next_n=2, heads=64, block_size=64, max_context_len=150)
        self.run_both(p, "gfx942, block 64, next_n 2", target="gfx942", emulator_target="gfx942")

    def test_two_dimensional_context_lens(self):
        # DeepGEMM's [batch, next_n] form (its only one since 2026-04): each row its own
        # length, the last the request's; clean_logits puts -inf from each row's own end.
        rng = rng_for(4)
        p = make_problem(rng, [150, 33], next_n=2, heads=64, block_size=64, max_context_len=160)
        row_lens = torch.tensor([[97, 150], [33, 33]], dtype=torch.int32)
        ref = reference(p, TARGET, row_lens.tolist())
        ends = row_lens.reshape(-1).tolist()
        self.assertLogits(call(p, False, row_lens), ref, ends, False, "2-D context_lens, clean_logits=False")
        self.assertLogits(call(p, True, row_lens), ref, ends, True, "2-D context_lens, clean_logits=True")

    def test_float8_dtype_when_torch_has_it(self):
        # The target's torch float8 dtype runs the same bytes bit for bit; the table the reference
        # decodes with equals torch's float8 -> float64 conversion.
        flavour = {"gfx942": "float8_e4m3fnuz", "gfx950": "float8_e4m3fn"}[TARGET]
        dtype = getattr(torch, flavour, None)
        if dtype is None:
            self.skipTest(f"torch {torch.__version__} has no {flavour}")
        every = torch.arange(256, dtype=torch.int32).to(torch.uint8)
        np.testing.assert_array_equal(every.view(dtype).double().numpy(), tm.fp8_table(TARGET))
        p = make_problem(rng_for(5), [90, 17], next_n=1, heads=32, block_size=64, max_context_len=100)
        raw = call(p, True)
        p["q"] = p["q"].view(dtype)
        self.assertTrue(torch.equal(call(p, True), raw))

    def test_context_lens_never_read_on_the_host(self):
        # Under graph capture nothing may read context_lens on the host: a tensor whose host reads
        # raise goes through the metadata and both clean_logits forms (the emulator reads it
        # through its device address, as the GPU kernel would).
        p = make_problem(rng_for(6), [80, 20], next_n=2, heads=32, block_size=64, max_context_len=96)
        ref, next_n = reference(p, TARGET), 2
        self.assertLogits(call(p, True, p["context_lens"].as_subclass(NoHostRead)), ref,
                          causal_ends([80, 20], next_n, 96), True, "guarded context_lens [batch]")
        row_lens = [[79, 80], [20, 20]]
        guarded = torch.tensor(row_lens, dtype=torch.int32).as_subclass(NoHostRead)
        self.assertLogits(call(p, True, guarded), reference(p, TARGET, row_lens), [79, 80, 20, 20], True,
                          "guarded context_lens [batch, next_n]")


class NoHostRead(torch.Tensor):
    def _refuse(self, *args, **kwargs):
        raise AssertionError("context_lens was read on the host")

    item = tolist = numpy = __bool__ = __int__ = __index__ = __float__ = _refuse


class TestMetadata(unittest.TestCase):
    def test_shape_and_zeros(self):
        for lens in (torch.tensor([5, 300], dtype=torch.int32), torch.zeros((3, 2), dtype=torch.int32)):
            meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 132)
            self.assertEqual((meta.dtype, tuple(meta.shape), meta.device), (torch.int32, (133, 2), lens.device))
            self.assertEqual(int(meta.abs().sum()), 0)

    def test_refusals(self):
        lens = torch.tensor([5], dtype=torch.int32)
        for block_kv in (48, 0, 128, 3):
            with self.assertRaisesRegex(ValueError, rf"block_kv: got {block_kv}; allowed 1, 2, 4"):
                deep_gemm.get_paged_mqa_logits_metadata(lens, block_kv, 132)
        with self.assertRaisesRegex(TypeError, r"context_lens: dtype torch.int64"):
            deep_gemm.get_paged_mqa_logits_metadata(lens.long(), 64, 132)
        with self.assertRaisesRegex(ValueError, r"num_sms: got 0"):
            deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 0)
        with self.assertRaisesRegex(ValueError, r"indices: the varlen form"):
            deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 132, indices=lens)

    def test_ctypes_mirror_covers_the_indexer_args(self):
        # test_capi_layout.py checks every struct _capi mirrors against the header.
        self.assertIn("mla_indexer_logits_args", test_capi_layout.mirrored_structs())
        self.assertIn("mla_indexer_topk_args", test_capi_layout.mirrored_structs())


class TestRefusals(unittest.TestCase):
    """Each bad input: a ValueError / TypeError naming the argument, before any launch."""

    def setUp(self):
        self.p = make_problem(rng_for(7), [40, 9], next_n=1, heads=32, block_size=64, max_context_len=64)

    def refuses(self, exc, pattern, clean_logits=False, **changes):
        args = dict(self.p, **changes)
        meta = args.pop("schedule_meta", torch.zeros((81, 2), dtype=torch.int32))
        kw = {k: args.pop(k) for k in ("indices", "fp8_format", "emulator_target") if k in args}
        with self.assertRaisesRegex(exc, pattern):
            deep_gemm.fp8_paged_mqa_logits(args["q"], args["kv_cache"], args["weights"], args["context_lens"],
                                           args["block_table"], meta, args["max_context_len"], clean_logits, **kw)

    def test_kv_cache(self):
        kv = self.p["kv_cache"]
        self.refuses(ValueError, r"kv_cache: last dim 128, expected 132 \(128 fp8 values and one f32 scale per token\)",
                     kv_cache=kv[..., :128].contiguous())
        self.refuses(ValueError, r"kv_cache: block size \(dim 1\): got 48", kv_cache=kv[:, :48].contiguous())
        self.refuses(TypeError, r"kv_cache: dtype torch.int8", kv_cache=kv.view(torch.int8))
        self.refuses(ValueError, r"kv_cache: must be contiguous", kv_cache=kv[::2])

    def test_q(self):
        q = self.p["q"]
        self.refuses(ValueError, r"q: must be contiguous", q=torch.cat([q, q], dim=3)[..., :128])
        self.refuses(TypeError, r"q: dtype torch.float32 is not allowed", q=q.float())
        self.refuses(ValueError, r"q: expected \[batch, next_n, heads, 128\]", q=q[..., :64].contiguous())

    def test_q_flavour(self):
        # Raw bits of the other flavour show as its NaN bytes (e4m3fn's -0, 0x80, is e4m3fnuz's NaN);
        # fp8_format names a flavour the target does not read.
        q = self.p["q"].clone()
        q[1, 0, 3, 5] = 0x80
        self.refuses(ValueError, r"q: byte 0x80 at \[1, 0, 3, 5\] is NaN in e4m3fnuz, the fp8 gfx942 reads", q=q,
                     emulator_target="gfx942")
        self.refuses(ValueError, r"fp8_format: 'e4m3fn', but gfx942 reads fp8 as e4m3fnuz", fp8_format="e4m3fn",
                     emulator_target="gfx942")
        other = {"gfx942": "float8_e4m3fn", "gfx950": "float8_e4m3fnuz"}[TARGET]
        if hasattr(torch, other):
            self.refuses(TypeError, rf"q: dtype torch.{other}, but {TARGET} reads fp8 as",
                         q=self.p["q"].view(getattr(torch, other)))

    def test_weights_context_lens_block_table_schedule(self):
        w = self.p["weights"]
        self.refuses(ValueError, r"weights: expected \[batch \* next_n, heads\] = \[2, 32\] float32, got shape "
                     r"\[2, 64\]", weights=torch.zeros((2, 64)))
        self.refuses(TypeError, r"weights: dtype torch.float16", weights=w.half())
        self.refuses(TypeError, r"context_lens: dtype torch.int64", context_lens=self.p["context_lens"].long())
        self.refuses(ValueError, r"context_lens: expected \[batch\] = \[2\]",
                     context_lens=torch.ones(3, dtype=torch.int32))
        self.refuses(ValueError, r"block_table: expected \[batch, max_blocks\] = \[2, >= ceil\(max_context_len / "
                     r"block_size\) = 2\]", max_context_len=100, block_table=self.p["block_table"][:, :1])
        self.refuses(ValueError, r"schedule_meta: expected", schedule_meta=torch.zeros(81, dtype=torch.int32))
        self.refuses(ValueError, r"max_context_len: got 0", max_context_len=0)
        self.refuses(ValueError, r"indices: the varlen form", indices=self.p["context_lens"])
        self.refuses(TypeError, r"q: expected a torch.Tensor \(DeepGEMM's contract\)", q=self.p["q"].numpy())

    def test_shape_without_a_kernel(self):
        # 16 heads: not in configs/dsa_indexer.json; the C API's message names the kernel and the fix.
        p = make_problem(rng_for(8), [10], next_n=1, heads=16, block_size=64, max_context_len=64)
        with self.assertRaisesRegex(MlaInputError, r"no dsa_indexer_logits_fp8_h16_nn1_pg64 kernel"):
            call(p, False)


if __name__ == "__main__":
    unittest.main()
