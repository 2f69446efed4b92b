// Backends of the runtime (HIP and emulator) behind one interface, plus the device-independent
// part every launch shares: loading and checking code objects, the decode call as a list of
// stream operations (table copies, padding copies, kernel launches with packed kernargs).
//
// Both backends execute the same DecodeOps: the kernarg bytes a HIP launch sends are the bytes of
// DecodeOp::kernarg, which are also the bytes the emulator dispatches.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/catalog.h"
#include "runtime/code_object_info.h"
#include "runtime/mla_runtime.h"
#include "runtime/planner.h"
#include "runtime/rt_error.h"

namespace mla::rt {

// A launch grid or workgroup (the emulator's emu::Dim3 has the same fields; the runtime does not
// depend on the emulator).
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Packs kernel arguments by name; every declared argument must be given with its declared
// size, and the catalog's layout must equal the code object's metadata (CatalogError names
// the field otherwise).
class KernargPacker {
 public:
  explicit KernargPacker(const CatalogKernel& k) : k_(k), bytes_(k.kernarg_size, 0), set_(k.args.size(), false) {}
  KernargPacker& ptr(const std::string& name, uint64_t address) { return put(name, &address, 8); }
  KernargPacker& f32(const std::string& name, float v) { return put(name, &v, 4); }
  KernargPacker& u32(const std::string& name, uint32_t v) { return put(name, &v, 4); }
  // All arguments set; returns the bytes.
  std::vector<uint8_t> finish() const;

