"""Sparse MLA decode over FlashMLA's fp8_ds_mla cache from Python (flash_mla_with_kvcache(...,
is_fp8_kvcache=True) and aiter's form with kv_dtype 'fp8_ds_mla'), graph-style replay, duplicate
indices and the refusals, on the emulator (both targets).

The cache is quantised here as FlashMLA's tests/quant.py quantize_k_cache does it: per token and
128-value tile, scale = amax / 448 (f32) rounded up to a power of two, latent = (x / scale) to
e4m3fn (round to nearest even, the sign kept: -0 is byte 0x80), rope copied as bf16; and once with
the scale left at amax / 448 (SGLang's arbitrary scales). Expected values come from the float64
attention over the values FlashMLA's dequantize_k_cache gives (e4m3fn x scale in f32, rounded to
bf16), written here; inputs are fresh per run (MLA_TEST_SEED replays one), outputs poisoned.
Bounds (FlashMLA's reference): d = 1 - 2 sum(xy) / sum(x^2 + y^2) <= 2e-5, max error <= 1% of
max|ref|, lse within 2e-3; rows with no valid index exactly out 0, lse +inf.
"""
import unittest

import numpy as np
import torch

import test_mla_decode as tm
from test_sparse import SEED, by_row, random_rows, reference, rng_for
from mla_decode import get_mla_metadata, get_mla_metadata_info, mla_decode_fwd
from mla_decode import flash_mla

E4M3FN = tm.fp8_table("gfx950")  # OCP e4m3fn, the latent bytes' format on every target
POSITIVE = E4M3FN[:0x7F]         # codes 0x00..0x7E: every finite non-negative value, increasing
NAN16 = float("nan")


# ---- FlashMLA's fp8_ds_mla, in NumPy ------------------------------------------------------------

