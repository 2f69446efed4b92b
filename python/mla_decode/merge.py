"""merge_attn_states (vLLM's names) for decode context parallelism, on the generated kernel.

After each rank decodes its shard of the KV with return_lse and the engine gathers the (o, lse)
pairs, merge_attn_states turns two of them into the attention over both shards:
    o = (w_p prefix_output + w_s suffix_output) / (w_p + w_s),  w = exp(lse - max),
    output_lse = max + ln(w_p + w_s).
o tensors [tokens, heads, 512] bf16, lse [tokens, heads] float32 natural log (the layout
mla_decode_fwd returns). A row whose two lse are -inf gets o = 0 and lse = -inf.
"""
import ctypes

from . import _capi as C
from ._tensors import Tensor
from .decode import LATENT_DIM, _runtime_for


def _checked(obj, name, kind, shape=None):
    t = Tensor(obj, name)
    if kind == "bf16":
        t.require_dtype("bfloat16", "uint16", "int16")
        if len(t.shape) != 3 or t.shape[2] != LATENT_DIM:
            raise ValueError(f"{name}: expected [tokens, heads, {LATENT_DIM}] bf16, got shape {list(t.shape)}")
    else:
        t.require_dtype("float32")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {list(t.shape)}, expected {list(shape)} (the shape of "
                         f"{'output' if kind == 'bf16' else 'the [tokens, heads] of output'})")
    t.require_contiguous()
    return t


def merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
    """Writes the merge of (prefix_output, prefix_lse) and (suffix_output, suffix_lse) into
    `output` (and `output_lse` when given); returns (output, output_lse)."""
    out = _checked(output, "output", "bf16")
    tokens, heads = out.shape[0], out.shape[1]
    tensors = [("output", out),
               ("prefix_output", _checked(prefix_output, "prefix_output", "bf16", out.shape)),
               ("prefix_lse", _checked(prefix_lse, "prefix_lse", "f32", (tokens, heads))),
               ("suffix_output", _checked(suffix_output, "suffix_output", "bf16", out.shape)),
               ("suffix_lse", _checked(suffix_lse, "suffix_lse", "f32", (tokens, heads)))]
    if output_lse is not None:
        tensors.append(("output_lse", _checked(output_lse, "output_lse", "f32", (tokens, heads))))
    for name, t in tensors:
        if t.device != out.device:
            raise ValueError(f"{name}: on {t.device}, but output is on {out.device}; all tensors must be on one device")
    if tokens < 1 or heads < 1:
        raise ValueError(f"output: shape {list(out.shape)} has no rows")
    runtime = _runtime_for(out.device)
    L = C.lib()
    args = C.mla_merge_args()
    args.num_tokens, args.num_heads = tokens, heads
    with runtime.lock:
        addr = {}
        if runtime.is_emulator:
            for name, t in tensors:
                addr[name] = runtime.staging("merge_" + name, t.nbytes)
                if name not in ("output", "output_lse"):
                    C.check(L.mla_memcpy_h2d(runtime.dev, addr[name], t.address, t.nbytes), "mla_memcpy_h2d")
            stream = None
        else:
            torch = __import__("torch")
            addr = {name: t.address for name, t in tensors}
            stream = ctypes.c_void_p(torch.cuda.current_stream(out.obj.device).cuda_stream)
        args.output, args.prefix_output, args.prefix_lse = addr["output"], addr["prefix_output"], addr["prefix_lse"]
        args.suffix_output, args.suffix_lse = addr["suffix_output"], addr["suffix_lse"]
        args.output_lse = addr.get("output_lse", 0)
        C.check(L.mla_merge_attn_states(runtime.ctx, ctypes.byref(args), stream), "mla_merge_attn_states")
        if runtime.is_emulator:
            for name, t in tensors:
                if name in ("output", "output_lse"):
                    C.check(L.mla_memcpy_d2h(runtime.dev, t.address, addr[name], t.nbytes), f"mla_memcpy_d2h({name})")
    return output, output_lse
