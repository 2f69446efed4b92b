#include "kernels/registry.h"

#include <fmt/format.h>

namespace mla::gen {

bool has_builder(KernelKind kind) {
  return kind == KernelKind::VectorCopy || kind == KernelKind::Fp8Dequant || kind == KernelKind::MfmaTile ||
         kind == KernelKind::MlaDecode || kind == KernelKind::MlaReduce;
}

Program build_program(const KernelSpec& spec) {
  Program p;
  p.name = spec.name();
  p.target = &target(spec.arch);
  switch (spec.kind) {
    case KernelKind::VectorCopy: build_vector_copy(p); break;
    case KernelKind::Fp8Dequant: build_fp8_dequant(p); break;
    case KernelKind::MfmaTile: build_mfma_tile(p); break;
    case KernelKind::MlaDecode: build_mla_decode(p, spec); break;
    case KernelKind::MlaReduce: build_mla_reduce(p, spec); break;
    default:
      throw NoBuilderError(fmt::format("{} ({}): this generator version has no builder for kind '{}'", p.name,
                                       arch_name(spec.arch), kind_name(spec.kind)));
  }
  return p;
}

}  // namespace mla::gen
