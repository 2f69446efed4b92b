// Performance counters of a dispatch (and of each workgroup).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "emulator/inst.h"

namespace mla::emu {

constexpr size_t kNumInstClasses = 12;
const char* inst_class_name(InstClass c);

struct WorkgroupCounters {
  unsigned id[3] = {0, 0, 0};
  std::array<uint64_t, kNumInstClasses> insts{};  // wave-instructions by class
  uint64_t wave_insts = 0;
  uint64_t global_read_bytes = 0, global_write_bytes = 0;
  uint64_t lds_read_bytes = 0, lds_write_bytes = 0;
  uint64_t mfma = 0, mfma_macs = 0;  // MACs per issued MFMA = m*n*k*blocks
  uint64_t barriers = 0;             // s_barrier executed (per wave)
  // LDS bank model (modeled, not a hardware fact): 32 banks of 4 bytes, 128 bytes per clock;
  // lanes in order in groups that move 128 bytes (32 lanes of 4 bytes, 16 of 8, 8 of 16); a
  // group takes as many clocks as the most distinct dwords any one bank holds (one dword read
  // by several lanes is a broadcast). ideal = the groups' count, as if conflict-free.
  uint64_t lds_bank_cycles = 0, lds_ideal_cycles = 0;
  // Measurement only (no effect on execution): the peak bytes of vector-memory loads issued and
  // not yet retired by an s_waitcnt vmcnt (the waitcnt scoreboard), per wave and summed over the
  // workgroup's waves at one moment of the interleaving. A retirement happens at the wait that
  // covers the load (or at s_endpgm), so this is the bytes the code keeps in flight as its
  // waits allow, i.e. an upper bound of what hardware may have outstanding. add() keeps the max.
  uint64_t vm_load_peak_wave_bytes = 0, vm_load_peak_wg_bytes = 0;
  unsigned waves = 0;
  void add(const WorkgroupCounters& o);
};

// Global traffic of one named allocation during a dispatch.
struct BufferTraffic {
  std::string name;
  uint64_t read = 0, read_distinct = 0, written = 0, written_distinct = 0;
};

// One relaxed-mode finding: a strict-check violation that was reported and passed over.
struct Finding {
  std::string rule;     // waitcnt, hazard, lds_race, lds_dma
  uint64_t pc = 0;      // offset from the kernel entry
  std::string text;     // instruction text
  std::string message;  // the first occurrence's full message
  uint64_t count = 0;   // occurrences (all waves, all workgroups)
  // waitcnt reads: the fewest / most wait states between the load's issue and the read.
  int64_t min_distance = -1, max_distance = -1;
};

struct Counters {
  WorkgroupCounters total;
  std::vector<BufferTraffic> buffers;  // per allocation touched (kernarg segment included)
  uint64_t global_read_distinct = 0, global_write_distinct = 0;  // distinct bytes touched
  unsigned workgroups = 0;
  double seconds = 0;  // host time of the dispatch
  std::vector<WorkgroupCounters> per_workgroup;  // filled when DispatchOptions::per_workgroup
  std::vector<Finding> findings;                  // relaxed mode: one entry per (rule, pc)
  nlohmann::json to_json() const;
};

}  // namespace mla::emu
