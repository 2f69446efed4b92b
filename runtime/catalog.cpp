#include "runtime/catalog.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mla::rt {

namespace fs = std::filesystem;
using json = nlohmann::json;

const KernelArgInfo& CatalogKernel::arg(const std::string& n) const {
  for (const auto& a : args)
    if (a.name == n) return a;
  throw CatalogError(fmt::format("kernel {} ({}): catalog declares no argument '{}'", name, co_path, n));
}

std::string DecodeShape::describe() const {
  return fmt::format("{} q={} kv={} heads={} qseqlen={} page_size={}{}{}{}", rt::name(target), rt::name(q_dtype),
                     kv_name(), heads, qseqlen, page_size, return_lse ? " lse" : "",
                     logit_cap ? " logit_cap" : "", sparse ? " sparse" : "");
}

DecodeShape shape_of(const Problem& p) {
  DecodeShape s;
  s.target = p.target;
  s.q_dtype = p.q_dtype;
  s.kv_dtype = p.kv_dtype;
  s.heads = p.heads;
  s.qseqlen = p.qseqlen;
  s.page_size = p.page_size;
  s.return_lse = p.return_lse;
  s.logit_cap = p.logit_cap != 0.0;
  s.sparse = p.sparse;
  s.kv_ds_mla = p.kv_ds_mla;
  return s;
}

namespace {

IssueModel issue_model_of(const json& k, const std::string& file, const std::string& kernel) {
  if (!k.contains("issue_model") || !k.at("issue_model").is_object())
    throw CatalogError(fmt::format("{}: kernel {}: no issue_model (a prefix kernel's modeled hot loop; rebuild the "
                                   "catalog with this mlagen)",
                                   file, kernel));
  const json& j = k.at("issue_model");
  auto field = [&](const char* name) {
    const double v = j.contains(name) && j.at(name).is_number() ? j.at(name).get<double>() : 0.0;
    if (!(v > 0) || !std::isfinite(v))
      throw CatalogError(fmt::format("{}: kernel {}: issue_model.{} = {} (allowed: a finite number > 0)", file, kernel,
                                     name, j.contains(name) ? j.at(name).dump() : "missing"));
    return v;
  };
  auto list = [&](const char* name) {
    std::vector<double> out;
    if (!j.contains(name)) return out;
    if (!j.at(name).is_array())
      throw CatalogError(fmt::format("{}: kernel {}: issue_model.{} is not an array", file, kernel, name));
    for (const json& x : j.at(name)) {
      const double v = x.is_number() ? x.get<double>() : 0.0;
      if (!(v > 0) || !std::isfinite(v))
        throw CatalogError(fmt::format("{}: kernel {}: issue_model.{} holds {} (allowed: finite numbers > 0)", file,
                                       kernel, name, x.dump()));
      out.push_back(v);
    }
    return out;
  };
  // Optional (catalogs before 2026-12-06 lack it): a decode kernel's producer issue per tile.
  const double producer = j.contains("producer_cycles_per_tile") && j.at("producer_cycles_per_tile").is_number()
                              ? j.at("producer_cycles_per_tile").get<double>()
                              : 0.0;
  if (!(producer >= 0) || !std::isfinite(producer))
    throw CatalogError(fmt::format("{}: kernel {}: issue_model.producer_cycles_per_tile = {} (allowed: a finite number "
                                   ">= 0)",
                                   file, kernel, j.at("producer_cycles_per_tile").dump()));
  double prologue = 0, epilogue = 0;
  if (j.contains("phases") && !j.at("phases").is_null()) {
    const json& ph = j.at("phases");
    for (auto [name, out] : {std::pair<const char*, double*>{"prologue_inflight_bytes", &prologue},
                             {"epilogue_inflight_bytes", &epilogue}}) {
      const double v = ph.is_object() && ph.contains(name) && ph.at(name).is_number() ? ph.at(name).get<double>() : 0.0;
      if (!(v > 0) || !std::isfinite(v))
        throw CatalogError(fmt::format("{}: kernel {}: issue_model.phases.{} = {} (allowed: a finite number > 0)", file,
                                       kernel, name, ph.is_object() && ph.contains(name) ? ph.at(name).dump() : "missing"));
      *out = v;
    }
  }
  return IssueModel{.cycles_per_block_tile = field("cycles_per_block_tile"),
                    .lds_clocks_per_block_tile = field("lds_clocks_per_block_tile"),
                    .lds_clocks_per_tile = field("lds_clocks_per_tile"),
                    .producer_inflight_bytes = field("producer_inflight_bytes"),
                    .producer_cycles_per_tile = producer,
                    .clock_hz = field("clock_hz"),
                    .little_latency_s = field("little_latency_s"),
                    .cu_port_bytes_per_clk = field("cu_port_bytes_per_clk"),
                    .unit_fill_s = field("unit_fill_s"),
                    .hbm_bytes_per_s = field("hbm_bytes_per_s"),
                    .wave_tile_cycles = list("wave_tile_cycles"),
                    .wave_tile_lds_clocks = list("wave_tile_lds_clocks"),
                    .prologue_inflight_bytes = prologue,
                    .epilogue_inflight_bytes = epilogue};
}

}  // namespace

