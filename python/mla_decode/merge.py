"""merge_attn_states with vLLM's contract (vllm/v1/attention/ops/merge_attn_states.py), on the
generated mla_merge_attn_states kernel.

    merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse,
                      output_lse=None, prefill_tokens_with_context=None, output_scale=None)

After each rank of decode context parallelism decodes its shard of the KV with return_lse and the
engine gathers the (o, lse) pairs, this turns two of them into the attention over both shards:
    o = (w_p prefix_output + w_s suffix_output) / (w_p + w_s),  w = exp(lse - max),
    output_lse = max + ln(w_p + w_s).

Layouts, as vLLM's: output / prefix_output / suffix_output [NUM_TOKENS, NUM_HEADS, 512] bf16;
prefix_lse / suffix_lse / output_lse [NUM_HEADS, NUM_TOKENS] float32, natural log. Any strided
view is read by its strides: mla_decode_fwd returns lse as [tokens, heads], which vLLM passes as
`lse.transpose(0, 1)` (a view, no copy). An lse of +inf is FlashAttention-2's "no key" value and
counts as -inf (empty), as vLLM's merge maps it. A row whose two lse are empty gets o = 0 and
output_lse = -inf (vLLM's kernels give NaN there).

A square lse (NUM_TOKENS == NUM_HEADS) laid out row-major cannot be told apart from a forgotten
transpose of mla_decode_fwd's [tokens, heads] lse: it is refused unless the caller says
lse_layout="heads_tokens" (keyword-only, not in vLLM's signature). A transposed view (column-major
strides) is unambiguous and always accepted.

Tokens at index >= prefill_tokens_with_context take suffix_output and suffix_lse unchanged
(vLLM's rule for tokens without prefix context). output_scale (fp8 output) is not supported:
output is bf16. emulator_target (keyword-only, CPU tensors): as mla_decode_fwd's. Returns None,
as vLLM's.
"""
import ctypes
import math

import numpy as np

from . import _capi as C
from ._tensors import Tensor, _torch
from .decode import LATENT_DIM, _runtime_for

LSE_LAYOUTS = (None, "heads_tokens")


def _o_checked(obj, name, like=None):
    t = Tensor(obj, name)
    t.require_dtype("bfloat16", "uint16", "int16")
    if len(t.shape) != 3 or t.shape[2] != LATENT_DIM:
        raise ValueError(f"{name}: expected [NUM_TOKENS, NUM_HEADS, {LATENT_DIM}] bf16, got shape {list(t.shape)}")
    if like is not None and t.shape != like.shape:
        raise ValueError(f"{name}: shape {list(t.shape)}, expected {list(like.shape)} (the shape of output)")
    if t.strides[2] != 1:
        raise ValueError(f"{name}: the last (head_size) dimension must have stride 1, got strides {list(t.strides)}")
    return t


def _lse_checked(obj, name, tokens, heads, lse_layout):
    """Checks an lse argument of vLLM's [NUM_HEADS, NUM_TOKENS] layout and returns its Tensor."""
    t = Tensor(obj, name)
    t.require_dtype("float32")
    if len(t.shape) != 2:
        raise ValueError(f"{name}: expected [NUM_HEADS, NUM_TOKENS] = {[heads, tokens]} float32, got shape "
                         f"{list(t.shape)}")
    if t.shape != (heads, tokens):
        hint = ""
        if t.shape == (tokens, heads):
            hint = (" : that is [NUM_TOKENS, NUM_HEADS], the layout mla_decode_fwd returns; vLLM's layout is "
                    f"[NUM_HEADS, NUM_TOKENS]: pass {name}.transpose(0, 1) (a view; numpy: .T)")
        raise ValueError(f"{name}: shape {list(t.shape)}, expected [NUM_HEADS, NUM_TOKENS] = {[heads, tokens]} "
                         f"(NUM_TOKENS, NUM_HEADS from output){hint}")
    if tokens == heads and tokens > 1 and t.strides[0] >= t.strides[1] and lse_layout != "heads_tokens":
        raise ValueError(
            f"{name}: shape [{heads}, {tokens}] is square (NUM_TOKENS == NUM_HEADS) and laid out row-major "
            f"(strides {list(t.strides)}), so it cannot be told apart from mla_decode_fwd's [NUM_TOKENS, NUM_HEADS] "
            f"lse passed without a transpose. Pass that lse as lse.transpose(0, 1) (a view), or, if this tensor "
            f"really is [NUM_HEADS, NUM_TOKENS], say so with lse_layout=\"heads_tokens\"")
    return t


