"""Sparse MLA decode (DSA) from Python: aiter's fixed-stride form (mla_decode_fwd with
get_mla_metadata_info(..., topk=)) and FlashMLA's contract (mla_decode.flash_mla), on the
emulator with CPU tensors and NumPy arrays.

Every expected value comes from the float64 reference written here (gather the valid slots of
each query row, softmax, weighted sum), never from the code under test. Inputs are drawn fresh
from a seed chosen per run (MLA_TEST_SEED to replay one; every failure message names it), and
outputs are poisoned (NaN bits) before each run. Run by ctest ("python: mla_decode") beside
test_mla_decode.py, over the sparse kernels of tests/python/catalog.json.
"""
import json
import os
import secrets
import unittest

import numpy as np
import torch

import test_mla_decode as tm
from mla_decode import MlaInputError, get_mla_metadata, get_mla_metadata_info, mla_decode_fwd
from mla_decode import flash_mla

SEED = int(os.environ.get("MLA_TEST_SEED") or secrets.randbits(32))
INT32_MAX = 2**31 - 1


def rng_for(test_id):
    return np.random.default_rng([SEED, test_id])


def bf16_tensor(rng, shape):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32) * 0.5).to(torch.bfloat16)


def reference(qf, kvf, row_entries, scale):
    """softmax(q k^T * scale) v in float64 over each row's valid entries (0 <= slot < slots;
    -1 and slots past the cache drop out): qf [rows, heads, 576], kvf [slots, 576] (dequantised),
    row_entries[t] the entries row t counts. A row without one: o = 0, lse = +inf (both peers')."""
    rows, heads = qf.shape[:2]
    o, lse = np.zeros((rows, heads, 512)), np.full((rows, heads), np.inf)
    for t, entries in enumerate(row_entries):
        valid = entries[(entries >= 0) & (entries < kvf.shape[0])]
        if valid.size == 0:
            continue
        s = qf[t] @ kvf[valid].T * scale
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m)
        o[t] = p @ kvf[valid, :512] / p.sum(axis=1, keepdims=True)
        lse[t] = (m + np.log(p.sum(axis=1, keepdims=True)))[:, 0]
    return o, lse


def random_rows(rng, rows, topk, slots, masked=0.25):
    """[rows, topk] slots with a fraction `masked` at random positions -1 or past the cache."""
    idx = rng.integers(0, slots, (rows, topk)).astype(np.int64)
    hit = rng.random((rows, topk)) < masked
    idx[hit] = rng.choice(np.array([-1, -1, slots, slots + 7, INT32_MAX]), hit.sum())
    return idx.astype(np.int32)


class SparseCase(unittest.TestCase):
    def assertMatches(self, o, lse, ref_o, ref_lse, fp8=False, what=""):
        """o (float64) against the reference: d and max error as test_mla_decode's thresholds;
        empty rows exactly (o 0, lse +inf); lse (when given) within 1e-3 (bf16) / 0.1 (fp8)."""
        msg = f"{what} (MLA_TEST_SEED={SEED})"
        self.assertFalse(np.isnan(o).any(), f"o has unwritten (NaN) entries {msg}")
        empty = np.isposinf(ref_lse)
        np.testing.assert_array_equal(o[empty], 0.0, err_msg=msg)
        full = ~empty.all(axis=1)
        if full.any():
            got, ref = o[full], ref_o[full]
            d = 1 - 2 * np.sum(got * ref) / np.sum(got ** 2 + ref ** 2)
            err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
            self.assertLess(d, 1e-3 if fp8 else 1e-4, f"d = {d} {msg}")
            self.assertLess(err, 0.06 if fp8 else 0.02, f"max error {err} of max|ref| {msg}")
        if lse is not None:
            lse = np.asarray(lse, np.float64)
            np.testing.assert_array_equal(np.isposinf(lse), empty, err_msg=f"empty rows' lse {msg}")
            if (~empty).any():
                self.assertLess(np.max(np.abs(lse[~empty] - ref_lse[~empty])), 0.1 if fp8 else 1e-3, msg)


# ---- aiter's form: mla_decode_fwd with sparse metadata ------------------------------------------

