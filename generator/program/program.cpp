#include "program/program.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace mla::gen {

namespace {
uint32_t align_up(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }
}  // namespace

const KernelArg& KernelAbi::add_buffer(const std::string& name, const std::string& type_name) {
  uint32_t off = align_up(kernarg_size, 8);
  args.push_back({name, off, 8, "global_buffer", "global", type_name});
  kernarg_size = off + 8;
  return args.back();
}

const KernelArg& KernelAbi::add_value(const std::string& name, uint32_t size, const std::string& type_name) {
  uint32_t off = align_up(kernarg_size, size);
  args.push_back({name, off, size, "by_value", "", type_name});
  kernarg_size = off + size;
  return args.back();
}

const KernelArg* KernelAbi::find(const std::string& name) const {
  for (const auto& a : args)
    if (a.name == name) return &a;
  return nullptr;
}

RegisterUse Program::register_use() const {
  RegisterUse u;
  // The ABI places the kernarg pointer and workgroup IDs in SGPRs and the work-item IDs in v0
  // whether or not the code reads them; the descriptor must allocate them.
  u.sgprs = user_sgpr_count() + abi.workgroup_id_x + abi.workgroup_id_y + abi.workgroup_id_z;
  u.vgprs = 1;
  auto note = [&](const Operand& o) {
    int end = o.index + o.count;
    switch (o.kind) {
      case Operand::Kind::SGPR: u.sgprs = std::max(u.sgprs, end); break;
      case Operand::Kind::VGPR: u.vgprs = std::max(u.vgprs, end); break;
      case Operand::Kind::AGPR: u.agprs = std::max(u.agprs, end); break;
      case Operand::Kind::Special:
        if (o.index == uint16_t(SpecialId::vcc) || o.index == uint16_t(SpecialId::vcc_lo) ||
            o.index == uint16_t(SpecialId::vcc_hi))
          u.uses_vcc = true;
        break;
      default: break;
    }
  };
  for (const auto& i : insts) {
    for (const auto& o : i.dst) note(o);
    for (const auto& o : i.src) note(o);
    if (i.has(kUseVcc)) u.uses_vcc = true;
  }
  return u;
}

}  // namespace mla::gen