 private:
  KernargPacker& put(const std::string& name, const void* v, uint32_t size);
  const CatalogKernel& k_;
  std::vector<uint8_t> bytes_;
  std::vector<bool> set_;
};

// The catalog's argument list for `kernel` must match the code object's metadata exactly
// (CatalogError naming the field otherwise).
void check_kernel_interface(const CatalogKernel& kernel, const CodeObjectInfo& co);

// A code object read from disk and checked for the device: AMDGPU ELF, the device's target
// (TARGET_MISMATCH otherwise), parseable with its kernel present (CODE_OBJECT), and the
// catalog's argument list equal to the code object's metadata (KERNARG_MISMATCH naming the field).
struct CheckedCode {
  std::vector<uint8_t> bytes;
  CodeObjectInfo info;
};
CheckedCode load_checked_code(const CatalogKernel& k, const std::string& device_target);
// A decode or reduce kernel's argument list must be the contract's table (abi/mla_abi.h):
// RtError(KERNARG_MISMATCH) naming the first argument that differs.
void check_contract_args(const CatalogKernel& k);

// One stream operation of a decode call.
struct DecodeOp {
  enum Kind { H2D, Memset, Copy2D, Launch } kind = Launch;
  uint64_t dst = 0, src = 0;          // device addresses (src: Copy2D)
  const void* host = nullptr;         // H2D source (must stay valid until the stream passes)
  size_t bytes = 0;                   // H2D / Memset size
  int value = 0;                      // Memset
  size_t dpitch = 0, spitch = 0, width = 0, height = 0;  // Copy2D
  const CatalogKernel* kernel = nullptr;                  // Launch
  Dim3 grid, block;
  std::vector<uint8_t> kernarg;       // Launch: the packed kernel arguments
  std::string what;                   // for messages ("decode", "copy q into padded q", ...)
};

// The kernels of a selection, and how the caller's shape maps onto them.
struct SelectedKernels {
  CatalogKernel decode, reduce;
  std::optional<CatalogKernel> prefix;  // prefix groups are read once per group only with it
  int heads = 0, qseqlen = 0;    // the caller's shape
  int kheads = 0, kqseqlen = 0;  // the kernel's (>= the caller's when padded)
  DType q_dtype = DType::fp8, kv_dtype = DType::fp8;
  int page_size = 1;
  bool return_lse = false, logit_cap = false, sparse = false, kv_ds_mla = false;
  bool padded() const { return heads != kheads || qseqlen != kqseqlen; }
};
SelectedKernels selected_kernels(const Selection& sel, const DecodeShape& caller);

// Workspace layout (offsets from the workspace base, 256-byte aligned) for a capacity. The step
// tables come first: what one upload per step writes (StepTables below), sized by the capacity.
struct WorkspaceLayout {
  size_t max_units = 0, max_reduces = 0, max_partials = 0;
  // The persistent launches' widths (abi::LaunchHeader::stride): decode and prefix workgroups
  // walk their units (num_cus x resident workgroups per CU, at most the capacity); the reduce
  // takes one entry per workgroup (max_reduces).
  unsigned decode_grid = 1, prefix_grid = 0, reduce_grid = 1;
  size_t tables = 0, tables_bytes = 0;
  // In-launch merge (PlanInputs::merge_in_launch): no reduce launch; the decode kernel's arrival
  // counters, one uint32 per (request, 16-row block), zeroed once per workspace by the first
  // upload and reset by the kernel after each merge.
  bool merge_in_launch = false;
  size_t counters = 0, counters_bytes = 0;
  size_t partial_o = 0, partial_lse = 0, q_pad = 0, o_pad = 0, lse_pad = 0;
  size_t q_pad_bytes = 0, o_pad_bytes = 0, lse_pad_bytes = 0;
  size_t total = 0;
};
// Capacity for any plan of at most max_batch requests and max_total_tokens tokens (0: unbounded)
// made by plan_decode on `num_cus` CUs, plus, with a prefix kernel, a reserve for cascade plans:
// kCascadeReserve * num_cus units, and partial slots for the prefix splits of every member
// (num_cus x prefix workgroups per CU x ceil(prefix rows / M)) and kCascadeReserve * num_cus for
// their unique splits (PlanInputs::max_units / max_partials: a cascade needing more is not used,
// and its decision says so).
inline constexpr int kCascadeReserve = 4;
// workgroups_per_cu: the planner's occupancy (0: each kernel's resident workgroups per CU from
// catalog.json), which sets the persistent grids.
WorkspaceLayout workspace_layout(const SelectedKernels& k, int max_batch, int64_t max_total_tokens, int num_cus,
                                 int workgroups_per_cu = 0,
                                 bool merge_in_launch = false);
// Row blocks of 16 per request the decode kernel covers (its row groups' blocks, padding included):
// the arrival counters per request.
int merge_blocks_per_request(const SelectedKernels& k);
// Exactly what one plan needs, one workgroup per unit.
WorkspaceLayout workspace_layout_for(const SelectedKernels& k, const Plan& plan, int batch);

// The step tables (issue #31): the host scales, one abi::LaunchHeader per launch, then the
// decode units, the prefix units and the reduce entries of the step, packed. One upload of
// StepTables::used_bytes() bytes from the plan's (pinned) copy per step; the kernels find their
// entries through their headers, so the kernargs (and a captured graph) never change.
namespace step_tables {
inline constexpr size_t scales = 0;  // f32 q_scale, f32 kv_scale: the host values of the upload
inline constexpr size_t decode_header = 32, prefix_header = 64, reduce_header = 96, entries = 128;
// Bytes of the region for a capacity.
// Bytes of the region for a capacity: the entries, then the persistent launches' workgroup
// ranges (int32[grid + 1] each, abi::LaunchHeader::ranges_offset).
inline constexpr size_t bytes(size_t max_units, size_t max_reduces, size_t grids) {
  return entries + 32 * (max_units + max_reduces) + 4 * (grids + 2);
}
}  // namespace step_tables
// Writes the plan's tables (and the two scales) into `dst`, which holds at least
// step_tables::bytes(...) for the plan's capacity; returns the bytes used (what the upload copies).
// The headers' strides are the layout's grids.
size_t pack_step_tables(const Plan& plan, float q_scale, float kv_scale, const WorkspaceLayout& ws, uint8_t* dst);
// One launch header (abi::LaunchHeader) at `dst`; merge_offset / counters_offset: the decode
// launch's in-launch merge (0: none).
void write_launch_header(uint8_t* dst, size_t count, size_t entries_offset, unsigned stride, int64_t merge_offset = 0,
                         int64_t counters_offset = 0, size_t ranges_offset = 0);

// PlanInputs for the kernel shape (padded rows included).
PlanInputs plan_inputs_for(const SelectedKernels& k, const std::vector<int>& kv_lens, int num_cus,
                           int workgroups_per_cu);

// Device addresses of the workspace regions (from a base + WorkspaceLayout, or separate
// allocations as run_decode_on_emulator makes them so that the emulator's bounds checks see
// each table on its own). The launch headers say where their entries are.
struct WorkspaceAddrs {
  uint64_t scales = 0;  // two f32: the host q_scale and kv_scale (step_tables::scales)
  uint64_t decode_header = 0, prefix_header = 0, reduce_header = 0;
  uint64_t partial_o = 0, partial_lse = 0, q_pad = 0, o_pad = 0, lse_pad = 0;
};
WorkspaceAddrs workspace_addrs(uint64_t base, const WorkspaceLayout& ws);

struct DeviceTensors {
  uint64_t q = 0, kv = 0, kv_indices = 0, o = 0, lse = 0;
  uint64_t q_scale = 0, kv_scale = 0;  // device f32 each (the caller's, or the workspace's)
  float sm_scale = 1.0f, logit_cap = 0.0f;
  uint32_t kv_slots = 0;  // token slots of kv (num_pages * page_size): a sparse kernel masks an index past them
};

// The grids of one decode call: fixed by the capacity (never by a step's lengths).
struct LaunchGrids {
  Dim3 decode, prefix, reduce;  // prefix.x = 0: the selection has no prefix kernel (no launch)
  int launches = 0;
};
LaunchGrids launch_grids(const SelectedKernels& k, const WorkspaceLayout& ws);

// The decode call as stream operations: decode, the prefix kernel (when the selection has one)
// and the reduce, each on its capacity grid (launch_grids), whatever the step; with a padded
// selection also the copies of q into the padded q and of o / lse out of it (per batch row). No
// table is copied here: the tables reach the workspace by the step's upload. Kernargs are packed
// by name from the catalog's argument list (KernargPacker), which load_checked_code has checked
// against the code objects. A batch of 0 is no operation at all.
std::vector<DecodeOp> decode_ops(const SelectedKernels& k, const WorkspaceLayout& ws, int batch, const DeviceTensors& t,
                                 const WorkspaceAddrs& wa);

// merge_attn_states (abi::merge_args): one launch of the catalog's mla_merge kernel.
struct MergeTensors {
  uint64_t output = 0, prefix_output = 0, prefix_lse = 0, suffix_output = 0, suffix_lse = 0, output_lse = 0;
  uint32_t rows = 0;
};
DecodeOp merge_op(const CatalogKernel& kernel, const MergeTensors& t);

// The HIP launch configuration of a kernarg buffer: the `extra` array hipModuleLaunchKernel gets
// ({HIP_LAUNCH_PARAM_BUFFER_POINTER, data, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, END}).
struct HipKernargConfig {
  size_t size = 0;
  void* extra[5] = {};
};
void hip_kernarg_config(const std::vector<uint8_t>& kernarg, HipKernargConfig& out);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual mla_backend kind() const = 0;
  virtual std::string target() const = 0;  // "gfx942" / "gfx950"
  virtual std::string device_name() const = 0;
  virtual int num_cus() const = 0;