def aiter_problem(rng, requests, request_rows, topk, lengths, num_pages, page_size, heads=16):
    """aiter's sparse tensors (torch bf16): kv_indptr the per-request cumsum of `lengths` (any
    size; min(length, topk) entries of each row count), kv_indices [rows * topk] fixed stride whose
    counted entries hold slots with -1 / past-the-cache ones at random positions and whose tail
    (past the count) holds GARBAGE: in-cache slots that must not be read."""
    rows, slots = requests * request_rows, num_pages * page_size
    idx = random_rows(rng, rows, topk, slots)
    counts = np.repeat(np.minimum(lengths, topk), request_rows)
    garbage = rng.integers(0, slots, (rows, topk)).astype(np.int32)
    tail = np.arange(topk)[None, :] >= counts[:, None]
    idx[tail] = garbage[tail]
    return dict(
        q=bf16_tensor(rng, (rows, heads, 576)),
        kv=bf16_tensor(rng, (num_pages, page_size, 1, 576)),
        qo_indptr=torch.arange(requests + 1, dtype=torch.int32) * request_rows,
        kv_indptr=torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)),
        kv_indices=torch.from_numpy(idx.reshape(-1).copy()),
        last=torch.ones(requests, dtype=torch.int32),
        entries=[idx[t, :counts[t]] for t in range(rows)], page_size=page_size)


def aiter_call(p, meta, **kw):
    o = torch.full((p["q"].shape[0], p["q"].shape[1], 512), float("nan"), dtype=torch.bfloat16)
    return mla_decode_fwd(p["q"], p["kv"], o, p["qo_indptr"], p["kv_indptr"], p["kv_indices"], p["last"], 1,
                          p["page_size"], sm_scale=0.07, metadata=meta, **kw)


def aiter_reference(p):
    return reference(p["q"].double().numpy(), p["kv"].double().reshape(-1, 576).numpy(), p["entries"], 0.07)


