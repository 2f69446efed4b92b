#include "emulator/opcodes.h"

#include <mutex>
#include <unordered_map>

#include "emulator/mfma.h"

namespace mla::emu {

namespace {
std::unordered_map<std::string, OpInfo>& table() {
  static std::unordered_map<std::string, OpInfo> t;
  return t;
}
std::unordered_map<std::string, OpInfo>& mfma_table(Gfx g) {
  static std::unordered_map<std::string, OpInfo> t[2];
  return t[g == Gfx::gfx942 ? 0 : 1];
}
std::mutex& mu() {
  static std::mutex m;
  return m;
}
void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_salu_ops();
    register_valu_ops();
    register_vmem_ops();
    register_mfma_ops();
  });
}
}  // namespace

void add_op(const OpInfo& info) { table()[info.name] = info; }

// Defined in exec_mfma.cpp: the handler and OpInfo template for an MFMA.
OpInfo make_mfma_op(const MfmaInfo& mi, Gfx gfx, std::string_view name);

const OpInfo* find_op(std::string_view name, Gfx gfx) {
  ensure_registered();
  std::lock_guard<std::mutex> lock(mu());
  std::string key(name);
  auto& t = table();
  if (auto it = t.find(key); it != t.end()) return &it->second;
  if (key.rfind("v_mfma", 0) == 0 || key.rfind("v_smfmac", 0) == 0) {
    auto& mt = mfma_table(gfx);
    if (auto it = mt.find(key); it != mt.end()) return &it->second;
    const MfmaInfo* mi = find_mfma(key, gfx);
    if (!mi) return nullptr;
    auto [it, _] = mt.emplace(key, make_mfma_op(*mi, gfx, key));
    return &it->second;
  }
  return nullptr;
}

}  // namespace mla::emu