Catalog Catalog::open(const std::string& dir) {
  Catalog c;
  c.dir_ = fs::absolute(dir).string();
  fs::path hsa = fs::path(dir) / "hsa";
  if (!fs::is_directory(hsa))
    throw CatalogError(fmt::format("{}: not a catalog directory (no hsa/<gfx>/mla/ inside; run mlagen build)", dir));
  for (const auto& d : fs::directory_iterator(hsa)) {
    fs::path cj = d.path() / "mla" / "catalog.json";
    if (!fs::exists(cj)) continue;
    json cat;
    try {
      std::ifstream f(cj);
      f >> cat;
    } catch (const std::exception& e) {
      throw CatalogError(fmt::format("{}: unreadable catalog: {}", cj.string(), e.what()));
    }
    for (const auto& k : cat.at("kernels")) {
      CatalogKernel ck;
      ck.name = k.at("name");
      ck.co_path = fs::absolute(d.path() / "mla" / k.at("co").get<std::string>()).string();
      ck.target = cat.at("target");
      ck.shape = k.at("shape");
      ck.kind = ck.shape.at("kind");
      ck.geometry = k.value("geometry", json::object());
      if (ck.kind == "mla_decode" || ck.kind == "mla_prefix") {
        try {
          ck.launch = abi::launch_geometry_from_json(ck.geometry);
        } catch (const std::invalid_argument& e) {
          throw CatalogError(fmt::format("{}: kernel {}: {}", cj.string(), ck.name, e.what()));
        }
      }
      ck.kernarg_size = k.at("kernarg_size");
      ck.workgroup_size = k.value("workgroup_size", 64);
      if (ck.workgroup_size < 64 || ck.workgroup_size > 1024 || ck.workgroup_size % 64)
        throw CatalogError(fmt::format("{}: kernel {}: workgroup_size = {} (allowed: a multiple of 64 in 64..1024)",
                                       cj.string(), ck.name, ck.workgroup_size));
      const int agprs = k.value("agprs", 0);
      ck.unified_vgprs = agprs ? k.value("accum_offset", 0) + agprs : k.value("vgprs", 0);
      if (k.contains("occupancy")) {
        ck.resident_workgroups_per_cu = k.at("occupancy").at("workgroups_per_cu").get<int>();
        if (ck.resident_workgroups_per_cu < 1)
          throw CatalogError(fmt::format("{}: kernel {}: occupancy.workgroups_per_cu = {} (allowed: >= 1)", dir,
                                         ck.name, ck.resident_workgroups_per_cu));
      }
      // Required of a prefix kernel; a decode kernel's (catalogs since issue #42) prices its launch.
      if (ck.kind == "mla_prefix" || (ck.kind == "mla_decode" && k.contains("issue_model")))
        ck.issue_model = issue_model_of(k, cj.string(), ck.name);
      for (const auto& a : k.at("args"))
        ck.args.push_back({a.at("name"), a.at("offset"), a.at("size"), a.at("value_kind")});
      c.kernels_.push_back(std::move(ck));
    }
  }
  if (c.kernels_.empty()) throw CatalogError(fmt::format("{}: catalog holds no kernels", dir));
  return c;
}

Catalog Catalog::open_from_env() {
  const char* d = std::getenv("MLA_CATALOG_DIR");
  if (!d || !*d) throw CatalogError("MLA_CATALOG_DIR is not set (point it at the --out of mlagen build)");
  return open(d);
}

