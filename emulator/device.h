// The emulator's C++ API: a device memory space plus kernel dispatch.
//
//   mla::emu::Device dev(Gfx::gfx950);
//   uint64_t a = dev.alloc(4096);                 // zero-filled, 256-byte aligned
//   dev.write(a, host.data(), host.size());
//   auto co = mla::emu::CodeObject::load_file("k.co");
//   mla::emu::Counters c = dev.dispatch(*co, "kernel", {grid_x,1,1}, {256,1,1}, kernarg_bytes);
//   dev.read(a, host.data(), host.size());
//
// dispatch() runs every workgroup of the grid (grid is counted in workgroups, like HIP's
// gridDim) and throws mla::emu::Error on the first violation (see docs/emulator.md).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/code_object.h"
#include "emulator/counters.h"
#include "emulator/gfx.h"

namespace mla::emu {

struct Program;

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct DispatchOptions {
  // Wave interleaving inside a workgroup: round robin, `quantum` instructions per turn
  // (default 1); with `random_seed` != 0 each turn goes to a uniformly random runnable wave.
  unsigned quantum = 1;
  uint64_t random_seed = 0;
  // Strictness switches (all on by default), one per timing/race rule:
  //   check_waitcnt   a load's destination read or overwritten before an s_waitcnt covers it
  //   check_hazards   manually inserted wait states (hazards.cpp)
  //   check_lds_race  two waves touch the same LDS bytes with no barrier between
  //   check_lds_dma   LDS bytes written by an outstanding LDS-DMA load touched before its vmcnt
  //   check_lds_uninit  an LDS byte read before any write of the workgroup (LDS is not
  //                   initialised when a workgroup starts: it holds what an earlier one left)
  bool check_waitcnt = true, check_hazards = true, check_lds_race = true, check_lds_dma = true;
  bool check_lds_uninit = true;
  //   check_memory_model  a load of global bytes that a workgroup on another XCD wrote in this
  //                   dispatch without the writer's agent-scope release (buffer_wbl2 sc1, or a
  //                   store/atomic that is coherent at agent scope) or without the reader's
  //                   agent-scope acquire (buffer_inv sc1) after it (docs/emulator.md, "Memory
  //                   model": each XCD's L2 is a write-back cache not coherent with the others)
  bool check_memory_model = true;
  // XCDs of the device: workgroup i (linear id x + gx*(y + gy*z)) runs on XCD i mod num_xcds.
  // 0 = the target's (abi/mla_abi.h TargetFacts::num_xcds: 8 on MI300X and MI355X).
  unsigned num_xcds = 0;
  // The order in which workgroups run (they run one after another): by default linear id 0, 1,
  // 2, ...; `workgroup_order` (a permutation of the linear ids) or, when it is empty,
  // `workgroup_order_seed` != 0 (a uniformly random permutation) changes it, so that any
  // workgroup can be the last to arrive. The XCD of a workgroup stays its linear id mod num_xcds.
  std::vector<uint32_t> workgroup_order;
  uint64_t workgroup_order_seed = 0;
  // Relaxed mode: a violation of one of the six rules above is recorded in
  // Counters::findings, printed once per (rule, pc) as a warning on `warnings` (std::cerr when
  // null) and execution goes on (docs/emulator.md, "Relaxed mode", says what the registers
  // hold). Out-of-bounds accesses, unsupported instructions etc. stay errors.
  bool relaxed = false;
  std::ostream* warnings = nullptr;
  // Relaxed mode: what a register read while a load into it is still outstanding (no covering
  // s_waitcnt) holds (docs/emulator.md, "Relaxed mode"):
  //   latency         (default) the load's data once `*_latency` wait states (the wave's clock:
  //                   1 per instruction, N+1 per s_nop N) passed since it issued (the load
  //                   landed before the read, as on hardware whose timing worked out), else the
  //                   register's previous value (the read issued within the load's latency);
  //                   an s_waitcnt that retires a load not landed yet stalls the wave (its
  //                   landing clock) until it lands, so the loads issued after it land sooner;
  //   loaded_value    always the load's data;  previous_value  always the previous value.
  // The latencies are a timing model calibrated on aiter's kernels, not a hardware fact.
  enum class EarlyRead { latency, loaded_value, previous_value };
  EarlyRead early_read = EarlyRead::latency;
  unsigned lds_latency = 16, smem_latency = 16, vmem_latency = 64;
  // When set, per decoded instruction index, how often a wave executed it (resized to the
  // program's instruction count; accumulates over dispatches of the same program).
  std::vector<uint64_t>* exec_counts = nullptr;
  bool per_workgroup = false;       // fill Counters::per_workgroup
  bool count_distinct = true;       // distinct global bytes (costs a bitmap per allocation)
  uint64_t max_wave_instructions = 2'000'000'000ull;  // runaway guard (whole dispatch)
  uint64_t max_instructions_per_wave = 20'000'000ull;  // runaway guard (one wave)
  // Initial value of VGPRs/SGPRs not set by the ABI (a poison pattern shows use of garbage).
  uint32_t poison = 0;
  // Dynamic LDS bytes added to the descriptor's group_segment_fixed_size (HIP sharedMemBytes).
  uint32_t dynamic_lds = 0;
  // When set, every executed instruction is printed: "wg x,y,z wave w +0xOFF: text".
  std::ostream* trace = nullptr;
};

struct Allocation {
  uint64_t base = 0;
  std::string name;
  std::vector<uint8_t> data;
  std::vector<uint64_t> read_map, write_map;  // distinct-byte bitmaps during a dispatch (lazy)
  uint64_t read_bytes = 0, write_bytes = 0;   // bytes accessed during a dispatch (every lane)
  bool internal = false;  // kernarg segment / dispatch packet: not counted as global traffic
  // check_memory_model: per 4 KiB page (allocated when first written, kept across dispatches),
  // per byte, the device-wide number of the last write record; numbers at or below the running
  // dispatch's base are earlier dispatches' (already released by the kernel boundary).
  std::vector<std::unique_ptr<uint32_t[]>> coh_pages;
  uint64_t coh_stamp = 0;  // the serial of the last dispatch that wrote here
};

class Device {
 public:
  explicit Device(Gfx gfx = Gfx::gfx950);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  Gfx gfx() const { return gfx_; }
  // New allocation of `bytes` filled with `fill`; base aligned to `align` (power of two >= 4).
  // Allocations are separated by unmapped guard gaps, so running off the end faults.
  uint64_t alloc(size_t bytes, size_t align = 256, std::string name = "", uint8_t fill = 0);
  void free(uint64_t base);
  void write(uint64_t addr, const void* src, size_t n);
  void read(uint64_t addr, void* dst, size_t n) const;
  template <class T>
  std::vector<T> read_vector(uint64_t addr, size_t count) const {
    std::vector<T> v(count);
    read(addr, v.data(), count * sizeof(T));
    return v;
  }
  // The allocation containing [addr, addr+n), or nullptr.
  Allocation* find(uint64_t addr, size_t n);
  const Allocation* find(uint64_t addr, size_t n) const;
  // The allocation starting at or below addr (nullptr if none): names the buffer an
  // out-of-bounds access ran off.
  const Allocation* nearest_below(uint64_t addr) const;