class TestAiterSparse(SparseCase):
    def test_fixed_stride_rows_shorter_than_topk_page_64(self):
        # 3 requests x 2 query rows, topk 128, a cache of 6 blocks x 64 slots; request 0 counts 50
        # entries (its tails hold garbage slots), request 1 counts 128 of its 300 (aiter's min),
        # request 2 none (its rows: o 0, lse +inf, aiter's reduce value for an empty row).
        p = aiter_problem(rng_for(1), 3, 2, 128, [50, 300, 0], num_pages=6, page_size=64)
        before = p["kv_indices"].clone()
        meta = get_mla_metadata_info(3, 2, 16, torch.bfloat16, torch.bfloat16, return_lse=True, topk=128)
        get_mla_metadata(meta, p["qo_indptr"], p["kv_indptr"], p["last"])
        o, lse = aiter_call(p, meta, return_lse=True)
        self.assertEqual((lse.dtype, tuple(lse.shape)), (torch.float32, (6, 16)))
        self.assertMatches(o.double().numpy(), lse.numpy(), *aiter_reference(p), what="aiter bf16 page 64")
        self.assertTrue(torch.equal(p["kv_indices"], before), "the caller's kv_indices were modified")
        self.assertTrue(np.isposinf(lse[4:].numpy()).all())

    def test_fp8_numpy_page_1_one_row_per_request(self):
        # vLLM's form: qo_indptr = arange (each query row its own request), the cache flattened to
        # [slots, 1, 1, 576]; fp8 bits in NumPy arrays, a scale tensor read on the device; no lse.
        rng = rng_for(2)
        rows, topk, slots = 5, 96, 200
        idx = random_rows(rng, rows, topk, slots)
        idx[3] = -1  # a row with no valid slot
        lengths = np.array([96, 40, 500, 96, 7])
        counts = np.minimum(lengths, topk)
        for t in range(rows):
            idx[t, counts[t]:] = rng.integers(0, slots, topk - counts[t])  # garbage past the count
        q, kv = tm.random_bits(rng, "fp8", (rows, 16, 576)), tm.random_bits(rng, "fp8", (slots, 1, 1, 576))
        o = np.full((rows, 16, 512), 0xFFFF, np.uint16)
        qo = np.arange(rows + 1, dtype=np.int32)
        kvp = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        meta = get_mla_metadata_info(rows, 1, 16, "fp8", "fp8", topk=topk)
        get_mla_metadata(meta, qo, kvp, np.ones(rows, np.int32), q_scale=1.5)
        _, lse = mla_decode_fwd(q, kv, o, qo, kvp, idx.reshape(-1), np.ones(rows, np.int32), 1, sm_scale=0.05,
                                q_scale=1.5, kv_scale=np.array([0.75], np.float32), metadata=meta)
        self.assertIsNone(lse)
        table = tm.fp8_table(tm.TARGET)
        ref_o, ref_lse = reference(table[q] * 1.5, table[kv].reshape(slots, 576) * 0.75,
                                   [idx[t, :counts[t]] for t in range(rows)], 0.05)
        self.assertMatches(tm.bf16_to_f64(o), None, ref_o, ref_lse, fp8=True, what="aiter fp8 numpy")

    def test_the_plan_is_made_once_per_row_count(self):
        # Two steps with other lengths and other indices on one metadata: no new plan (the
        # plan depends on rows and topk only), each step against the reference; a third step
        # with another row count plans again.
        meta = get_mla_metadata_info(4, 1, 16, "bf16", "bf16", return_lse=True, topk=64)
        plans = []
        for step, lengths in enumerate(([64, 10, 33], [5, 64, 64], [64, 64])):
            p = aiter_problem(rng_for(10 + step), len(lengths), 1, 64, lengths, num_pages=150, page_size=1)
            get_mla_metadata(meta, p["qo_indptr"], p["kv_indptr"], p["last"])
            plans.append((meta.plan_updates, meta.describe_json()))
            o, lse = aiter_call(p, meta, return_lse=True)
            self.assertMatches(o.double().numpy(), lse.numpy(), *aiter_reference(p), what=f"step {step}")
        self.assertEqual(plans[0], plans[1])
        self.assertEqual([n for n, _ in plans], [1, 1, 2])
        self.assertEqual(meta.plan_info()["batch"], 2)
        self.assertTrue(json.loads(plans[0][1]))

    def test_through_the_registered_op(self):
        p = aiter_problem(rng_for(3), 2, 1, 64, [64, 20], num_pages=100, page_size=1)
        meta = get_mla_metadata_info(2, 1, 16, "bf16", "bf16", return_lse=True, topk=64)
        get_mla_metadata(meta, p["qo_indptr"], p["kv_indptr"], p["last"])
        o = torch.full((2, 16, 512), float("nan"), dtype=torch.bfloat16)
        lse = torch.full((2, 16), float("nan"))
        torch.ops.mla_decode.decode_fwd(p["q"], p["kv"], o, p["qo_indptr"], 1, p["kv_indptr"], p["kv_indices"],
                                        p["last"], sm_scale=0.07, lse=lse, metadata_handle=meta.handle)
        self.assertMatches(o.double().numpy(), lse.numpy(), *aiter_reference(p), what="registered op")

    def test_gpu_tensors_read_nothing_on_the_host(self):
        # With GPU tensors (test_engines.gpu_stand_in: torch says cuda:0, mla_decode is recorded)
        # the call reads no tensor on the host: the kernels get the metadata's masked copy, built
        # by device ops from the caller's kv_indices and kv_indptr.
        from test_engines import gpu_stand_in
        p = aiter_problem(rng_for(6), 2, 1, 64, [20, 64], num_pages=100, page_size=1)
        meta = get_mla_metadata_info(2, 1, 16, "bf16", "bf16", return_lse=True, topk=64)
        get_mla_metadata(meta, p["qo_indptr"], p["kv_indptr"], p["last"])
        aiter_call(p, meta, return_lse=True)  # allocates the (CPU) buffers the stand-in then uses
        buffer = meta._index_buffers["torch"].indices
        buffer.fill_(7)
        saved_numpy = torch.Tensor.numpy

        def host_read(tensor):
            raise AssertionError("a host read (numpy()) on the path of a GPU tensor")

        with gpu_stand_in(meta) as calls:
            torch.Tensor.numpy = host_read
            try:
                aiter_call(p, meta, return_lse=True, lse=torch.zeros(2, 16))
            finally:
                torch.Tensor.numpy = saved_numpy
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0][0]["kv_indices"], buffer.data_ptr())
        self.assertEqual(calls[0][0]["num_pages"], 100)
        want = p["kv_indices"].clone()
        want[20:64] = -1  # row 0 counts 20 of its 64 entries
        self.assertTrue(torch.equal(buffer[:128], want[:128]))

    def test_check_indices(self):
        # Off by default: a slot past the cache is masked. On: the first counted entry that is
        # neither -1 nor a slot is named; garbage past a row's count is never read, so never named.
        p = aiter_problem(rng_for(4), 2, 1, 64, [30, 64], num_pages=100, page_size=1)
        flat = p["kv_indices"]
        flat[:64] = torch.where(torch.arange(64) < 30, flat[:64].clamp(min=0, max=99), torch.tensor(5000))
        flat[64:] = flat[64:].clamp(min=-1, max=99)
        meta = get_mla_metadata_info(2, 1, 16, "bf16", "bf16", return_lse=True, topk=64)
        get_mla_metadata(meta, p["qo_indptr"], p["kv_indptr"], p["last"])
        aiter_call(p, meta, return_lse=True, check_indices=True)  # the tail's 5000 is past row 0's count
        flat[64 + 17] = 100
        aiter_call(p, meta, return_lse=True)
        with self.assertRaisesRegex(MlaInputError, r"kv_indices\[81\] = 100 is neither -1"):
            aiter_call(p, meta, return_lse=True, check_indices=True)
        flat[64 + 17] = -7
        with self.assertRaisesRegex(MlaInputError, r"kv_indices\[81\] = -7"):
            aiter_call(p, meta, return_lse=True, check_indices=True)

    def test_refusals(self):
        p = aiter_problem(rng_for(5), 2, 1, 64, [64, 64], num_pages=100, page_size=1)
        meta = get_mla_metadata_info(2, 1, 16, "bf16", "bf16", return_lse=True, topk=64)
        get_mla_metadata(meta, seq_lens=np.array([64], np.int32))  # 1 row planned
        with self.assertRaisesRegex(ValueError, r"last planned for 1 query rows"):
            aiter_call(p, meta, return_lse=True)
        get_mla_metadata(meta, p["qo_indptr"], p["kv_indptr"], p["last"])
        short = dict(p, kv_indices=p["kv_indices"][:100])
        with self.assertRaisesRegex(ValueError, r"kv_indices: 100 entries, but the sparse metadata was made for "
                                                r"topk 64: 2 query rows x topk 64 = 128"):
            aiter_call(short, meta, return_lse=True)
        with self.assertRaisesRegex(ValueError, r"metadata: made for \(q, kv, heads, lse\)"):
            aiter_call(p, meta, return_lse=False)
        with self.assertRaisesRegex(ValueError, r"qo_indptr: 6 query rows, but the metadata holds"):
            get_mla_metadata(meta, torch.tensor([0, 3, 6], dtype=torch.int32), p["kv_indptr"], p["last"])
        with self.assertRaisesRegex(ValueError, r"the same number of query rows"):
            get_mla_metadata(meta, torch.tensor([0, 1, 3], dtype=torch.int32), p["kv_indptr"], p["last"])
        with self.assertRaisesRegex(ValueError, r"topk: got 0"):
            get_mla_metadata_info(2, 1, 16, "bf16", "bf16", topk=0)
        with self.assertRaisesRegex(ValueError, r"check_indices: applies to sparse metadata"):
            mla_decode_fwd(p["q"], p["kv"], torch.empty(2, 16, 512, dtype=torch.bfloat16), p["qo_indptr"],
                           p["kv_indptr"], p["kv_indices"], p["last"], 1, check_indices=True)


