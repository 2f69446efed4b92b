#include "runtime/emulator_backend.h"

#include <cstring>

#include <fmt/format.h>

#include "emulator/code_object.h"

namespace mla::rt {

KernargPacker& KernargPacker::put(const std::string& name, const void* v, uint32_t size) {
  const KernelArgInfo& a = k_.arg(name);
  if (a.size != size)
    throw CatalogError(fmt::format("kernel {}: argument '{}' is {} bytes in the catalog, packed as {}", k_.name, name,
                                   a.size, size));
  if (a.offset + size > bytes_.size())
    throw CatalogError(fmt::format("kernel {}: argument '{}' at {} overruns the {}-byte kernarg segment", k_.name,
                                   name, a.offset, bytes_.size()));
  std::memcpy(bytes_.data() + a.offset, v, size);
  set_[size_t(&a - k_.args.data())] = true;
  return *this;
}

std::vector<uint8_t> KernargPacker::finish() const {
  for (size_t i = 0; i < k_.args.size(); ++i)
    if (!set_[i] && k_.args[i].name != "reserved")
      throw CatalogError(fmt::format("kernel {}: argument '{}' was not packed", k_.name, k_.args[i].name));
  return bytes_;
}

void check_kernel_interface(const CatalogKernel& k, const emu::CodeObject& co) {
  const emu::Kernel* ek = nullptr;
  for (const auto& kk : co.kernels())
    if (kk.name == k.name) ek = &kk;
  if (!ek) throw CatalogError(fmt::format("{}: code object has no kernel '{}'", k.co_path, k.name));
  if (ek->args.size() != k.args.size())
    throw CatalogError(fmt::format("{}: kernel {} declares {} arguments in its metadata, the catalog {}", k.co_path,
                                   k.name, ek->args.size(), k.args.size()));
  for (size_t i = 0; i < k.args.size(); ++i) {
    const auto& a = k.args[i];
    const auto& b = ek->args[i];
    if (a.name != b.name || a.offset != b.offset || a.size != b.size)
      throw CatalogError(fmt::format(
          "{}: kernel {} argument {}: catalog says '{}' at {} ({} bytes), code object says '{}' at {} ({} bytes)",
          k.co_path, k.name, i, a.name, a.offset, a.size, b.name, b.offset, b.size));
  }
  if (ek->kd.kernarg_size < k.kernarg_size)
    throw CatalogError(fmt::format("{}: kernel {} kernarg size {} < catalog's {}", k.co_path, k.name,
                                   ek->kd.kernarg_size, k.kernarg_size));
}

nlohmann::json DecodeResult::stats() const {
  nlohmann::json j;
  j["kernels"] = {{"decode", decode_kernel}, {"reduce", ran_reduce ? reduce_kernel : ""}};
  j["plan"] = plan.to_json();
  j["decode"] = decode.to_json();
  if (ran_reduce) j["reduce"] = reduce.to_json();
  return j;
}

namespace {

template <class T>
uint64_t upload(emu::Device& dev, const std::vector<T>& v, const std::string& name) {
  size_t bytes = std::max<size_t>(4, v.size() * sizeof(T));
  uint64_t a = dev.alloc(bytes, 256, name);
  if (!v.empty()) dev.write(a, v.data(), v.size() * sizeof(T));
  return a;
}

}  // namespace

DecodeResult run_decode_on_emulator(const Problem& p, const Selection& sel, const EmulatorRunOptions& opts) {
  validate_problem(p);
  const emu::Gfx gfx = p.target == Target::gfx942 ? emu::Gfx::gfx942 : emu::Gfx::gfx950;
  auto dco = emu::CodeObject::load_file(sel.decode.co_path, gfx);
  auto rco = emu::CodeObject::load_file(sel.reduce.co_path, gfx);
  check_kernel_interface(sel.decode, *dco);
  check_kernel_interface(sel.reduce, *rco);

  DecodeResult r;
  r.decode_kernel = sel.decode.name;
  r.reduce_kernel = sel.reduce.name;
  PlanInputs in = plan_inputs_of(p);
  in.num_cus = opts.num_cus ? opts.num_cus : (p.target == Target::gfx942 ? 304 : 256);
  in.workgroups_per_cu = opts.workgroups_per_cu;
  in.tile_tokens = sel.decode.geometry.at("tile_tokens");
  in.rows_per_group = sel.decode.geometry.at("rows_per_group");
  r.plan = plan_decode(in);
  const Plan& plan = r.plan;
  const int M = p.heads * p.qseqlen;

  emu::Device dev(gfx);
  uint64_t q = dev.alloc(p.q.bytes.size(), 256, "q");
  dev.write(q, p.q.bytes.data(), p.q.bytes.size());
  uint64_t kv = dev.alloc(p.kv.bytes.size(), 256, "kv");
  dev.write(kv, p.kv.bytes.data(), p.kv.bytes.size());
  uint64_t kv_indices = upload(dev, p.kv_indices, "kv_indices");
  uint64_t work = upload(dev, plan.units, "work");
  uint64_t reduce_map = upload(dev, plan.reduces, "reduce_map");
  const size_t o_bytes = size_t(p.rows()) * p.heads * 512 * 2;
  uint64_t o = dev.alloc(o_bytes, 256, "o", 0xff);  // poison: unwritten elements stay 0xFFFF
  uint64_t lse = p.return_lse ? dev.alloc(size_t(p.rows()) * p.heads * 4, 256, "lse", 0xff) : 0;
  uint64_t partial_o = plan.num_partials ? dev.alloc(plan.partial_o_bytes(), 256, "partial_o", 0xff) : 0;
  uint64_t partial_lse = plan.num_partials ? dev.alloc(plan.partial_lse_bytes(), 256, "partial_lse", 0xff) : 0;

  KernargPacker dk(sel.decode);
  dk.ptr("q", q).ptr("kv", kv).ptr("kv_indices", kv_indices).ptr("work", work).ptr("o", o).ptr("lse", lse);
  dk.ptr("partial_o", partial_o).ptr("partial_lse", partial_lse);
  dk.f32("scale", float(p.sm_scale * p.q_scale * p.kv_scale));
  dk.f32("kv_scale", float(p.kv_scale)).f32("logit_cap", float(p.logit_cap));
  const unsigned block = sel.decode.geometry.at("workgroup_size");
  r.decode = dev.dispatch(dco, sel.decode.name, {unsigned(plan.units.size()), 1, 1}, {block, 1, 1}, dk.finish(),
                          opts.dispatch);
  if (!plan.reduces.empty()) {
    KernargPacker rk(sel.reduce);
    rk.ptr("reduce_map", reduce_map).ptr("partial_o", partial_o).ptr("partial_lse", partial_lse);
    rk.ptr("o", o).ptr("lse", lse);
    r.reduce = dev.dispatch(rco, sel.reduce.name, {unsigned(plan.reduces.size()), unsigned(M), 1}, {64, 1, 1},
                            rk.finish(), opts.dispatch);
    r.ran_reduce = true;
  }
  r.o = dev.read_vector<uint16_t>(o, o_bytes / 2);
  if (p.return_lse) r.lse = dev.read_vector<float>(lse, size_t(p.rows()) * p.heads);
  return r;
}

}  // namespace mla::rt