def to_bf16(x):
    """float32 -> the nearest bf16 (ties to even), as float32 (torch's .to(torch.bfloat16))."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def encode_e4m3fn(x):
    """float32 -> e4m3fn bytes, nearest with ties to even (torch's .to(torch.float8_e4m3fn));
    the sign is kept (-0 and negatives that round to 0 give 0x80); |x| <= 448 here."""
    v = np.abs(x).astype(np.float64)
    i = np.searchsorted(POSITIVE, v)
    hi, lo = np.clip(i, 0, 0x7E), np.clip(i - 1, 0, 0x7E)
    d_hi, d_lo = POSITIVE[hi] - v, v - POSITIVE[lo]
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo).astype(np.uint8)
    return code | (np.signbit(x).astype(np.uint8) << 7)


def quantize(kv, pow2):
    """kv [slots, 576] (bf16 values as float32) -> [slots, 656] fp8_ds_mla bytes: quant.py's
    quantize_k_cache (pow2: the scale rounded up to a power of two, clamped at 1e-4 first), or the
    scale amax / 448 as it is (SGLang's)."""
    slots = kv.shape[0]
    out = np.zeros((slots, 656), np.uint8)
    scales = np.zeros((slots, 4), np.float32)
    for tile in range(4):
        x = kv[:, tile * 128:(tile + 1) * 128]
        s = np.abs(x).max(axis=1) / np.float32(448.0)
        s = np.exp2(np.ceil(np.log2(np.maximum(s, 1e-4)))).astype(np.float32) if pow2 else np.maximum(s, 1e-30)
        scales[:, tile] = s
        out[:, tile * 128:(tile + 1) * 128] = encode_e4m3fn(x / s[:, None])
    out[:, 512:528] = scales.view(np.uint8)
    out[:, 528:] = (kv[:, 512:].view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    return out


def dequantize(entries):
    """[slots, 656] bytes -> [slots, 576] float64: quant.py's dequantize_k_cache (e4m3fn x scale in
    f32, stored as bf16), the values FlashMLA's reference attends over."""
    scales = np.ascontiguousarray(entries[:, 512:528]).view(np.float32)
    latent = E4M3FN[entries[:, :512]].astype(np.float32) * np.repeat(scales, 128, axis=1)
    rope = (np.ascontiguousarray(entries[:, 528:]).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.concatenate([to_bf16(latent), rope], axis=1).astype(np.float64)


def random_cache(rng, blocks, page, pow2):
    """A [blocks, page, 1, 656] uint8 fp8_ds_mla cache of random bf16 values (tiles of magnitudes 0.5
    to 2, 1% of the latent exactly -0 and 1% +0), and its FlashMLA-dequantised [slots, 576]."""
    slots = blocks * page
    kv = rng.standard_normal((slots, 576)).astype(np.float32)
    kv[:, :512] *= np.repeat(np.exp2(rng.integers(-1, 2, (slots, 4))), 128, axis=1).astype(np.float32)
    u = rng.random((slots, 512))
    kv[:, :512][u < 0.01] = -0.0
    kv[:, :512][(u >= 0.01) & (u < 0.02)] = 0.0
    entries = quantize(to_bf16(kv), pow2)
    return torch.from_numpy(entries.reshape(blocks, page, 1, 656)), dequantize(entries)


def bf16(rng, shape):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32) * 0.5).to(torch.bfloat16)


def flash_entries(idx, topk_length):
    """Each query row's counted index entries (FlashMLA's: all, or the first topk_length[b])."""
    b, s_q, topk = idx.shape
    counts = [int(topk_length[i]) if topk_length is not None else topk for i in range(b)]
    return [idx[i, s, :counts[i]].numpy() for i in range(b) for s in range(s_q)]


def bits(t):
    """A tensor's bits for a bit-for-bit comparison (NaN / inf compared as bits)."""
    return t.contiguous().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


class DsMlaCase(unittest.TestCase):
    def assertClose(self, o, lse, ref_o, ref_lse, what):
        """The issue's bounds against FlashMLA's reference; empty rows exactly."""
        msg = f"{what} (MLA_TEST_SEED={SEED})"
        self.assertFalse(np.isnan(o).any(), f"o has unwritten (NaN) entries {msg}")
        empty = np.isposinf(ref_lse)
        np.testing.assert_array_equal(o[empty], 0.0, err_msg=msg)
        np.testing.assert_array_equal(np.isposinf(lse), empty, err_msg=f"empty rows' lse {msg}")
        got, ref = o[~empty], ref_o[~empty]
        self.assertTrue(got.size > 0, msg)
        d = 1 - 2 * np.sum(got * ref) / np.sum(got ** 2 + ref ** 2)
        err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
        lse_err = np.max(np.abs(lse[~empty] - ref_lse[~empty]))
        self.assertLessEqual(d, 2e-5, f"d = {d} {msg}")
        self.assertLessEqual(err, 0.01, f"max error {err} of max|ref| {msg}")
        self.assertLessEqual(lse_err, 2e-3, f"lse error {lse_err} {msg}")


# ---- FlashMLA: flash_mla_with_kvcache(..., is_fp8_kvcache=True) ---------------------------------

class TestFlashMlaDsMla(DsMlaCase):
    def run_case(self, test_id, target, pow2, b, s_q, topk, blocks, page, dtype, with_lengths):
        rng = rng_for(test_id)
        k_cache, kvf = random_cache(rng, blocks, page, pow2)
        raw = k_cache.numpy()[..., :512]
        self.assertGreater(int((raw == 0x80).sum()), 0, "no -0 (0x80) byte in the cache")
        if not pow2:  # amax / 448 puts every tile's largest value on +-448
            self.assertGreater(int(((raw & 0x7F) == 0x7E).sum()), 0)
        q = bf16(rng, (b, s_q, 16, 576))
        idx = torch.from_numpy(random_rows(rng, b * s_q, topk, blocks * page).reshape(b, s_q, topk))
        idx[b - 1, s_q - 1] = -1  # a row with no valid index
        topk_length = None
        if with_lengths:
            topk_length = torch.from_numpy(rng.integers(topk // 2, topk + 1, b).astype(np.int32))
        out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache.view(dtype), None, None, 512,
                                                    flash_mla.get_mla_metadata()[0], softmax_scale=0.07,
                                                    is_fp8_kvcache=True, indices=idx, topk_length=topk_length,
                                                    emulator_target=target)
        ref_o, ref_lse = reference(q.double().numpy().reshape(b * s_q, 16, 576), kvf, flash_entries(idx, topk_length),
                                   0.07)
        self.assertClose(*by_row(out, lse), ref_o, ref_lse, f"{target} pow2={pow2} {dtype}")
        return q, k_cache, idx, topk_length, out, lse

    def test_power_of_two_scales_gfx950_page_64(self):
        # FlashMLA's quantisation (tests/quant.py), 2 requests x 2 tokens, topk_length; the bytes
        # through FlashMLA's float8_e4m3fn dtype too when this torch has it (bit for bit).
        q, k_cache, idx, lengths, out, lse = self.run_case(100, "gfx950", True, 2, 2, 128, 4, 64, torch.uint8, True)
        if hasattr(torch, "float8_e4m3fn"):
            out2, lse2 = flash_mla.flash_mla_with_kvcache(q, k_cache.view(torch.float8_e4m3fn), None, None, 512,
                                                          flash_mla.get_mla_metadata()[0], softmax_scale=0.07,
                                                          is_fp8_kvcache=True, indices=idx, topk_length=lengths)
            self.assertTrue(torch.equal(bits(out), bits(out2)) and torch.equal(bits(lse), bits(lse2)))

    def test_arbitrary_scales_gfx942_int8_page_61(self):
        # SGLang's amax / 448 scales (the values x scale are not bf16 numbers: rounded as FlashMLA
        # rounds them), int8 bytes, gfx942 (e4m3fnuz MFMA: the e4m3fn bytes 0x80 and 0x7E/0xFE fixed up).
        self.run_case(101, "gfx942", False, 3, 1, 64, 3, 61, torch.int8, False)

    def test_power_of_two_scales_gfx942_page_1(self):
        self.run_case(102, "gfx942", True, 2, 1, 96, 300, 1, torch.uint8, False)

    def test_duplicate_indices_are_attended_twice(self):
        # Each index entry is a token of the softmax (FlashMLA's reference): a slot three times in
        # a row weighs three times. The reference that drops duplicates is far outside the bounds.
        rng = rng_for(103)
        k_cache, kvf = random_cache(rng, 2, 64, True)
        q = bf16(rng, (2, 1, 16, 576))
        idx = torch.from_numpy(random_rows(rng, 2, 64, 128, masked=0.1).reshape(2, 1, 64))
        idx[0, 0, :48] = 5  # slot 5 48 times, beside 16 others
        idx[1, 0, ::2] = idx[1, 0, 1::2]  # every slot of row 1 twice
        out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, None, None, 512, flash_mla.get_mla_metadata()[0],
                                                    softmax_scale=0.07, is_fp8_kvcache=True, indices=idx)
        qf = q.double().numpy().reshape(2, 16, 576)
        ref_o, ref_lse = reference(qf, kvf, flash_entries(idx, None), 0.07)
        self.assertClose(*by_row(out, lse), ref_o, ref_lse, "duplicates")
        once_o, once_lse = reference(qf, kvf, [np.unique(e) for e in flash_entries(idx, None)], 0.07)
        self.assertGreater(np.max(np.abs(once_o[0] - ref_o[0])), 0.05 * np.max(np.abs(ref_o)))
        self.assertGreater(np.min(np.abs(once_lse[1] - ref_lse[1])), np.log(2) - 0.01)  # twice each: + ln 2


# ---- replay: one captured op list over 20 steps ------------------------------------------------

class TestReplay(DsMlaCase):
    def test_twenty_steps_of_new_indices_bit_for_bit_planned_once(self):
        # A graph's op list, captured once over fixed buffers: the registered op with one sparse
        # metadata (aiter's form, fp8_ds_mla) and FlashMLA's call with one reused scheduler. Every
        # step writes new q, new indices (-1 and past-the-cache slots at random places) and new
        # lengths (0 some steps: empty rows) into the buffers and replays the list; both results
        # must equal bit for bit a fresh mla_decode_fwd with fresh metadata on copies of the inputs,
        # and nothing is planned again (plan_updates stays 1). Step 0 also against the reference.
        rng = rng_for(110)
        requests, request_rows, topk, heads, scale = 2, 2, 64, 16, 0.07
        rows = requests * request_rows
        k_cache, kvf = random_cache(rng, 3, 64, True)
        q = torch.empty(rows, heads, 576, dtype=torch.bfloat16)
        kv_indices = torch.empty(rows * topk, dtype=torch.int32)
        kv_indptr = torch.zeros(requests + 1, dtype=torch.int32)
        qo_indptr = torch.arange(requests + 1, dtype=torch.int32) * request_rows
        last = torch.ones(requests, dtype=torch.int32)
        o = torch.empty(rows, heads, 512, dtype=torch.bfloat16)
        lse = torch.empty(rows, heads)
        meta = get_mla_metadata_info(requests, request_rows, heads, torch.bfloat16, "fp8_ds_mla", return_lse=True,
                                     topk=topk)
        get_mla_metadata(meta, qo_indptr, torch.tensor([0, topk, 2 * topk], dtype=torch.int32), last)
        sched = flash_mla.get_mla_metadata()[0]
        flash = {}

        def flash_call():
            flash["out"], flash["lse"] = flash_mla.flash_mla_with_kvcache(
                q.view(requests, request_rows, heads, 576), k_cache, None, None, 512, sched, softmax_scale=scale,
                is_fp8_kvcache=True, indices=kv_indices.view(requests, request_rows, topk),
                topk_length=(kv_indptr[1:] - kv_indptr[:-1]).clamp(max=topk))

        captured = [lambda: o.fill_(NAN16), lambda: lse.fill_(NAN16),
                    lambda: torch.ops.mla_decode.decode_fwd(q, k_cache, o, qo_indptr, 1, kv_indptr, kv_indices, last,
                                                            page_size=64, sm_scale=scale, lse=lse,
                                                            metadata_handle=meta.handle),
                    flash_call]
        for step in range(20):
            lengths = rng.integers(0, topk + 20, requests)
            if step % 7 == 3:
                lengths[step % requests] = 0
            q.copy_(bf16(rng, (rows, heads, 576)))
            kv_indices.copy_(torch.from_numpy(random_rows(rng, rows, topk, 192).reshape(-1)))
            kv_indptr.copy_(torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)))
            for op in captured:
                op()
            fresh = get_mla_metadata_info(requests, request_rows, heads, "bf16", "fp8_ds_mla", return_lse=True,
                                          topk=topk)
            get_mla_metadata(fresh, qo_indptr.clone(), kv_indptr.clone(), last.clone())
            o2 = torch.full_like(o, NAN16)
            _, lse2 = mla_decode_fwd(q.clone(), k_cache.clone(), o2, qo_indptr.clone(), kv_indptr.clone(),
                                     kv_indices.clone(), last.clone(), 1, 64, sm_scale=scale, return_lse=True,
                                     metadata=fresh)
            what = f"step {step} (MLA_TEST_SEED={SEED})"
            self.assertTrue(torch.equal(bits(o), bits(o2)) and torch.equal(bits(lse), bits(lse2)), f"op {what}")
            self.assertTrue(torch.equal(bits(flash["out"].view(rows, heads, 512)), bits(o2)), f"flash out {what}")
            self.assertTrue(torch.equal(bits(flash["lse"].transpose(1, 2).reshape(rows, heads)), bits(lse2)),
                            f"flash lse {what}")
            self.assertEqual((meta.plan_updates, fresh.plan_updates), (1, 1), what)
            if step == 0:
                plan = sched.tile_scheduler_metadata
                counts = np.repeat(np.minimum(lengths, topk), request_rows)
                idx = kv_indices.view(rows, topk).numpy()
                ref_o, ref_lse = reference(q.double().numpy(), kvf, [idx[t, :counts[t]] for t in range(rows)], scale)
                self.assertClose(o.double().numpy(), lse.numpy(), ref_o, ref_lse, "replay step 0")
            fresh.close()
        self.assertIs(sched.tile_scheduler_metadata, plan)
        self.assertEqual(plan.plan_updates, 1)