  virtual uint64_t alloc(size_t bytes) = 0;
  virtual void free(uint64_t ptr) = 0;
  virtual void h2d(uint64_t dst, const void* src, size_t n) = 0;  // synchronous
  virtual void d2h(void* dst, uint64_t src, size_t n) = 0;        // synchronous
  virtual void memset(uint64_t dst, int value, size_t n) = 0;     // synchronous
  virtual void synchronize(void* stream) = 0;
  // Host memory for buffers copied to the device asynchronously (the plan's step tables):
  // page-locked on HIP (hipHostMalloc), so that an async copy from it is a DMA the stream
  // orders; plain memory on the emulator.
  virtual void* host_alloc(size_t bytes) = 0;
  virtual void host_free(void* p) = 0;

  // Runs the ops in order on `stream`. Module loads go through the per-device cache.
  virtual void run(const std::vector<DecodeOp>& ops, void* stream) = 0;
  // Loads (once per device) and checks the code object of `k`.
  virtual void ensure_module(const CatalogKernel& k) = 0;
  // MLA_OPTION_RECORD_LAUNCHES: keep every dispatch's kernarg bytes (the emulator; others ignore it).
  virtual void set_recording(bool) {}
};

// The emulator backend (runtime/emulator_backend.h) for "gfx942" / "gfx950". In the static
// library it is linked in; libmla_runtime.so loads it from the emulator plugin
// (runtime/emulator_plugin.h), RtError(NO_DEVICE) naming the paths tried when it is missing.
std::unique_ptr<Backend> make_emulator_backend(const std::string& target);

// HIP backend for device `ordinal`; throws RtError(NO_DEVICE) with the HIP error when there is
// no such device, or naming the paths tried when no libamdhip64 can be loaded.
std::unique_ptr<Backend> make_hip_backend(int ordinal);
// Whether a HIP runtime (libamdhip64 with the entry points the backend uses) can be loaded.
bool hip_backend_available();

}  // namespace mla::rt