def _tokens_heads_copy(t, tokens):
    """A new contiguous [tokens', heads] float32 copy of a [heads, tokens] lse (first `tokens`
    tokens), same kind and device, with +inf mapped to -inf (FlashAttention-2's empty value)."""
    if t.kind == "numpy":
        x = t.obj[:, :tokens].T
        return np.ascontiguousarray(np.where(np.isposinf(x), np.float32(-np.inf), x), dtype=np.float32)
    torch = _torch()
    x = t.obj.detach()[:, :tokens].transpose(0, 1)
    return torch.where(x == math.inf, torch.full_like(x, -math.inf), x).contiguous()


def _contiguous(t, rows):
    """The first `rows` rows of a [tokens, heads, 512] tensor, contiguous (no copy if it is)."""
    x = t.obj[:rows]
    if t.kind == "numpy":
        return np.ascontiguousarray(x)
    return x.contiguous()


def _new_like(t, shape, dtype_name):
    if t.kind == "numpy":
        return np.empty(shape, dtype=dtype_name)
    torch = _torch()
    return torch.empty(shape, dtype=getattr(torch, dtype_name), device=t.obj.device)


def _assign(dst, src, rows=None, lse=False):
    """dst[...] = src for a caller's tensor (any strides): dst is [tokens, heads, 512] (rows = the
    first rows) or, when lse, [heads, tokens] and src the [tokens', heads] result (the first tokens')."""
    n = src.shape[0]
    if dst.kind == "numpy":
        if lse:
            dst.obj[:, :n] = src.T
        else:
            dst.obj[:n] = src.view(dst.obj.dtype) if src.dtype != dst.obj.dtype else src
        return
    s = src
    if dst.obj.dtype != s.dtype:
        s = s.view(dst.obj.dtype)
    if lse:
        dst.obj[:, :n].copy_(s.transpose(0, 1))
    else:
        dst.obj[:n].copy_(s)


def merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None,
                      prefill_tokens_with_context=None, output_scale=None, *, lse_layout=None,
                      emulator_target=None):
    """Writes the merge of (prefix_output, prefix_lse) and (suffix_output, suffix_lse) into `output`
    (and `output_lse` when given). vLLM's arguments and layouts (see the module docstring)."""
    if lse_layout not in LSE_LAYOUTS:
        raise ValueError(f"lse_layout: got {lse_layout!r}; allowed None (told from the strides) or "
                         f"\"heads_tokens\" (a square row-major lse is [NUM_HEADS, NUM_TOKENS])")
    if output_scale is not None:
        raise ValueError("output_scale: fp8 output is not supported (output is bf16); pass None")
    out = _o_checked(output, "output")
    tokens, heads = out.shape[0], out.shape[1]
    if tokens < 1 or heads < 1:
        raise ValueError(f"output: shape {list(out.shape)} has no rows")
    po = _o_checked(prefix_output, "prefix_output", out)
    so = _o_checked(suffix_output, "suffix_output", out)
    pl = _lse_checked(prefix_lse, "prefix_lse", tokens, heads, lse_layout)
    sl = _lse_checked(suffix_lse, "suffix_lse", tokens, heads, lse_layout)
    ol = None if output_lse is None else _lse_checked(output_lse, "output_lse", tokens, heads, lse_layout)
    given = [out, po, so, pl, sl] + ([ol] if ol is not None else [])
    for t in given:
        if t.device != out.device or t.kind != out.kind:
            raise ValueError(f"{t.name}: a {t.kind} tensor on {t.device}, but output is a {out.kind} tensor on "
                             f"{out.device}; all tensors must be of one kind on one device")
    if prefill_tokens_with_context is None:
        merged = tokens
    else:
        merged = int(prefill_tokens_with_context)
        if merged != prefill_tokens_with_context or not 0 <= merged <= tokens:
            raise ValueError(f"prefill_tokens_with_context: got {prefill_tokens_with_context!r}; allowed None or "
                             f"an integer 0..NUM_TOKENS = 0..{tokens}")

    if merged > 0:
        # The kernel reads and writes rows t * heads + h, contiguous: lse as [tokens, heads].
        ins = {"prefix_output": Tensor(_contiguous(po, merged), "prefix_output"),
               "prefix_lse": Tensor(_tokens_heads_copy(pl, merged), "prefix_lse"),
               "suffix_output": Tensor(_contiguous(so, merged), "suffix_output"),
               "suffix_lse": Tensor(_tokens_heads_copy(sl, merged), "suffix_lse")}
        direct = out.contiguous and merged == tokens
        o_res = out.obj if direct else _new_like(out, (merged, heads, LATENT_DIM), "uint16" if out.kind == "numpy"
                                                 else "bfloat16")
        outs = {"output": Tensor(o_res, "output")}
        if ol is not None:
            outs["output_lse"] = Tensor(_new_like(ol, (merged, heads), "float32"), "output_lse")
        _run(out.device, merged, heads, ins, outs, emulator_target)
        if not direct:
            _assign(out, o_res)
        if ol is not None:
            _assign(ol, outs["output_lse"].obj, lse=True)
    if merged < tokens:
        # Tokens without prefix context: suffix_output and suffix_lse as they are (vLLM's rule).
        if out.kind == "numpy":
            out.obj[merged:] = so.obj[merged:].view(out.obj.dtype)
            if ol is not None:
                ol.obj[:, merged:] = sl.obj[:, merged:]
        else:
            s = so.obj[merged:]
            out.obj[merged:].copy_(s if s.dtype == out.obj.dtype else s.view(out.obj.dtype))
            if ol is not None:
                ol.obj[:, merged:].copy_(sl.obj[:, merged:])
    return None


def _run(device, tokens, heads, ins, outs, emulator_target):
    """One mla_merge_attn_states launch over contiguous [tokens, heads(, 512)] tensors."""
    runtime = _runtime_for(device, None, emulator_target)
    L = C.lib()
    args = C.mla_merge_args()
    args.num_tokens, args.num_heads = tokens, heads
    tensors = list(ins.items()) + list(outs.items())
    with runtime.lock:
        if runtime.is_emulator:
            addr = {}
            for name, t in tensors:
                addr[name] = runtime.staging("merge_" + name, t.nbytes)
                if name in ins:
                    C.check(L.mla_memcpy_h2d(runtime.dev, addr[name], t.address, t.nbytes), "mla_memcpy_h2d")
            stream = None
        else:
            torch = _torch()
            addr = {name: t.address for name, t in tensors}
            stream = ctypes.c_void_p(torch.cuda.current_stream(outs["output"].obj.device).cuda_stream)
        args.output, args.prefix_output, args.prefix_lse = addr["output"], addr["prefix_output"], addr["prefix_lse"]
        args.suffix_output, args.suffix_lse = addr["suffix_output"], addr["suffix_lse"]
        args.output_lse = addr.get("output_lse", 0)
        C.check(L.mla_merge_attn_states(runtime.ctx, ctypes.byref(args), stream), "mla_merge_attn_states")
        if runtime.is_emulator:
            for name, t in outs.items():
                C.check(L.mla_memcpy_d2h(runtime.dev, t.address, addr[name], t.nbytes), f"mla_memcpy_d2h({name})")