# ---- refusals --------------------------------------------------------------------------------

class TestRefusals(unittest.TestCase):
    def test_flash_mla_names_the_argument(self):
        rng = rng_for(120)
        k_cache, _ = random_cache(rng, 2, 64, True)
        q = bf16(rng, (2, 1, 16, 576))
        idx = torch.from_numpy(random_rows(rng, 2, 64, 128).reshape(2, 1, 64))
        sched = flash_mla.get_mla_metadata()[0]

        def call(**kw):
            args = dict(q=q, k_cache=k_cache, block_table=None, cache_seqlens=None, head_dim_v=512,
                        tile_scheduler_metadata=flash_mla.get_mla_metadata()[0], indices=idx, is_fp8_kvcache=True)
            args.update(kw)
            return flash_mla.flash_mla_with_kvcache(**args)

        with self.assertRaisesRegex(TypeError, r"^indices: dtype torch.int64 is not allowed; expected int32"):
            call(indices=idx.long())
        with self.assertRaisesRegex(ValueError, r"^indices: expected \[batch, seq_len_q, topk\] = \[2, 1, topk\], "
                                                r"got shape \[2, 64\]"):
            call(indices=idx.view(2, 64))
        with self.assertRaisesRegex(ValueError, r"^indices: expected \[batch, seq_len_q, topk\] = \[2, 1, topk\], "
                                                r"got shape \[1, 2, 64\]"):
            call(indices=idx.view(1, 2, 64))
        call(tile_scheduler_metadata=sched)
        with self.assertRaisesRegex(ValueError, r"^tile_scheduler_metadata: first used with topk = 64, now 32"):
            call(tile_scheduler_metadata=sched, indices=idx[..., :32].contiguous())
        older, splits = flash_mla.get_mla_metadata(torch.ones(2, dtype=torch.int32), 16, 1, num_heads_q=16,
                                                   is_fp8_kvcache=True, topk=128)
        with self.assertRaisesRegex(ValueError, r"get_mla_metadata\(\) was given topk = 128, but this call has 64"):
            call(tile_scheduler_metadata=older, num_splits=splits)
        with self.assertRaisesRegex(ValueError, r"^k_cache: expected \[num_blocks, page_block_size, 1, 656\] "
                                                r"\(fp8_ds_mla bytes with is_fp8_kvcache=True\), got shape "
                                                r"\[2, 64, 1, 600\]$"):
            call(k_cache=k_cache[..., :600])
        with self.assertRaisesRegex(ValueError, r"^k_cache: expected \[num_blocks, page_block_size, 1, 576\] "
                                                r"\(bf16 values with is_fp8_kvcache=False\), got shape "
                                                r"\[2, 64, 1, 656\]; a last dimension of 656 is the fp8_ds_mla "
                                                r"cache: pass is_fp8_kvcache=True"):
            call(is_fp8_kvcache=False)
        with self.assertRaisesRegex(TypeError, r"^k_cache: dtype torch.bfloat16 is not allowed; expected uint8 or "
                                               r"int8 or float8_e4m3fn"):
            call(k_cache=torch.zeros(2, 64, 1, 656, dtype=torch.bfloat16))

    def test_aiter_form_names_the_argument(self):
        rng = rng_for(121)
        k_cache, _ = random_cache(rng, 2, 64, True)
        q, o = bf16(rng, (2, 16, 576)), torch.empty(2, 16, 512, dtype=torch.bfloat16)
        qo, kvp, last = (torch.arange(3, dtype=torch.int32), torch.tensor([0, 64, 128], dtype=torch.int32),
                         torch.ones(2, dtype=torch.int32))
        idx = torch.from_numpy(random_rows(rng, 2, 64, 128).reshape(-1))
        meta = get_mla_metadata_info(2, 1, 16, "bf16", "fp8_ds_mla", return_lse=True, topk=64)
        get_mla_metadata(meta, qo, kvp, last)

        def call(**kw):
            args = dict(q=q, kv_buffer=k_cache, o=o, qo_indptr=qo, kv_indptr=kvp, kv_indices=idx,
                        kv_last_page_lens=last, max_seqlen_q=1, page_size=64, return_lse=True, metadata=meta)
            args.update(kw)
            return mla_decode_fwd(**args)

        call()
        with self.assertRaisesRegex(TypeError, r"^kv_indices: dtype torch.int64 is not allowed; expected int32"):
            call(kv_indices=idx.long())
        with self.assertRaisesRegex(ValueError, r"^kv_indices: expected a 1-D int32 tensor"):
            call(kv_indices=idx.view(2, 64))
        with self.assertRaisesRegex(ValueError, r"^kv_indices: 100 entries, but the sparse metadata was made for "
                                                r"topk 64: 2 query rows x topk 64 = 128"):
            call(kv_indices=idx[:100])
        wide = torch.from_numpy(random_rows(rng, 2, 128, 128).reshape(-1))  # a topk-128 table
        with self.assertRaisesRegex(ValueError, r"^kv_indices: 256 entries, but the sparse metadata was made for "
                                                r"topk 64"):
            call(kv_indices=wide)
        with self.assertRaisesRegex(ValueError, r"^kv_buffer: rows of 656 bytes are FlashMLA's fp8_ds_mla cache, "
                                                r"read only by sparse metadata"):
            call(metadata=None)
        with self.assertRaisesRegex(TypeError, r"^kv_buffer: dtype torch.int16 with 656-byte rows"):
            call(kv_buffer=torch.zeros(2, 64, 1, 656, dtype=torch.int16))
        bf16_meta = get_mla_metadata_info(2, 1, 16, "bf16", "bf16", return_lse=True, topk=64)
        get_mla_metadata(bf16_meta, qo, kvp, last)
        with self.assertRaisesRegex(ValueError, r"^metadata: made for \(q, kv, heads, lse\) = "
                                                r"\('bf16', 'bf16', 16, True\), called with \('bf16', 'fp8_ds_mla'"):
            call(metadata=bf16_meta)
        for q_dtype, topk in (("fp8", 64), ("bf16", None)):
            with self.subTest(q_dtype=q_dtype, topk=topk), \
                    self.assertRaisesRegex(ValueError, r"^kv_dtype: 'fp8_ds_mla' \(FlashMLA's 656-byte sparse cache "
                                                       r"entries\) needs sparse metadata"):
                get_mla_metadata_info(2, 1, 16, q_dtype, "fp8_ds_mla", topk=topk)
        with self.assertRaisesRegex(TypeError, r"^q_dtype: 'fp8_ds_mla' is not an MLA dtype"):
            get_mla_metadata_info(2, 1, 16, "fp8_ds_mla", "fp8_ds_mla", topk=64)


if __name__ == "__main__":
    unittest.main()