namespace {

// The shape fields in which kernel k differs from the request, as "field kernel-value (asked
// value)"; the target counts as four fields (a kernel for another GPU is never close).
std::vector<std::string> differences(const CatalogKernel& k, const DecodeShape& s) {
  const auto& sh = k.shape;
  std::vector<std::string> d;
  auto diff = [&](const char* field, const std::string& have, const std::string& want) {
    if (have != want) d.push_back(fmt::format("{} {} (asked {})", field, have, want));
  };
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  diff("target", k.target, std::string(name(s.target)));
  diff("q_dtype", sh.value("q_dtype", ""), std::string(name(s.q_dtype)));
  diff("kv_dtype", sh.value("kv_dtype", ""), s.kv_name());
  diff("heads", std::to_string(sh.value("heads", 0)), std::to_string(s.heads));
  diff("qseqlen", std::to_string(sh.value("qseqlen", 0)), std::to_string(s.qseqlen));
  diff("page_size", std::to_string(sh.value("page_size", 0)), std::to_string(s.page_size));
  diff("return_lse", b(sh.value("return_lse", false)), b(s.return_lse));
  diff("logit_cap", b(sh.value("logit_cap", false)), b(s.logit_cap));
  diff("attention", sh.value("attention", "dense"), s.sparse ? "sparse" : "dense");
  return d;
}

int distance(const CatalogKernel& k, const DecodeShape& s) {
  const int d = int(differences(k, s).size());
  return k.target != name(s.target) ? d + 3 : d;
}

}  // namespace

bool prefix_matches(const CatalogKernel& prefix, const CatalogKernel& decode, int prefix_rows) {
  if (prefix.kind != "mla_prefix" || prefix.target != decode.target) return false;
  if (prefix.shape.value("prefix_rows", 0) != prefix_rows) return false;
  for (const char* f : {"q_dtype", "kv_dtype", "heads", "qseqlen", "page_size", "logit_cap"})
    if (prefix.shape.value(f, json()) != decode.shape.value(f, json())) return false;
  return prefix.launch.tile_tokens == decode.launch.tile_tokens;
}

Selection Catalog::select(const DecodeShape& s) const {
  const CatalogKernel* dec = nullptr;
  const CatalogKernel* red = nullptr;
  for (const auto& k : kernels_) {
    if (k.kind == "mla_decode" && distance(k, s) == 0) dec = &k;
    if (k.kind == "mla_reduce" && k.target == name(s.target) && k.shape.value("heads", 0) == s.heads &&
        k.shape.value("qseqlen", 0) == s.qseqlen && k.shape.value("return_lse", false) == s.return_lse)
      red = &k;
  }
  if (!dec) {
    std::vector<const CatalogKernel*> decs;
    for (const auto& k : kernels_)
      if (k.kind == "mla_decode") decs.push_back(&k);
    std::sort(decs.begin(), decs.end(),
              [&](auto* a, auto* b) { return distance(*a, s) < distance(*b, s); });
    // The closest kernels (fewest differing fields; at most 3, and none more than one field
    // further than the closest), each with the fields in which it differs.
    std::string hint;
    for (size_t i = 0; i < std::min<size_t>(3, decs.size()); ++i) {
      if (i > 0 && distance(*decs[i], s) > distance(*decs[0], s) + 1) break;
      hint += fmt::format("\n  {} ({}): differs in {}", decs[i]->name, decs[i]->target,
                          fmt::join(differences(*decs[i], s), ", "));
    }
    throw CatalogError(fmt::format(
        "{}: no decode kernel for {} (the runtime runs exact shapes only; add the shape to a config and "
        "rebuild). Closest:{}",
        dir_, s.describe(), hint.empty() ? " (no decode kernels at all)" : hint));
  }
  if (!red)
    throw CatalogError(fmt::format("{}: decode kernel {} found but its reduce kernel (heads={} qseqlen={}{}) is missing",
                                   dir_, dec->name, s.heads, s.qseqlen, s.return_lse ? " lse" : ""));
  Selection sel{*dec, *red, std::nullopt};
  // The prefix kernel of the shape (optional: without it shared prefixes are read per request).
  for (const auto& k : kernels_)
    if (k.kind == "mla_prefix" && prefix_matches(k, *dec, s.prefix_rows)) sel.prefix = k;
  if (s.prefix_rows != 0 && !sel.prefix)
    throw CatalogError(fmt::format("{}: no prefix kernel of {} rows for {} (prefix_rows: 0 for the default one; 192 "
                                   "exists for gfx950 fp8/fp8 at pages of 16 or more, no soft cap)",
                                   dir_, s.prefix_rows, s.describe()));
  return sel;
}

}  // namespace mla::rt
