#include "kernels/kernargs.h"

#include <fmt/format.h>

#include <stdexcept>

namespace mla::gen {

void declare_kernargs(Program& p, std::span<const abi::KernargField> table, const KernelSpec& s) {
  auto elem = [](DType d) { return d == DType::fp8 ? "const uint8_t*" : "const uint16_t*"; };
  for (const abi::KernargField& f : table) {
    std::string type(f.type);
    if (f.name == "q") type = elem(s.q_dtype);
    else if (f.name == "kv") type = s.kv_ds_mla ? "const uint8_t*" : elem(s.kv_dtype);
    if (type.empty()) throw std::logic_error(fmt::format("kernarg {} has no type", f.name));
    const KernelArg& a = f.pointer ? p.abi.add_buffer(std::string(f.name), type)
                                   : p.abi.add_value(std::string(f.name), f.size, type);
    if (a.offset != f.offset || a.size != f.size)
      throw std::logic_error(fmt::format("kernarg {} landed at {} ({} bytes), the contract says {} ({} bytes)", f.name,
                                         a.offset, a.size, f.offset, f.size));
  }
  const uint32_t end = table.empty() ? 0 : table.back().offset + table.back().size;
  if (p.abi.kernarg_size != end)
    throw std::logic_error(fmt::format("kernarg segment is {} bytes, the contract says {}", p.abi.kernarg_size, end));
}

}  // namespace mla::gen
