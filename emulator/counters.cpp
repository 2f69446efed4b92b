#include <algorithm>
#include "emulator/counters.h"

#include <nlohmann/json.hpp>

namespace mla::emu {

const char* inst_class_name(InstClass c) {
  static const char* names[kNumInstClasses] = {"salu", "valu", "smem", "vmem_load", "vmem_store", "lds",
                                                "mfma", "branch", "waitcnt", "nop", "barrier", "other"};
  return names[static_cast<size_t>(c)];
}

void WorkgroupCounters::add(const WorkgroupCounters& o) {
  for (size_t i = 0; i < kNumInstClasses; ++i) insts[i] += o.insts[i];
  wave_insts += o.wave_insts;
  global_read_bytes += o.global_read_bytes;
  global_write_bytes += o.global_write_bytes;
  lds_read_bytes += o.lds_read_bytes;
  lds_write_bytes += o.lds_write_bytes;
  mfma += o.mfma;
  mfma_macs += o.mfma_macs;
  barriers += o.barriers;
  lds_bank_cycles += o.lds_bank_cycles;
  lds_ideal_cycles += o.lds_ideal_cycles;
  vm_load_peak_wave_bytes = std::max(vm_load_peak_wave_bytes, o.vm_load_peak_wave_bytes);
  vm_load_peak_wg_bytes = std::max(vm_load_peak_wg_bytes, o.vm_load_peak_wg_bytes);
  waves += o.waves;
}

static nlohmann::json wg_json(const WorkgroupCounters& c) {
  nlohmann::json j;
  nlohmann::json by;
  for (size_t i = 0; i < kNumInstClasses; ++i) by[inst_class_name(static_cast<InstClass>(i))] = c.insts[i];
  j["instructions"] = by;
  j["wave_instructions"] = c.wave_insts;
  j["global_read_bytes"] = c.global_read_bytes;
  j["global_write_bytes"] = c.global_write_bytes;
  j["lds_read_bytes"] = c.lds_read_bytes;
  j["lds_write_bytes"] = c.lds_write_bytes;
  j["mfma"] = c.mfma;
  j["mfma_macs"] = c.mfma_macs;
  j["barriers"] = c.barriers;
  j["lds_bank_cycles_modeled"] = c.lds_bank_cycles;
  j["vm_load_peak_wave_bytes"] = c.vm_load_peak_wave_bytes;
  j["vm_load_peak_workgroup_bytes"] = c.vm_load_peak_wg_bytes;
  j["lds_ideal_cycles_modeled"] = c.lds_ideal_cycles;
  j["waves"] = c.waves;
  return j;
}

nlohmann::json Counters::to_json() const {
  nlohmann::json j = wg_json(total);
  j["global_read_distinct_bytes"] = global_read_distinct;
  j["global_write_distinct_bytes"] = global_write_distinct;
  j["workgroups"] = workgroups;
  for (const auto& b : buffers)
    j["buffers"][b.name.empty() ? "(unnamed)" : b.name] = {{"read", b.read},
                                                          {"read_distinct", b.read_distinct},
                                                          {"written", b.written},
                                                          {"written_distinct", b.written_distinct}};
  j["seconds"] = seconds;
  if (!per_workgroup.empty()) {
    auto arr = nlohmann::json::array();
    for (auto& w : per_workgroup) {
      auto e = wg_json(w);
      e["id"] = {w.id[0], w.id[1], w.id[2]};
      arr.push_back(e);
    }
    j["per_workgroup"] = arr;
  }
  if (!findings.empty()) {
    auto arr = nlohmann::json::array();
    for (auto& f : findings)
    {
      nlohmann::json e = {{"rule", f.rule}, {"pc", f.pc}, {"text", f.text}, {"count", f.count}, {"message", f.message}};
      if (f.min_distance >= 0) e["wait_states_since_issue"] = {f.min_distance, f.max_distance};
      arr.push_back(e);
    }
    j["findings"] = arr;
  }
  return j;
}

}  // namespace mla::emu
