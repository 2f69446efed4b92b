#include "emulator/dispatch_json.h"

#include <fmt/format.h>

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

static Dim3 dim3(const nlohmann::json& j, const char* what) {
  Dim3 d;
  if (j.is_number()) { d.x = j.get<unsigned>(); return d; }
  if (!j.is_array() || j.empty() || j.size() > 3) throw Error("dispatch", fmt::format("'{}' must be a number or [x, y, z]", what));
  d.x = j[0].get<unsigned>();
  if (j.size() > 1) d.y = j[1].get<unsigned>();
  if (j.size() > 2) d.z = j[2].get<unsigned>();
  return d;
}

nlohmann::json run_dispatch(const nlohmann::json& spec, const std::string& base, const RunOverrides& ov) {
  try {
    auto need = [&](const char* k) -> const nlohmann::json& {
      if (!spec.contains(k)) throw Error("dispatch", fmt::format("dispatch JSON lacks '{}'", k));
      return spec.at(k);
    };
    auto co = CodeObject::load_file(resolve(base, need("code_object").get<std::string>()));
    std::string kname = need("kernel").get<std::string>();
    Dim3 grid = dim3(need("grid"), "grid"), block = dim3(need("block"), "block");
    Device dev(co->gfx());
    struct Buf { std::string name; uint64_t addr; size_t size; std::string dtype; std::vector<size_t> shape; };
    std::vector<Buf> bufs;
    for (auto& b : spec.value("buffers", nlohmann::json::array())) {
      Buf x;
      x.name = b.at("name").get<std::string>();
      size_t align = b.value("align", 256);
      uint8_t fill = uint8_t(b.value("fill", 0));
      std::optional<npy::Array> init;
      if (b.contains("init")) init = npy::load(resolve(base, b.at("init").get<std::string>()));
      x.size = b.contains("size") ? b.at("size").get<size_t>() : init ? init->data.size() : 0;
      if (init && init->data.size() > x.size)
        throw Error("dispatch", fmt::format("buffer {}: init data ({} bytes) is larger than size {}", x.name, init->data.size(), x.size));
      x.dtype = b.value("dtype", init ? init->dtype : std::string("|u1"));
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
    if (ka.contains("size")) kb.bytes.resize(ka.at("size").get<size_t>(), 0);
    for (auto& fld : ka.value("fields", nlohmann::json::array())) {
      size_t off = fld.at("offset").get<size_t>();
      std::string type = fld.value("type", "u32");
      if (fld.contains("buffer")) {
        uint64_t a = addr_of(fld.at("buffer").get<std::string>()) + fld.value("byte_offset", 0ull);
        kb.put<uint64_t>(off, a);
      } else if (type == "u32") kb.put<uint32_t>(off, fld.at("value").get<uint32_t>());
      else if (type == "i32") kb.put<int32_t>(off, fld.at("value").get<int32_t>());
      else if (type == "f32") kb.put<float>(off, fld.at("value").get<float>());
      else if (type == "u64") kb.put<uint64_t>(off, fld.at("value").get<uint64_t>());
      else if (type == "i64") kb.put<int64_t>(off, fld.at("value").get<int64_t>());
      else if (type == "u16") kb.put<uint16_t>(off, fld.at("value").get<uint16_t>());
      else if (type == "u8") kb.put<uint8_t>(off, fld.at("value").get<uint8_t>());
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
    opts.relaxed = o.value("relaxed", false);
    opts.per_workgroup = o.value("per_workgroup", false);
    if (ov.seed) opts.random_seed = *ov.seed;
    if (ov.quantum) opts.quantum = *ov.quantum;
    if (ov.no_hazards) opts.check_hazards = false;
    if (ov.no_waitcnt) opts.check_waitcnt = false;
    if (ov.no_race) opts.check_lds_race = false;
    if (ov.no_lds_dma) opts.check_lds_dma = false;
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
