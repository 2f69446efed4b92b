// From a KernelSpec to a Program (before passes): the one place that maps kinds to builders.
#pragma once
#include <stdexcept>

#include "program/program.h"
#include "spec/kernel_spec.h"

namespace mla::gen {

// Builds the program of a spec (before the passes).
Program build_program(const KernelSpec& spec);

// Pipeline kernels (small real kernels that exercise config -> .co end to end).
void build_vector_copy(Program& p);
void build_fp8_dequant(Program& p);
void build_mfma_tile(Program& p);

// MLA kernels (see kernels/mla_geometry.h for their geometry and argument layout).
void build_mla_decode(Program& p, const KernelSpec& spec);
void build_mla_reduce(Program& p, const KernelSpec& spec);
void build_mla_merge(Program& p);
void build_dsa_indexer_logits(Program& p, const KernelSpec& spec);
void build_dsa_topk(Program& p, const KernelSpec& spec);

}  // namespace mla::gen