# ---- FlashMLA's contract: mla_decode.flash_mla ---------------------------------------------------

def flash_problem(rng, b, s_q, heads, topk, blocks, page_block_size):
    """FlashMLA's sparse inputs: q [b, s_q, h, 576] bf16, k_cache [blocks, pbs, 1, 576] bf16,
    indices [b, s_q, topk] (-1 / past-the-cache at random positions, one row entirely -1)."""
    slots = blocks * page_block_size
    idx = random_rows(rng, b * s_q, topk, slots).reshape(b, s_q, topk)
    idx[b - 1, s_q - 1] = -1
    return (bf16_tensor(rng, (b, s_q, heads, 576)), bf16_tensor(rng, (blocks, page_block_size, 1, 576)),
            torch.from_numpy(idx))


def flash_reference(q, k_cache, idx, topk_length, scale):
    """The reference by query row (b * s_q + s): o [rows, h, 512], lse [rows, h]."""
    b, s_q, h, _ = q.shape
    counts = [int(topk_length[i]) if topk_length is not None else idx.shape[2] for i in range(b)]
    entries = [idx[i, s, :counts[i]].numpy() for i in range(b) for s in range(s_q)]
    return reference(q.double().numpy().reshape(b * s_q, h, 576), k_cache.double().reshape(-1, 576).numpy(),
                     entries, scale)


