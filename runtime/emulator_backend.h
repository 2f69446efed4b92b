// Runs decode (+ reduce) for a Problem on the CPU emulator, with exactly the kernarg bytes a
// GPU launch would send: plan on the host, pack kernargs from the catalog's argument list
// (checked against the code object's own metadata), dispatch, read back.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/counters.h"
#include "emulator/device.h"
#include "runtime/catalog.h"
#include "runtime/planner.h"
#include "runtime/problem.h"

namespace mla::rt {

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

// The catalog's argument list for `kernel` must match the code object's metadata exactly.
void check_kernel_interface(const CatalogKernel& kernel, const emu::CodeObject& co);

struct EmulatorRunOptions {
  int num_cus = 0;            // 0: the target's CU count (304 / 256)
  int workgroups_per_cu = 0;  // planner occupancy assumption; 0: the decode kernel's resident count
  CascadePolicy cascade = CascadePolicy::cost_model;  // shared prefixes (PlanInputs::cascade)
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
