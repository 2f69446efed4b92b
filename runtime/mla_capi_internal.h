// The C API's own declarations, shared by the files that implement it (private: neither installed
// nor for tests and tools, which have runtime/mla_runtime_internal.h):
//   mla_runtime.cpp  the surface: status and errors, devices, contexts, the kernel list, selection
//   mla_plan.cpp     plans and their workspace: create, update, describe, upload
//   mla_launch.cpp   mla_decode (its checks and launch sequence) and mla_merge_attn_states
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "runtime/backend.h"
#include "runtime/catalog.h"
#include "runtime/mla_runtime.h"
#include "runtime/planner.h"
#include "runtime/problem.h"
#include "runtime/rt_error.h"

// The C API's files are written in the runtime's names.
using namespace mla::rt;

struct mla_device {
  std::unique_ptr<Backend> be;
};

struct mla_context {
  mla_device* dev = nullptr;
  Catalog cat;
  bool validate = false, record = false;
  int num_cus = 0, wpc = 0;  // wpc 0: the decode kernel's resident workgroups per CU
  CascadePolicy cascade = CascadePolicy::cost_model;
  bool merge_in_launch = false;  // MLA_OPTION_MERGE 1
  int planned_cus() const { return num_cus > 0 ? num_cus : dev->be->num_cus(); }
};

struct mla_plan {
  SelectedKernels k;
  int max_batch = 0;
  int64_t max_tokens = 0;
  int num_cus = 0, wpc = 0;
  WorkspaceLayout ws;
  Plan plan, next;     // the batch's plan; the next update's, swapped in when it succeeds
  PlanScratch scratch;  // the planner's working storage, kept across updates
  PlanInputs inputs;    // the kernels' and the device's side, computed once (plan_inputs_for)
  std::vector<PrefixGroup> groups;  // the update's caller-given or detected groups
  int batch = 0;
  int32_t bt_stride = 0;
  std::vector<int> kv_lens, next_lens;  // the batch's; the next update's while it is checked
  int64_t table_entries = 0;  // page-table entries the plan reads: [0, table_entries)
  std::string json;           // mla_plan_describe_json's text of the current plan (lazily)
  // The step tables as the next upload copies them (pack_step_tables), in memory the plan owns:
  // page-locked on HIP. Written by each update; the upload writes its two scales into it.
  Backend* be = nullptr;
  uint8_t* tables = nullptr;
  size_t tables_used = 0;
  uint64_t updates = 0;           // mla_plan_update calls that succeeded
  // The last upload: which update it copied, into which workspace, with which host scales.
  uint64_t uploaded_update = 0;   // 0: none yet
  uint64_t uploaded_ws = 0;
  float uploaded_q_scale = 0, uploaded_kv_scale = 0;
  uint64_t zeroed_ws = 0;         // padded selections: the workspace whose padding rows are zeroed
  uint64_t counters_ws = 0;       // in-launch merge: the workspace whose counters are zeroed
  bool merge_in_launch = false;   // MLA_OPTION_MERGE at creation
  std::vector<DecodeOp> upload_ops;  // mla_plan_upload's operations (storage kept across steps)
  ~mla_plan() {
    if (tables) be->host_free(tables);
  }
};

namespace mla::rt::capi {

// Records `msg` as the calling thread's mla_last_error; returns `s`.
mla_status fail(mla_status s, const std::string& msg);

// Runs `f`: MLA_SUCCESS, or the status and message of what it threw.
template <class F>
mla_status guard(F&& f) {
  try {
    f();
    return MLA_SUCCESS;
  } catch (const RtError& e) {
    return fail(e.status, e.what());
  } catch (const CatalogError& e) {
    return fail(MLA_ERROR_CATALOG, e.what());
  } catch (const ProblemError& e) {
    return fail(MLA_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(MLA_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(MLA_ERROR_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return fail(MLA_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(MLA_ERROR_INTERNAL, "unknown exception");
  }
}

// Throws MLA_ERROR_INVALID_ARGUMENT with `msg`.
[[noreturn]] void bad(const std::string& msg);

template <class T>
void need(const T* p, const char* what) {
  if (!p) bad(fmt::format("{} is NULL", what));
}

// The int a caller stored in an enum argument or field, read as its bits. A C enum may hold any
// int, negative ones too, and loading a value outside the enumerators' range (0..0x7fffffff here)
// through the C++ enum type is undefined behaviour (fuzz finding, issue #15): every caller enum is
// read with this before it is compared.
template <class E>
int32_t enum_bits(const E& e) {
  static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int32_t));
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// The device's target; MLA_ERROR_NO_KERNEL for one without kernels.
Target device_target(const mla_context* ctx);
// The caller's shape, checked field by field, on the context's device.
DecodeShape to_shape(const mla_context* ctx, const mla_shape& s);

}  // namespace mla::rt::capi

using namespace mla::rt::capi;
