// The emulator backend, and decode (+ reduce) for a Problem on the CPU emulator with exactly the
// kernarg bytes a GPU launch would send: plan on the host, pack kernargs from the catalog's
// argument list (checked against the code object's own metadata), dispatch, read back.
#pragma once
#include <algorithm>
#include <new>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/code_object.h"
#include "emulator/counters.h"
#include "emulator/device.h"
#include "runtime/backend.h"
#include "runtime/catalog.h"
#include "runtime/planner.h"
#include "runtime/problem.h"

namespace mla::rt {

// The emulator backend: an emu::Device, kernels dispatched synchronously. Lives outside
// libmla_runtime.so (in the emulator plugin, or linked into the in-tree tools and tests).
class EmulatorBackend : public Backend {
 public:
  explicit EmulatorBackend(emu::Gfx gfx, emu::DispatchOptions opts = {});
  mla_backend kind() const override { return MLA_BACKEND_EMULATOR; }
  std::string target() const override { return std::string(emu::gfx_name(gfx_)); }
  std::string device_name() const override { return "mla emulator " + target(); }
  int num_cus() const override { return abi::facts(gfx_ == emu::Gfx::gfx942 ? Target::gfx942 : Target::gfx950).num_cus; }
  uint64_t alloc(size_t bytes) override;
  uint64_t alloc_named(size_t bytes, const std::string& name, uint8_t fill);
  void free(uint64_t ptr) override;
  void h2d(uint64_t dst, const void* src, size_t n) override;
  void d2h(void* dst, uint64_t src, size_t n) override;
  void memset(uint64_t dst, int value, size_t n) override;
  void synchronize(void*) override {}
  void* host_alloc(size_t bytes) override { return ::operator new(std::max<size_t>(bytes, 1)); }
  void host_free(void* p) override { ::operator delete(p); }
  void run(const std::vector<DecodeOp>& ops, void* stream) override;
  void ensure_module(const CatalogKernel& k) override;

  struct Dispatched {
    std::string kernel;
    emu::Dim3 grid, block;
    std::vector<uint8_t> kernarg;  // the exact bytes handed to emu::Device::dispatch
    emu::Counters counters;
  };
  // Every dispatch since the last clear (when recording), in order.
  void set_recording(bool on) override { record_ = on; }
  // false: a failing dispatch throws the emulator's own emu::Error (C++ callers); true (default):
  // RtError(MLA_ERROR_BACKEND) naming the launch.
  void set_wrap_errors(bool on) { wrap_ = on; }
  std::vector<Dispatched> take_log();
  emu::DispatchOptions& dispatch_options() { return opts_; }
  emu::Device& device() { return dev_; }

 private:
  emu::Gfx gfx_;
  emu::DispatchOptions opts_;
  std::mutex mu_;
  emu::Device dev_;
  std::map<std::string, std::shared_ptr<const emu::CodeObject>> modules_;  // by co path
  bool record_ = false, wrap_ = true;
  std::vector<Dispatched> log_;
};

struct EmulatorRunOptions {
  int num_cus = 0;            // 0: the target's CU count (304 / 256)
  int workgroups_per_cu = 0;  // planner occupancy assumption; 0: the decode kernel's resident count
  CascadePolicy cascade = CascadePolicy::cost_model;  // shared prefixes (PlanInputs::cascade)
  // Decode and prefix launch widths: 0 = the plan's workgroups (num_cus x workgroups per CU); n =
  // n workgroups, workgroup x taking the planned workgroups [x S / n, (x + 1) S / n)'s units.
  int persistent_grid = 0;
  // Split partials merged inside the decode launch (PlanInputs::merge_in_launch; needs cascade never).
  bool merge_in_launch = false;
  emu::DispatchOptions dispatch;
};

// Global bytes by buffer: what the plan needs (minimum) and what the kernels read (every
// lane's access, as the emulator counts it). The kernarg segments are not global traffic.
struct Traffic {
  struct Item {
    std::string buffer;
    uint64_t needed = 0, read = 0, read_distinct = 0;
  };
  std::vector<Item> items;  // kv, kv_indices, q, work, reduce_map, partial_o, partial_lse
  uint64_t needed() const;
  uint64_t read() const;
  double ratio() const { return needed() ? double(read()) / double(needed()) : 0.0; }
  nlohmann::json to_json() const;
};

struct DecodeResult {
  std::vector<uint16_t> o;  // [rows, heads, 512] bf16 bits
  std::vector<float> lse;   // [rows, heads] (when the problem asks for it)
  Plan plan;
  emu::Counters decode, prefix, reduce;
  bool ran_decode = false, ran_prefix = false, ran_reduce = false;
  Traffic traffic;
  // KV bytes of the distinct (page, token) entries the batch's requests hold: what reading every
  // KV entry once would cost (shared prefixes counted once).
  uint64_t kv_distinct_bytes = 0;
  std::string decode_kernel, prefix_kernel, reduce_kernel;
  nlohmann::json stats() const;
};

DecodeResult run_decode_on_emulator(const Problem& p, const Selection& kernels, const EmulatorRunOptions& opts = {});

}  // namespace mla::rt
