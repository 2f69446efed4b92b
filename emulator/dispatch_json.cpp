#include "emulator/dispatch_json.h"

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "emulator/device.h"
#include "emulator/npy.h"

namespace mla::emu {

namespace fs = std::filesystem;

nlohmann::json run_dispatch_json(const std::string& path, const RunOverrides& ov) {
  std::ifstream f(path);
  if (!f) throw Error("dispatch", "cannot open dispatch file " + path);
  nlohmann::json spec;
  try {
    spec = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw Error("dispatch", fmt::format("{}: invalid JSON: {}", path, e.what()));
  }
  return run_dispatch(spec, fs::path(path).parent_path().string(), ov);
}

static std::string resolve(const std::string& base, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute() || base.empty()) return p;
  return (fs::path(base) / p).string();
}

// An integer field in [lo, hi], checked before narrowing: a value outside is an error naming
// the field, never a wrapped or truncated one.
static uint64_t int_field(const nlohmann::json& j, const std::string& what, uint64_t lo, uint64_t hi) {
  if (!j.is_number_integer() || (j.is_number_integer() && !j.is_number_unsigned() && j.get<int64_t>() < 0) ||
      j.get<uint64_t>() < lo || j.get<uint64_t>() > hi)
    throw Error("dispatch", fmt::format("'{}' = {} (allowed: an integer in {}..{})", what, j.dump(), lo, hi));
  return j.get<uint64_t>();
}
static int64_t signed_field(const nlohmann::json& j, const std::string& what, int64_t lo, int64_t hi) {
  if (!j.is_number_integer() || (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX)) ||
      j.get<int64_t>() < lo || j.get<int64_t>() > hi)
    throw Error("dispatch", fmt::format("'{}' = {} (allowed: an integer in {}..{})", what, j.dump(), lo, hi));
  return j.get<int64_t>();
}

// Launch limits: a workgroup holds at most 1024 work-items (AMDGPUUsage, max_flat_workgroup_size);
// the grid at most 2^24 workgroups here (an emulator run, not a hardware limit).
constexpr uint64_t kMaxGridWorkgroups = uint64_t(1) << 24, kMaxWorkgroupSize = 1024;
constexpr uint64_t kMaxKernargBytes = 64 * 1024, kMaxBufferBytes = uint64_t(4) << 30;

static Dim3 dim3(const nlohmann::json& j, const char* what, uint64_t max_product) {
  Dim3 d;
  if (!j.is_number() && (!j.is_array() || j.empty() || j.size() > 3))
    throw Error("dispatch", fmt::format("'{}' must be a number or [x, y, z]", what));
  const nlohmann::json a = j.is_number() ? nlohmann::json::array({j}) : j;
  unsigned* dims[3] = {&d.x, &d.y, &d.z};
  for (size_t i = 0; i < a.size(); ++i) *dims[i] = unsigned(int_field(a[i], fmt::format("{}[{}]", what, i), 1, max_product));
  if (uint64_t(d.x) * d.y * d.z > max_product)
    throw Error("dispatch", fmt::format("'{}' = {} has {} items (allowed: at most {})", what, j.dump(),
                                        uint64_t(d.x) * d.y * d.z, max_product));
  return d;
}

// A buffer's name names its output file: letters, digits, '_', '-' and '.', not starting with '.'.
static void check_buffer_name(const std::string& n) {
  if (n.empty() || n[0] == '.' || n.size() > 128 ||
      n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != std::string::npos)
    throw Error("dispatch", fmt::format("buffer name '{}' (allowed: 1-128 letters, digits, '_', '-', '.', not "
                                        "starting with '.': it names the output file in out_dir)", n));
}

