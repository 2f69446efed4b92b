// `mlaemu run` dispatch descriptions (JSON); format documented in docs/emulator.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mla::emu {

struct RunOverrides {
  std::string out_dir;
  std::optional<uint64_t> seed;
  std::optional<unsigned> quantum;
  bool no_hazards = false, no_waitcnt = false, no_race = false, no_lds_dma = false, no_lds_uninit = false, per_workgroup = false, trace = false;
  bool no_memory_model = false;
  std::optional<uint64_t> workgroup_order_seed;
  bool relaxed = false;  // report strict-check violations once per rule+pc on stderr and go on
};

// Loads the code object, allocates and fills the buffers, packs the kernarg, dispatches, writes
// every buffer back as <out>/<name>.npy and the counters as <out>/counters.json. Returns
// {"counters": ..., "outputs": {name: path}}. Throws mla::emu::Error.
nlohmann::json run_dispatch_json(const std::string& path, const RunOverrides& ov = {});
nlohmann::json run_dispatch(const nlohmann::json& spec, const std::string& base_dir, const RunOverrides& ov = {});

}  // namespace mla::emu
