#include "spec/kernel_spec.h"

#include <fmt/format.h>

namespace mla::gen {

std::string_view kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::MlaDecode: return "mla_decode";
    case KernelKind::MlaReduce: return "mla_reduce";
    case KernelKind::MlaPrefix: return "mla_prefix";
    case KernelKind::MlaMerge: return "mla_merge";
    case KernelKind::DsaIndexerLogits: return "dsa_indexer_logits";
    case KernelKind::DsaTopk: return "dsa_topk";
    case KernelKind::VectorCopy: return "vector_copy";
    case KernelKind::Fp8Dequant: return "fp8_dequant";
    case KernelKind::MfmaTile: return "mfma_tile";
  }
  return "?";
}


std::string KernelSpec::name() const {
  switch (kind) {
    case KernelKind::MlaDecode:
      if (sparse)
        return fmt::format("mla_decode_{}{}_h{}_sparse{}", dtype_name(q_dtype), kv_name(), heads,
                           return_lse ? "_lse" : "");
      return fmt::format("mla_decode_{}{}_h{}_qs{}_pg{}{}{}", dtype_name(q_dtype), dtype_name(kv_dtype), heads,
                         qseqlen, page_size, return_lse ? "_lse" : "", logit_cap ? "_softcap" : "");
    case KernelKind::MlaPrefix:  // always writes partials (with their lse): no _lse variant
      return fmt::format("mla_prefix_{}{}_h{}_qs{}_pg{}{}{}", dtype_name(q_dtype), dtype_name(kv_dtype), heads, qseqlen,
                         page_size, logit_cap ? "_softcap" : "", prefix_rows ? fmt::format("_r{}", prefix_rows) : "");
    case KernelKind::MlaReduce:
      return fmt::format("mla_reduce_h{}_qs{}{}", heads, qseqlen, return_lse ? "_lse" : "");
    case KernelKind::MlaMerge: return "mla_merge_attn_states";
    case KernelKind::DsaIndexerLogits: return fmt::format("dsa_indexer_logits_fp8_h{}_nn{}_pg{}", heads, next_n, page_size);
    case KernelKind::DsaTopk: return "dsa_topk_per_row_decode";
    case KernelKind::VectorCopy: return "pipe_vector_copy_b32";
    case KernelKind::Fp8Dequant: return "pipe_fp8_dequant_f32";
    case KernelKind::MfmaTile: return "pipe_mfma_16x16x32_fp8";
  }
  return "?";
}

nlohmann::json KernelSpec::to_json() const {
  nlohmann::json j{{"kind", kind_name(kind)}, {"target", arch_name(arch)}};
  if (is_mla()) {
    j["heads"] = heads;
    j["q_dtype"] = dtype_name(q_dtype);
    j["kv_dtype"] = kv_ds_mla ? std::string("fp8_ds_mla") : std::string(dtype_name(kv_dtype));
    j["qseqlen"] = qseqlen;
    if (kind == KernelKind::MlaDecode) j["attention"] = sparse ? "sparse" : "dense";
    if (is_attention()) {
      j["page_size"] = page_size;
      j["logit_cap"] = logit_cap;
    }
    if (kind != KernelKind::MlaPrefix) j["return_lse"] = return_lse;
    if (kind == KernelKind::MlaPrefix && prefix_rows) j["prefix_rows"] = prefix_rows;
  }
  if (kind == KernelKind::DsaIndexerLogits) {
    j["heads"] = heads;
    j["next_n"] = next_n;
    j["block_size"] = page_size;
  }
  return j;
}

}  // namespace mla::gen
