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


def reference(p, target, row_lens=None, magnitude=None):
    """logits [batch * next_n, max_context_len] float64; NaN where nothing is defined (t >= the
    row's length). row_lens [batch, next_n] (DeepGEMM's 2-D context_lens) or None: context_lens.
    magnitude (a dict, optional) gets per row the largest sum over heads of |term| of its tokens."""
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
        terms = np.maximum(s, 0) * w[b * next_n:(b + 1) * next_n, :, None] * scale.astype(np.float64)
        logits = terms.sum(axis=1)
        for i in range(next_n):
            end = n if row_lens is None else min(int(row_lens[b][i]), m)
            out[b * next_n + i, :end] = logits[i, :end]
            if magnitude is not None:
                magnitude[b * next_n + i] = np.abs(terms[i, :, :end]).sum(axis=0).max() if end else 0.0
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
    def assertLogits(self, got, ref, ends, minus_inf_past_end, what, magnitude=None):
        """Row r: positions < ends[r] within 1e-5 x max|ref| of the row (over its defined positions),
        or of the row's largest sum over heads of |term| where that is larger (magnitude, from
        reference(): a row of one token whose terms cancel has a small logit but f32 sums of terms
        a thousand times larger; the kernel's error is ~1e-8 of them); positions >= ends[r] exactly
        -inf when minus_inf_past_end."""
        msg = f"{what} (MLA_TEST_SEED={SEED})"
        m = ref.shape[1]
        self.assertEqual((got.dtype, tuple(got.shape)), (torch.float32, ref.shape), msg)
        self.assertEqual(got.stride(), (-(-m // 256) * 256, 1), f"DeepGEMM's 256-aligned row stride {msg}")
        g = got.double().numpy()
        for r, end in enumerate(ends):
            defined = ~np.isnan(ref[r])
            amax = np.max(np.abs(ref[r][defined])) if defined.any() else 0.0
            if magnitude is not None:
                amax = max(amax, magnitude.get(r, 0.0))
            err = np.abs(g[r, :end] - ref[r, :end])
            self.assertTrue(np.all(err <= 1e-5 * amax), f"row {r}: max error {err.max() if end else 0} against "
                            f"1e-5 x {amax} {msg}")
            if minus_inf_past_end:
                self.assertTrue(np.all(np.isneginf(g[r, end:])), f"row {r}: not -inf at or past {end} {msg}")


class TestLogits(IndexerCase):
    def run_both(self, p, what, target=TARGET, **kw):
        """clean_logits False (every written position) and True (-inf from each causal end)."""
        magnitude = {}
        ref = reference(p, target, magnitude=magnitude)
        next_n, m = p["q"].shape[1], p["max_context_len"]
        written = [min(int(n), m) for n in p["context_lens"].tolist() for _ in range(next_n)]
        self.assertLogits(call(p, False, **kw), ref, written, False, what + ", clean_logits=False", magnitude)
        ends = causal_ends(p["context_lens"].tolist(), next_n, m)
        self.assertLogits(call(p, True, **kw), ref, ends, True, what + ", clean_logits=True", magnitude)

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



# ---- top-k: vLLM's top_k_per_row_decode (mla_decode.vllm_ops) ----------------------------------

def row_lengths(seq_lens, next_n, rows):
    """vLLM's length of each logits row: seq_lens [B] gives row r = b * next_n + i the causal end
    seq_lens[b] - next_n + i + 1, [B, next_n] gives seq_lens[b, i]; below 0 is 0."""
    lens = np.asarray(seq_lens)
    if lens.ndim == 2:
        return [max(int(x), 0) for x in lens.reshape(-1)[:rows]]
    return [max(int(lens[r // next_n]) - next_n + r % next_n + 1, 0) for r in range(rows)]


def expected_topk(values, length, k):
    """A row no longer than k: exactly 0 .. length - 1 then -1. Else the positions of the k largest
    of values[:length], ties to the lowest positions (a stable sort by value descending), sorted."""
    if length <= k:
        return np.concatenate([np.arange(length), np.full(k - length, -1)]).astype(np.int32)
    order = np.lexsort((np.arange(length), -values[:length].astype(np.float64)))
    return np.sort(order[:k]).astype(np.int32)


def random_logits(rng, lengths, columns, levels=0, pitch=None):
    """logits [rows, columns] float32 (a view of a [rows, pitch] buffer when pitch is given), row r
    random up to lengths[r] (standard normal, or `levels` distinct values: heavy ties; about one
    value in 97 -inf), NaN past it (a read of it shows)."""
    rows = len(lengths)
    buf = np.full((rows, pitch or columns), np.nan, np.float32)
    for r, n in enumerate(lengths):
        v = rng.standard_normal(n) if levels == 0 else (rng.integers(0, levels, n) - levels // 2) * 0.25
        v[rng.random(n) < 1 / 97] = -np.inf
        buf[r, :n] = v
    return torch.from_numpy(buf)[:, :columns]


class TopkCase(unittest.TestCase):
    def assertRows(self, indices, logits, lengths, k, what):
        """Each row as expected_topk (order-free past k), every entry distinct."""
        msg = f"{what} (MLA_TEST_SEED={SEED})"
        got, values = indices.numpy(), logits.numpy()
        for r, n in enumerate(lengths):
            want = expected_topk(values[r], n, k)
            row = got[r] if n <= k else np.sort(got[r])
            np.testing.assert_array_equal(row, want, f"row {r} of length {n}, k {k}: {msg}")


class TestTopK(TopkCase):
    def run_topk(self, logits, next_n, seq_lens, k, what, fn=vllm_ops.top_k_per_row_decode, extra_rows=2):
        """fn as vLLM calls it, with indices a [:rows] slice of a buffer whose rows past it hold a
        sentinel that must stay; the rows checked against NumPy."""
        rows = logits.shape[0]
        buf = torch.full((rows + extra_rows, k), 0x5A5A5A5A, dtype=torch.int32)
        indices = buf[:rows]
        fn(logits, next_n, seq_lens, indices, rows, logits.stride(0), logits.stride(1), k)
        self.assertTrue(bool((buf[rows:] == 0x5A5A5A5A).all()), f"{what}: rows past num_rows written")
        self.assertRows(indices, logits, row_lengths(seq_lens.numpy(), next_n, rows), k, what)
        return indices

    def test_continuous_values_k_2048(self):
        # Rows longer than, one past, equal to and shorter than k, one token, none; the logits a
        # view whose rows are 256-aligned (fp8_paged_mqa_logits' layout).
        lens = [3000, 2049, 2048, 700, 1, 0]
        logits = random_logits(rng_for(20), lens, 3000, pitch=3072)
        self.run_topk(logits, 1, torch.tensor(lens, dtype=torch.int32), 2048, "continuous, k 2048")

    def test_heavy_ties_next_n_2(self):
        # Four distinct values: the k-th value is shared by hundreds of positions, the lowest
        # win. next_n 2: row 2b ends one before row 2b + 1 (rows of 256 = k and 257 = k + 1).
        lens = [1500, 257, 64, 1000]
        logits = random_logits(rng_for(21), row_lengths(lens, 2, 8), 1500, levels=4)
        self.run_topk(logits, 2, torch.tensor(lens, dtype=torch.int32), 256, "4 levels, next_n 2")

    def test_forty_levels_next_n_4_and_k_1(self):
        lens = [900, 3]  # request 1: its rows end at 0, 1, 2, 3
        logits = random_logits(rng_for(22), row_lengths(lens, 4, 8), 900, levels=40)
        for k in (1, 100):
            self.run_topk(logits, 4, torch.tensor(lens, dtype=torch.int32), k, f"40 levels, next_n 4, k {k}")

    def test_two_dimensional_seq_lens(self):
        # vLLM's [B, next_n] form: each row its own length (not the causal offsets); -3 is 0.
        seq_lens = torch.tensor([[97, 150], [33, -3], [400, 2]], dtype=torch.int32)
        logits = random_logits(rng_for(23), row_lengths(seq_lens.numpy(), 2, 6), 400, levels=8)
        self.run_topk(logits, 2, seq_lens, 64, "[B, next_n] seq_lens")

    def test_registered_op(self):
        # torch.ops.mla_decode.top_k_per_row_decode: vLLM's schema, indices written in place; on
        # meta tensors it checks shapes and writes nothing.
        lens = [300, 20]
        logits = random_logits(rng_for(24), lens, 300)
        op = torch.ops.mla_decode.top_k_per_row_decode
        self.assertIn("Tensor(a!) indices", str(op.default._schema))
        self.run_topk(logits, 1, torch.tensor(lens, dtype=torch.int32), 32, "the registered op", fn=op)
        meta = dict(device="meta")
        op(torch.empty((4, 300), **meta), 2, torch.empty(2, dtype=torch.int32, **meta),
           torch.empty((4, 32), dtype=torch.int32, **meta), 4, 300, 1, 32)

    def test_seq_lens_never_read_on_the_host(self):
        lens = [500, 40]
        logits = random_logits(rng_for(25), row_lengths(lens, 2, 4), 500)
        guarded = torch.tensor(lens, dtype=torch.int32).as_subclass(NoHostRead)
        indices = torch.empty((4, 128), dtype=torch.int32)
        vllm_ops.top_k_per_row_decode(logits, 2, guarded, indices, 4, logits.stride(0), 1, 128)
        self.assertRows(indices, logits, row_lengths(lens, 2, 4), 128, "guarded seq_lens")

    def test_refusals_name_the_argument(self):
        logits, seq_lens = torch.zeros((4, 100)), torch.tensor([100, 50], dtype=torch.int32)
        indices = torch.zeros((4, 16), dtype=torch.int32)
        good = dict(logits=logits, next_n=2, seq_lens=seq_lens, indices=indices, num_rows=4, stride0=100, stride1=1,
                    topk=16)
        cases = [
            (ValueError, r"stride1: got 2; allowed 1 \(the kernel reads each row's logits contiguously",
             dict(stride1=2)),
            (ValueError, r"logits: rows must be dense", dict(logits=torch.zeros((100, 4)).t(), stride0=1)),
            (ValueError, r"stride0: got 128, but logits.stride\(0\) is 100", dict(stride0=128)),
            (TypeError, r"logits: dtype torch.float16", dict(logits=logits.half())),
            (TypeError, r"seq_lens: dtype torch.int64", dict(seq_lens=seq_lens.long())),
            (ValueError, r"seq_lens: expected \[batch\] or \[batch, next_n\]", dict(seq_lens=seq_lens[:1])),
            (ValueError, r"seq_lens: expected", dict(seq_lens=seq_lens.view(2, 1))),
            (ValueError, r"num_rows: 3 is not a multiple of next_n = 2", dict(num_rows=3)),
            (ValueError, r"num_rows: got 5; allowed an int in 0..4", dict(num_rows=5)),
            (ValueError, r"indices: expected \[>= num_rows, topk\] = \[>= num_rows, 16\]",
             dict(indices=indices[:, :8])),
            (TypeError, r"indices: dtype torch.int64", dict(indices=indices.long())),
            (ValueError, r"topk: got 0; allowed an int in 1..65536", dict(topk=0)),
            (ValueError, r"next_n: got 9; allowed an int in 1..8", dict(next_n=9)),
            (TypeError, r"logits: expected a torch.Tensor \(vLLM's contract\)", dict(logits=logits.numpy())),
        ]
        for exc, pattern, change in cases:
            with self.subTest(pattern=pattern), self.assertRaisesRegex(exc, pattern):
                vllm_ops.top_k_per_row_decode(**dict(good, **change))


# ---- the index rows sparse MLA reads: deep_gemm.indexer_topk_indices -----------------------------

def random_block_table(rng, batch, width, extra=3):
    """Distinct random block ids for every request's width blocks (of a cache of batch * width +
    extra blocks)."""
    return torch.from_numpy(rng.permutation(batch * width + extra)[:batch * width].astype(np.int32)
                            .reshape(batch, width))


def positions_of(slots, table, page, length, what):
    """The token positions of a row's cache slots through its block table row (-1 stays -1); a
    slot of no token before `length` fails."""
    position = {int(table[j]) * page + o: j * page + o for j in range(-(-length // page)) for o in range(page)}
    out = []
    for x in slots.tolist():
        if x == -1:
            out.append(-1)
            continue
        if x not in position or position[x] >= length:
            raise AssertionError(f"{what}: slot {x} is no token before {length} of the row's request")
        out.append(position[x])
    return np.array(out, np.int32)


class TestIndexerTopkIndices(TopkCase):
    """indexer_topk_indices against NumPy's top-k of fp8_paged_mqa_logits' own logits (their
    values are TestLogits' subject), the slots mapped back through the numbering table."""

    def check(self, p, k, what, context_lens=None, page=None, table=None, **kw):
        lens = p["context_lens"] if context_lens is None else context_lens
        next_n, m = p["q"].shape[1], p["max_context_len"]
        got = deep_gemm.indexer_topk_indices(p["q"], p["kv_cache"], p["weights"], lens, p["block_table"], m,
                                             topk=k, page_block_size=page, mla_block_table=table, **kw)
        batch = p["q"].shape[0]
        self.assertEqual((got.dtype, tuple(got.shape)), (torch.int32, (batch, next_n, k)), what)
        logits = call(p, False, lens, **kw)
        lengths = row_lengths(lens.as_subclass(torch.Tensor).numpy(), next_n, batch * next_n)  # NoHostRead too
        numbering = p["block_table"] if table is None else table
        page = p["kv_cache"].shape[1] if page is None else page
        positions = np.stack([positions_of(got[r // next_n, r % next_n], numbering[r // next_n], page, n,
                                           f"{what}, row {r}") for r, n in enumerate(lengths)])
        self.assertRows(torch.from_numpy(positions), logits, lengths, k, what)
        return got

    def test_indexer_numbering_block_64(self):
        # No MLA table: the indexer cache's slots. Rows longer and shorter than k (-1 padding).
        p = make_problem(rng_for(30), [600, 37, 64, 1], next_n=1, heads=64, block_size=64, max_context_len=640)
        self.check(p, 64, "indexer's numbering, k 64")
        self.check(p, 512, "indexer's numbering, k 512", page=64)  # page_block_size = the indexer's: accepted

    def test_mla_table_of_its_own_next_n_2(self):
        # Indexer block size 1 (vLLM ROCm's), the MLA cache's blocks of 64 in their own random
        # order; the MLA table exactly ceil(max_context_len / 64) wide (200 is no multiple of 256).
        rng = rng_for(31)
        p = make_problem(rng, [200, 45, 1, 0], next_n=2, heads=32, block_size=1, max_context_len=200)
        self.check(p, 64, "MLA page 64, next_n 2", page=64, table=random_block_table(rng, 4, 4))

    def test_two_dimensional_context_lens(self):
        # [B, next_n] lengths: each row its own end, the MLA table (page 16) a view of a wider one.
        rng = rng_for(32)
        p = make_problem(rng, [150, 90], next_n=2, heads=64, block_size=64, max_context_len=160)
        wider = random_block_table(rng, 2, 14)
        self.check(p, 48, "[B, next_n] lengths, MLA page 16", torch.tensor([[97, 150], [33, 90]], dtype=torch.int32),
                   page=16, table=wider[:, :10])

    def test_context_lens_never_read_on_the_host(self):
        rng = rng_for(33)
        p = make_problem(rng, [300, 20], next_n=2, heads=32, block_size=64, max_context_len=320)
        self.check(p, 128, "guarded context_lens", p["context_lens"].as_subclass(NoHostRead), page=32,
                   table=random_block_table(rng, 2, 10))

    def test_flash_mla_reads_the_rows(self):
        # The rows go to flash_mla_with_kvcache unchanged: its output equals the float64 attention
        # over the slots of NumPy's top-k (the MLA cache bf16, 16 heads, page 16: the catalog's on gfx950).
        rng, target = rng_for(34), dict(emulator_target="gfx950")
        p = make_problem(rng, [150, 70], next_n=2, heads=32, block_size=64, max_context_len=160)
        table = random_block_table(rng, 2, 10)
        indices = self.check(p, 64, "for flash_mla", page=16, table=table, **target)
        q = tsp.bf16_tensor(rng, (2, 2, 16, 576))
        k_cache = tsp.bf16_tensor(rng, (23, 16, 1, 576))
        out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, flash_mla.get_mla_metadata()[0],
                                                    indices=indices, softmax_scale=0.06, **target)
        logits, lengths = call(p, False, **target).numpy(), row_lengths([150, 70], 2, 4)
        want = np.full((2, 2, 64), -1, np.int32)
        for r, n in enumerate(lengths):
            t = expected_topk(logits[r], n, 64)
            t = t[t >= 0]
            want[r // 2, r % 2, :t.size] = table[r // 2, t // 16].numpy() * 16 + t % 16
        case = tsp.SparseCase()
        case.assertMatches(*tsp.by_row(out, lse), *tsp.flash_reference(q, k_cache, torch.from_numpy(want), None, 0.06),
                           what="flash_mla over indexer_topk_indices")

    def test_refusals_name_the_argument(self):
        rng = rng_for(35)
        p = make_problem(rng, [40, 9], next_n=1, heads=32, block_size=64, max_context_len=64)
        table = random_block_table(rng, 2, 4)

        def refuses(exc, pattern, **kw):
            args = dict(topk=16)
            args.update(kw)
            with self.assertRaisesRegex(exc, pattern):
                deep_gemm.indexer_topk_indices(p["q"], p["kv_cache"], p["weights"], p["context_lens"],
                                               p["block_table"], 64, **args)

        refuses(ValueError, r"topk: got 0", topk=0)
        refuses(ValueError, r"page_block_size: got 16, but without mla_block_table the slots are numbered through "
                r"block_table", page_block_size=16)
        refuses(ValueError, r"page_block_size: required with mla_block_table", mla_block_table=table)
        refuses(ValueError, r"page_block_size: got 61; allowed a power of two", page_block_size=61,
                mla_block_table=table)
        refuses(ValueError, r"mla_block_table: expected \[batch, max_blocks\] = \[2, >= ceil\(max_context_len / "
                r"page_block_size\) = 4\]", page_block_size=16, mla_block_table=table[:, :3])
        refuses(TypeError, r"mla_block_table: dtype torch.int64", page_block_size=16, mla_block_table=table.long())
        refuses(ValueError, r"mla_block_table: rows must be dense", page_block_size=16,
                mla_block_table=torch.zeros((4, 2), dtype=torch.int32).t())

if __name__ == "__main__":
    unittest.main()
