// KernelSpec: one kernel to build, fully resolved from a config entry. Its name spells out
// the shape, because users read kernel names in profiler traces.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "target/target.h"

namespace mla::gen {

enum class KernelKind {
  MlaDecode,     // split-KV MLA decode (builder: issue #4)
  MlaReduce,     // merge of split partials (builder: issue #4)
  MlaPrefix,     // a prefix group's rows over its shared prefix (issue #13; the decode builder)
  MlaMerge,      // merge_attn_states: two (o, lse) of the same rows into one (issue #14)
  DsaIndexerLogits,  // the DSA indexer's paged fp8 MQA logits (DeepGEMM's fp8_paged_mqa_logits, issue #44)
  DsaTopk,           // the indexer's top-k per row (vLLM's top_k_per_row_decode), implied by the logits kernels
  VectorCopy,    // pipeline kernel: grid-stride dword copy through buffer resources
  Fp8Dequant,    // pipeline kernel: fp8 (target format) -> f32 times a scale
  MfmaTile,      // pipeline kernel: one 16x16x32 fp8 MFMA tile, D = A * B
};

using DType = abi::DType;
using abi::dtype_name;

std::string_view kind_name(KernelKind k);

struct KernelSpec {
  KernelKind kind = KernelKind::MlaDecode;
  Arch arch = Arch::gfx942;
  // MLA shape (decode / reduce).
  int heads = 0;
  DType q_dtype = DType::fp8, kv_dtype = DType::fp8;
  int qseqlen = 1;
  int page_size = 1;
  bool return_lse = false;
  bool logit_cap = false;  // soft-cap support compiled in (cap value is a runtime argument)
  // Sparse attention (DSA, docs/sparse.md): every query row reads its own index row of
  // cache slots (qseqlen 1, page size 1 in the kernel's view); an index of -1 or past the cache's
  // kv_slots is masked and never loaded.
  bool sparse = false;
  // The cache holds FlashMLA's fp8_ds_mla entries (656 bytes: 512 e4m3fn, four f32 scales, one per
  // 128 of them, 64 bf16 rope; docs/sparse.md): the producer dequantises each row to the bf16 row
  // the bf16/bf16 consumers read, so kv_dtype is bf16 here (q_dtype must be bf16).
  bool kv_ds_mla = false;
  std::string kv_name() const { return kv_ds_mla ? "dsmla" : std::string(dtype_name(kv_dtype)); }
  // Prefix kernels: rows per workgroup when not the default (48 or 96): 192 is the wide kernel
  // (mla_prefix_wide.cpp), implied beside the default one where it fits (mla_geometry.h).
  int prefix_rows = 0;
  // DSA indexer logits: query rows per request (MTP) scored by one read of each cached token; the
  // cache's block size is page_size, heads the indexer's heads (head dim abi::kIndexerDim).
  int next_n = 1;
  // Where it came from, for messages and the catalog.
  std::string source_config;
  std::string deployment;
  // Implied by another entry (the reduce kernel of a decode shape); several configs may
  // imply the same kernel without conflict.
  bool implied = false;

  bool is_mla() const { return is_attention() || kind == KernelKind::MlaReduce; }
  // Built by the decode builder: decode, or prefix (mla_decode.cpp).
  bool is_attention() const { return kind == KernelKind::MlaDecode || kind == KernelKind::MlaPrefix; }
  // e.g. mla_decode_fp8fp8_h12_qs1_pg128, mla_decode_bf16fp8_h16_qs1_pg1_lse, mla_decode_fp8fp8_h16_sparse,
  //      mla_prefix_fp8fp8_h12_qs1_pg128, dsa_indexer_logits_fp8_h64_nn2_pg64, pipe_vector_copy, pipe_fp8_dequant_f32, pipe_mfma_16x16x32_fp8
  std::string name() const;
  nlohmann::json to_json() const;
};

}  // namespace mla::gen