nlohmann::json run_dispatch(const nlohmann::json& spec, const std::string& base, const RunOverrides& ov) {
  try {
    auto need = [&](const char* k) -> const nlohmann::json& {
      if (!spec.contains(k)) throw Error("dispatch", fmt::format("dispatch JSON lacks '{}'", k));
      return spec.at(k);
    };
    auto co = CodeObject::load_file(resolve(base, need("code_object").get<std::string>()));
    std::string kname = need("kernel").get<std::string>();
    Dim3 grid = dim3(need("grid"), "grid", kMaxGridWorkgroups), block = dim3(need("block"), "block", kMaxWorkgroupSize);
    Device dev(co->gfx());
    struct Buf { std::string name; uint64_t addr; size_t size; std::string dtype; std::vector<size_t> shape; };
    std::vector<Buf> bufs;
    for (auto& b : spec.value("buffers", nlohmann::json::array())) {
      Buf x;
      x.name = b.at("name").get<std::string>();
      check_buffer_name(x.name);
      const std::string w = "buffers." + x.name;
      const size_t align = b.contains("align") ? size_t(int_field(b.at("align"), w + ".align", 4, 1 << 20)) : 256;
      if (align & (align - 1)) throw Error("dispatch", fmt::format("'{}.align' = {} (allowed: a power of two)", w, align));
      const uint8_t fill = b.contains("fill") ? uint8_t(int_field(b.at("fill"), w + ".fill", 0, 255)) : 0;
      std::optional<npy::Array> init;
      if (b.contains("init")) init = npy::load(resolve(base, b.at("init").get<std::string>()));
      x.size = b.contains("size") ? size_t(int_field(b.at("size"), w + ".size", 0, kMaxBufferBytes)) : init ? init->data.size() : 0;
      if (init && init->data.size() > x.size)
        throw Error("dispatch", fmt::format("buffer {}: init data ({} bytes) is larger than size {}", x.name, init->data.size(), x.size));
      x.dtype = b.value("dtype", init ? init->dtype : std::string("|u1"));
      try {
        npy::Array probe;
        probe.dtype = x.dtype;
        probe.item_size();
      } catch (const std::exception& e) {
        throw Error("dispatch", fmt::format("'{}.dtype': {}", w, e.what()));
      }
      if (b.contains("shape")) x.shape = b.at("shape").get<std::vector<size_t>>();
      else if (init && init->data.size() == x.size) x.shape = init->shape;
      x.addr = dev.alloc(x.size, align, x.name, fill);
      if (init) dev.write(x.addr, init->data.data(), init->data.size());
      bufs.push_back(std::move(x));
    }
    auto addr_of = [&](const std::string& n) -> uint64_t {
      for (auto& b : bufs) if (b.name == n) return b.addr;
      throw Error("dispatch", "kernarg field names unknown buffer '" + n + "'");
    };
    KernargBuilder kb;
    const auto& ka = spec.value("kernarg", nlohmann::json::object());
    if (ka.contains("size")) kb.bytes.resize(size_t(int_field(ka.at("size"), "kernarg.size", 0, kMaxKernargBytes)), 0);
    for (size_t i = 0; i < ka.value("fields", nlohmann::json::array()).size(); ++i) {
      const auto& fld = ka.at("fields")[i];
      const std::string w = fmt::format("kernarg.fields[{}]", i);
      std::string type = fld.value("type", "u32");
      const size_t width = fld.contains("buffer") ? 8 : type == "u8" ? 1 : type == "u16" ? 2 : type == "u64" || type == "i64" ? 8 : 4;
      const size_t off = size_t(int_field(fld.at("offset"), w + ".offset", 0, kMaxKernargBytes - width));
      auto value = [&](uint64_t hi) { return int_field(fld.at("value"), w + ".value", 0, hi); };
      auto svalue = [&](int64_t lo, int64_t hi) { return signed_field(fld.at("value"), w + ".value", lo, hi); };
      if (fld.contains("buffer")) {
        const uint64_t byte_offset = fld.contains("byte_offset") ? int_field(fld.at("byte_offset"), w + ".byte_offset", 0, kMaxBufferBytes) : 0;
        kb.put<uint64_t>(off, addr_of(fld.at("buffer").get<std::string>()) + byte_offset);
      } else if (type == "u32") kb.put<uint32_t>(off, uint32_t(value(UINT32_MAX)));
      else if (type == "i32") kb.put<int32_t>(off, int32_t(svalue(INT32_MIN, INT32_MAX)));
      else if (type == "f32") kb.put<float>(off, fld.at("value").get<float>());
      else if (type == "u64") kb.put<uint64_t>(off, value(UINT64_MAX));
      else if (type == "i64") kb.put<int64_t>(off, svalue(INT64_MIN, INT64_MAX));
      else if (type == "u16") kb.put<uint16_t>(off, uint16_t(value(UINT16_MAX)));
      else if (type == "u8") kb.put<uint8_t>(off, uint8_t(value(UINT8_MAX)));
      else throw Error("dispatch", "unknown kernarg field type '" + type + "' (u8/u16/u32/i32/f32/u64/i64, or buffer)");
    }
    DispatchOptions opts;
    const auto& o = spec.value("options", nlohmann::json::object());
    opts.random_seed = o.value("seed", 0ull);
    opts.quantum = o.value("quantum", 1u);
    opts.check_hazards = o.value("check_hazards", true);
    opts.check_waitcnt = o.value("check_waitcnt", true);
    opts.check_lds_race = o.value("check_lds_race", true);
    opts.check_lds_dma = o.value("check_lds_dma", true);
    opts.check_lds_uninit = o.value("check_lds_uninit", true);
    opts.check_memory_model = o.value("check_memory_model", true);
    opts.num_xcds = o.value("num_xcds", 0u);
    opts.workgroup_order_seed = o.value("workgroup_order_seed", 0ull);
    opts.relaxed = o.value("relaxed", false);
    opts.per_workgroup = o.value("per_workgroup", false);
    if (ov.seed) opts.random_seed = *ov.seed;
    if (ov.quantum) opts.quantum = *ov.quantum;
    if (ov.no_hazards) opts.check_hazards = false;
    if (ov.no_waitcnt) opts.check_waitcnt = false;
    if (ov.no_race) opts.check_lds_race = false;
    if (ov.no_lds_dma) opts.check_lds_dma = false;
    if (ov.no_lds_uninit) opts.check_lds_uninit = false;
    if (ov.no_memory_model) opts.check_memory_model = false;
    if (ov.workgroup_order_seed) opts.workgroup_order_seed = *ov.workgroup_order_seed;
    if (ov.relaxed) opts.relaxed = true;
    if (ov.per_workgroup) opts.per_workgroup = true;
    opts.dynamic_lds = o.value("dynamic_lds", 0u);
    if (ov.trace) opts.trace = &std::cerr;
    Counters c = dev.dispatch(co, kname, grid, block, kb.bytes, opts);
    std::string out = !ov.out_dir.empty() ? ov.out_dir : resolve(base, spec.value("out_dir", std::string(".")));
    fs::create_directories(out);
    nlohmann::json res;
    res["counters"] = c.to_json();
    for (auto& b : bufs) {
      npy::Array a;
      a.dtype = b.dtype;
      a.data.resize(b.size);
      dev.read(b.addr, a.data.data(), b.size);
      size_t isz = a.item_size();
      if (!b.shape.empty()) a.shape = b.shape;
      else a.shape = {isz ? b.size / isz : b.size};
      std::string p = (fs::path(out) / (b.name + ".npy")).string();
      npy::save(p, a);
      res["outputs"][b.name] = p;
    }
    std::ofstream(fs::path(out) / "counters.json") << res["counters"].dump(2) << "\n";
    return res;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("dispatch", std::string("dispatch JSON: ") + e.what());
  }
}

}  // namespace mla::emu
