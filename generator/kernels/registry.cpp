#include "kernels/registry.h"

#include <fmt/format.h>

namespace mla::gen {

Program build_program(const KernelSpec& spec) {
  Program p;
  p.name = spec.name();
  p.target = &target(spec.arch);
  switch (spec.kind) {
    case KernelKind::VectorCopy: build_vector_copy(p); break;
    case KernelKind::Fp8Dequant: build_fp8_dequant(p); break;
    case KernelKind::MfmaTile: build_mfma_tile(p); break;
    case KernelKind::MlaDecode:
    case KernelKind::MlaPrefix: build_mla_decode(p, spec); break;
    case KernelKind::MlaReduce: build_mla_reduce(p, spec); break;
    case KernelKind::MlaMerge: build_mla_merge(p); break;
    case KernelKind::DsaIndexerLogits: build_dsa_indexer_logits(p, spec); break;
    case KernelKind::DsaTopk: build_dsa_topk(p, spec); break;
  }
  return p;
}

}  // namespace mla::gen
