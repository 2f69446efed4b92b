// C++ access to the objects behind the C API (tests, tools). Not part of the C API.
#pragma once
#include <vector>

#include "runtime/backend.h"
#include "runtime/mla_runtime.h"

namespace mla::rt {

Backend& backend_of(mla_device* dev);
class EmulatorBackend;  // runtime/emulator_backend.h
// The emulator backend of `dev`, or nullptr for a HIP device. Defined with the emulator backend
// (the static mla_runtime library), not in libmla_runtime.so.
EmulatorBackend* emulator_of(mla_device* dev);
// The operations mla_decode would run for these arguments (without validation or running).
std::vector<DecodeOp> decode_ops_of(mla_context* ctx, const mla_plan* plan, const mla_decode_args* args,
                                    uint64_t workspace);
// The operations mla_indexer_logits / mla_indexer_topk run, after their argument checks (each
// call's whole host work but the launch; throws as the C calls report).
std::vector<DecodeOp> indexer_logits_ops_of(mla_context* ctx, const mla_indexer_logits_args* args);
std::vector<DecodeOp> indexer_topk_ops_of(mla_context* ctx, const mla_indexer_topk_args* args);
// The plan's current host plan.
const Plan& plan_of(const mla_plan* plan);

}  // namespace mla::rt