def by_row(out, lse):
    """FlashMLA's out [b, s_q, h, 512] and lse [b, h, s_q] by query row: [rows, h, 512], [rows, h]."""
    b, s_q, h, _ = out.shape
    return out.double().numpy().reshape(b * s_q, h, 512), lse.numpy().transpose(0, 2, 1).reshape(b * s_q, h)


class TestFlashMla(SparseCase):
    def run_flash(self, *args, **kw):
        out, lse = flash_mla.flash_mla_with_kvcache(*args, **kw)
        self.assertEqual((out.dtype, lse.dtype), (torch.bfloat16, torch.float32))
        self.assertEqual(tuple(lse.shape), (out.shape[0], out.shape[2], out.shape[1]))
        return by_row(out, lse)

    def test_two_tokens_topk_length_page_64_and_a_reused_scheduler(self):
        # s_q = 2 with its own index row per token, 16 heads, page_block_size 64, topk_length
        # shorter than topk for one request (garbage slots past it); then the same scheduler
        # object with other indices: no new plan.
        rng = rng_for(20)
        q, k_cache, idx = flash_problem(rng, 2, 2, 16, 128, 4, 64)
        topk_length = torch.tensor([77, 128], dtype=torch.int32)
        idx[0, :, 77:] = torch.from_numpy(rng.integers(0, 256, (2, 51)).astype(np.int32))
        sched, num_splits = flash_mla.get_mla_metadata()
        self.assertIsNone(num_splits)
        out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, sched, indices=idx,
                                                    topk_length=topk_length, softmax_scale=0.06)
        self.assertEqual((tuple(out.shape), tuple(lse.shape)), ((2, 2, 16, 512), (2, 16, 2)))
        self.assertEqual(lse.stride(), (32, 1, 16))  # FlashMLA's transposed view of [b, s_q, h_q]
        self.assertMatches(*by_row(out, lse), *flash_reference(q, k_cache, idx, topk_length, 0.06),
                           what="flash step 1")
        self.assertTrue(np.isposinf(lse[1, :, 1].numpy()).all())
        plan = sched.tile_scheduler_metadata
        updates = plan.plan_updates
        idx2 = torch.from_numpy(random_rows(rng, 4, 128, 256).reshape(2, 2, 128))
        out2, lse2 = self.run_flash(q, k_cache, None, None, 512, sched, indices=idx2, topk_length=topk_length,
                                    softmax_scale=0.06)
        self.assertIs(sched.tile_scheduler_metadata, plan)
        self.assertEqual(plan.plan_updates, updates)
        self.assertMatches(out2, lse2, *flash_reference(q, k_cache, idx2, topk_length, 0.06), what="flash step 2")

    def test_page_1_default_scale_without_topk_length(self):
        q, k_cache, idx = flash_problem(rng_for(21), 3, 1, 16, 64, 300, 1)
        out, lse = self.run_flash(q, k_cache, None, None, 512, flash_mla.get_mla_metadata()[0], indices=idx)
        self.assertMatches(out, lse, *flash_reference(q, k_cache, idx, None, 576 ** -0.5), what="flash page 1")

    def test_64_heads_on_gfx942_page_61(self):
        # FlashMLA's own head count, on the other target, at a page_block_size of FlashMLA's tests.
        q, k_cache, idx = flash_problem(rng_for(22), 1, 2, 64, 64, 2, 61)
        out, lse = self.run_flash(q, k_cache, None, None, 512, flash_mla.get_mla_metadata()[0], indices=idx,
                                  softmax_scale=0.05, emulator_target="gfx942")
        self.assertMatches(out, lse, *flash_reference(q, k_cache, idx, None, 0.05), what="flash h64 gfx942")

    def test_older_get_mla_metadata_as_sglang_calls_it(self):
        # SGLang's flashmla_kv: get_mla_metadata(cache_seqlens, s_q * h_q, 1, num_heads_q=, is_fp8_kvcache=,
        # topk=), the pair passed back as tile_scheduler_metadata / num_splits, copy_() and sliced
        # under graphs, one scheduler shared by batches of several sizes.
        rng = rng_for(23)
        sched, num_splits = flash_mla.get_mla_metadata(torch.ones(8, dtype=torch.int32), 16, 1, num_heads_q=16,
                                                       is_fp8_kvcache=False, topk=64)
        sched.copy_(flash_mla.get_mla_metadata(torch.ones(8, dtype=torch.int32), 16, 1, 16, False, 64)[0])
        num_splits.copy_(num_splits[0:3])
        for b in (2, 3):
            q, k_cache, idx = flash_problem(rng, b, 1, 16, 64, 3, 64)
            seqlens, block_table = torch.full((b,), 64, dtype=torch.int32), torch.empty((b, 0), dtype=torch.int32)
            out, lse = self.run_flash(q=q, k_cache=k_cache, cache_seqlens=seqlens, head_dim_v=512,
                                      tile_scheduler_metadata=sched, num_splits=num_splits[:b + 1],
                                      softmax_scale=0.05, indices=idx, block_table=block_table)
            self.assertMatches(out, lse, *flash_reference(q, k_cache, idx, None, 0.05), what=f"older form b={b}")
        q, k_cache, idx = flash_problem(rng, 1, 1, 16, 32, 3, 64)
        with self.assertRaisesRegex(ValueError, r"get_mla_metadata\(\) was given topk = 64, but this call has 32"):
            flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, sched, num_splits, indices=idx)
        with self.assertRaisesRegex(ValueError, r"topk: None asks for dense FlashMLA.*mla_decode_fwd"):
            flash_mla.get_mla_metadata(torch.ones(8, dtype=torch.int32), 16, 1)
        with self.assertRaisesRegex(ValueError, r"num_heads_q: required"):
            flash_mla.get_mla_metadata(torch.ones(8, dtype=torch.int32), 16, 1, topk=64)

    def test_check_indices(self):
        q, k_cache, idx = flash_problem(rng_for(24), 2, 2, 16, 64, 2, 64)
        idx = idx.clamp(min=-1, max=127)
        topk_length = torch.tensor([40, 64], dtype=torch.int32)
        idx[0, 1, 50] = 9999  # past topk_length[0]: never read, never named
        call = dict(indices=idx, topk_length=topk_length, check_indices=True)
        flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, flash_mla.get_mla_metadata()[0], **call)
        idx[1, 0, 3] = 128
        with self.assertRaisesRegex(MlaInputError, r"indices\[1, 0, 3\] = 128 is neither -1"):
            flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, flash_mla.get_mla_metadata()[0], **call)

    def test_refusals_name_the_argument(self):
        q, k_cache, idx = flash_problem(rng_for(25), 1, 1, 16, 64, 2, 64)
        sched = flash_mla.get_mla_metadata()[0]

        def call(**kw):
            args = dict(q=q, k_cache=k_cache, block_table=None, cache_seqlens=None, head_dim_v=512,
                        tile_scheduler_metadata=sched, indices=idx)
            args.update(kw)
            return flash_mla.flash_mla_with_kvcache(**args)

        with self.assertRaisesRegex(ValueError, r"indices: None asks for dense FlashMLA.*mla_decode_fwd"):
            call(indices=None)
        with self.assertRaisesRegex(ValueError, r"^k_cache: expected \[num_blocks, page_block_size, 1, 656\] "
                                                r"\(fp8_ds_mla bytes with is_fp8_kvcache=True\), got shape "
                                                r"\[2, 64, 1, 576\]; a last dimension of 576 is the bf16 cache: "
                                                r"pass is_fp8_kvcache=False"):
            call(is_fp8_kvcache=True)
        for name, value in (("causal", True), ("num_splits", torch.zeros(2, dtype=torch.int32)),
                            ("attn_sink", torch.zeros(16)), ("extra_k_cache", k_cache),
                            ("extra_indices_in_kvcache", idx), ("extra_topk_length", torch.ones(1, dtype=torch.int32)),
                            ("head_dim_v", 256)):
            with self.subTest(name=name), self.assertRaisesRegex(ValueError, rf"^{name}: "):
                call(**{name: value})
        with self.assertRaisesRegex(TypeError, r"tile_scheduler_metadata: expected the FlashMLASchedMeta"):
            call(tile_scheduler_metadata=torch.zeros(4, dtype=torch.int32))
        with self.assertRaisesRegex(NotImplementedError, r"q: head_dim 512"):
            call(q=q[..., :512])
        with self.assertRaisesRegex(TypeError, r"q: dtype torch.float32"):
            call(q=q.float())
        call()  # FlashMLA's rule: a scheduler is reused only with unchanged shapes
        q2, k2, idx2 = flash_problem(rng_for(26), 2, 1, 16, 64, 2, 64)
        with self.assertRaisesRegex(ValueError, r"first used with b = 1, now 2"):
            call(q=q2, indices=idx2)


if __name__ == "__main__":
    unittest.main()