  // Runs `kernel` of `co`. `kernarg` shorter than the descriptor's kernarg size is zero-padded;
  // hidden arguments named in the metadata (block counts, group sizes, ...) are filled in.
  Counters dispatch(std::shared_ptr<const CodeObject> co, std::string_view kernel, Dim3 grid, Dim3 block,
                    std::vector<uint8_t> kernarg, const DispatchOptions& opts = {});

 private:
  Gfx gfx_;
  uint64_t next_ = 0x100000000ull;
  std::map<uint64_t, std::unique_ptr<Allocation>> allocs_;
  Allocation* last_ = nullptr;
  uint64_t coh_serial_ = 0;  // dispatches run with check_memory_model
  uint32_t coh_next_ = 0;    // write-record numbers used so far (Allocation::coh_pages)
  std::map<std::pair<const CodeObject*, std::string>, std::shared_ptr<const Program>> programs_;
  friend struct DispatchState;
  friend class Executor;
};

// Kernarg packing helper.
struct KernargBuilder {
  std::vector<uint8_t> bytes;
  template <class T>
  KernargBuilder& put(size_t offset, T v) {
    if (bytes.size() < offset + sizeof(T)) bytes.resize(offset + sizeof(T));
    __builtin_memcpy(bytes.data() + offset, &v, sizeof(T));
    return *this;
  }
};

}  // namespace mla::emu
