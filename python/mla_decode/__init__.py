"""MLA decode on AMD GPUs (and the CPU emulator) from Python: ctypes over libmla_runtime.so.

    from mla_decode import mla_decode_fwd          # aiter.mla.mla_decode_fwd's arguments
    o, lse = mla_decode_fwd(q, kv_buffer, o, qo_indptr, kv_indptr, kv_indices,
                            kv_last_page_lens, max_seqlen_q, page_size=1, sm_scale=scale)

MlaDecodeMetadata holds a plan + workspace for graph capture (see its docstring). Environment:
MLA_RUNTIME_LIB (default <repo>/build/runtime/libmla_runtime.so), MLA_CATALOG_DIR (default
<repo>/out), MLA_EMULATOR_TARGET for CPU tensors (default gfx950).
"""
from ._capi import MlaError, MlaInputError
from .decode import MlaDecodeMetadata, mla_decode_fwd
from .merge import merge_attn_states

__all__ = ["mla_decode_fwd", "MlaDecodeMetadata", "merge_attn_states", "MlaError", "MlaInputError"]
