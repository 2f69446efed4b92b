"""MLA decode on AMD GPUs (and the CPU emulator) from Python: ctypes over libmla_runtime.so.

    from mla_decode import mla_decode_fwd          # aiter.mla.mla_decode_fwd's arguments
    o, lse = mla_decode_fwd(q, kv_buffer, o, qo_indptr, kv_indptr, kv_indices,
                            kv_last_page_lens, max_seqlen_q, page_size=1, sm_scale=scale)

MlaDecodeMetadata holds a plan + workspace for graph capture (see its docstring);
get_mla_metadata_info / get_mla_metadata split it as aiter's get_mla_metadata_info_v1 /
get_mla_metadata_v1; with topk= the metadata is sparse (DSA: sparse.py). mla_decode.flash_mla
has FlashMLA's sparse decode contract; mla_decode.deep_gemm has DeepGEMM's DSA indexer entries
(get_paged_mqa_logits_metadata, fp8_paged_mqa_logits). merge_attn_states has vLLM's contract. With torch
installed, importing the package registers torch.ops.mla_decode.decode_fwd (ops.py) and
torch.ops.mla_decode.top_k_per_row_decode (vllm_ops.py: vLLM's DSA indexer top-k).
docs/engines.md shows the engines' calls. Environment: MLA_RUNTIME_LIB (default <repo>/build/runtime/libmla_runtime.so),
MLA_CATALOG_DIR (default <repo>/out), MLA_EMULATOR_TARGET for CPU tensors (default gfx950).
"""
from ._capi import MlaError, MlaInputError
from .decode import MlaDecodeMetadata, get_mla_metadata, get_mla_metadata_info, mla_decode_fwd
from .merge import merge_attn_states

__all__ = ["mla_decode_fwd", "MlaDecodeMetadata", "get_mla_metadata_info", "get_mla_metadata", "merge_attn_states",
           "MlaError", "MlaInputError"]

try:
    import torch as _torch  # noqa: F401
except ImportError:  # NumPy-only use: no registered op
    _torch = None
if _torch is not None:
    from . import ops  # noqa: F401  registers torch.ops.mla_decode.decode_fwd
    from . import vllm_ops  # noqa: F401  registers torch.ops.mla_decode.top_k_per_row_decode
    __all__ += ["ops", "vllm_ops"]
