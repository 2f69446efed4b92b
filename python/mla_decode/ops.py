"""mla_decode_fwd as a registered torch op: torch.ops.mla_decode.decode_fwd.

vLLM calls aiter through registered custom ops (torch.ops.vllm.rocm_aiter_mla_decode_fwd,
mutates_args=["o"]) whose schemas carry only tensors and scalars, so torch.compile and graph
capture see what the call reads and writes. This module registers mla_decode_fwd the same way,
in a namespace of its own ("mla_decode"), when it is imported (mla_decode imports it when torch
is installed):

    mla_decode::decode_fwd(Tensor q, Tensor kv_buffer, Tensor(a!) o, Tensor qo_indptr,
        int max_seqlen_qo, Tensor kv_indptr, Tensor kv_indices, Tensor kv_last_page_lens,
        int page_size=1, float sm_scale=1.0, float logit_cap=0.0, Tensor? q_scale=None,
        Tensor? kv_scale=None, Tensor(b!)? lse=None, int metadata_handle=0) -> ()

o (and lse, when given: return_lse) are written in place. The plan is reached through
metadata_handle, the .handle of an MlaDecodeMetadata (get_mla_metadata_info()), which the caller
keeps alive and update()s (get_mla_metadata()) every step outside the captured region; 0 plans
this call from the index tensors (eager use; reads them on the host). A fake (meta)
implementation checks shapes and writes nothing, so the op traces on meta / fake tensors.
Implementations: CPU (the emulator, target $MLA_EMULATOR_TARGET or the metadata's) and CUDA
(a ROCm torch's GPU tensors, HIP backend).
"""
import torch

from .decode import LATENT_DIM, QK_DIM, metadata_from_handle, mla_decode_fwd

NAMESPACE = "mla_decode"
SCHEMA = ("decode_fwd(Tensor q, Tensor kv_buffer, Tensor(a!) o, Tensor qo_indptr, int max_seqlen_qo, "
          "Tensor kv_indptr, Tensor kv_indices, Tensor kv_last_page_lens, int page_size=1, float sm_scale=1.0, "
          "float logit_cap=0.0, Tensor? q_scale=None, Tensor? kv_scale=None, Tensor(b!)? lse=None, "
          "int metadata_handle=0) -> ()")


def _impl(q, kv_buffer, o, qo_indptr, max_seqlen_qo, kv_indptr, kv_indices, kv_last_page_lens, page_size=1,
          sm_scale=1.0, logit_cap=0.0, q_scale=None, kv_scale=None, lse=None, metadata_handle=0):
    metadata = metadata_from_handle(metadata_handle) if metadata_handle else None
    mla_decode_fwd(q, kv_buffer, o, qo_indptr, kv_indptr, kv_indices, kv_last_page_lens, max_seqlen_qo,
                   page_size=page_size, sm_scale=sm_scale, logit_cap=logit_cap, q_scale=q_scale, kv_scale=kv_scale,
                   return_lse=lse is not None, lse=lse, metadata=metadata)


def _fake(q, kv_buffer, o, qo_indptr, max_seqlen_qo, kv_indptr, kv_indices, kv_last_page_lens, page_size=1,
          sm_scale=1.0, logit_cap=0.0, q_scale=None, kv_scale=None, lse=None, metadata_handle=0):
    # Shapes only (no data on meta / fake tensors): o and lse are written in place, nothing returned.
    if q.dim() != 3 or q.shape[2] != QK_DIM:
        raise ValueError(f"q: expected [tokens, heads, {QK_DIM}], got shape {list(q.shape)}")
    if tuple(o.shape) != (q.shape[0], q.shape[1], LATENT_DIM):
        raise ValueError(f"o: expected [tokens, heads, {LATENT_DIM}] = {[q.shape[0], q.shape[1], LATENT_DIM]}, got "
                         f"shape {list(o.shape)}")
    if lse is not None and tuple(lse.shape) != (q.shape[0], q.shape[1]):
        raise ValueError(f"lse: expected [tokens, heads] = {[q.shape[0], q.shape[1]]}, got shape {list(lse.shape)}")


def _register():
    lib = torch.library.Library(NAMESPACE, "DEF")
    lib.define(SCHEMA)
    lib.impl("decode_fwd", _impl, "CPU")
    lib.impl("decode_fwd", _impl, "CUDA")
    register_fake = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)
    if register_fake is not None:  # torch >= 2.1: the fake-tensor implementation torch.compile uses
        register_fake(f"{NAMESPACE}::decode_fwd", _fake, lib=lib)
        fake = "fake"
    else:  # torch 1.13 (Debian 12): a Meta kernel; meta tensors also dispatch through AutogradMeta there
        lib.impl("decode_fwd", _fake, "Meta")
        lib.impl("decode_fwd", _fake, "AutogradMeta")
        fake = "meta"
    return lib, fake


# The Library object must stay alive for the registrations to stay.
_LIB, FAKE_KIND = _register()
decode_fwd = torch.ops.mla_decode.decode_fwd
