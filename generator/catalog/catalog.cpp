#include "catalog/catalog.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "catalog/asm_facts.h"
#include "catalog/compile.h"
#include "codeobj/assemble.h"
#include "kernels/mla_decode_plan.h"
#include "kernels/mla_geometry.h"
#include "kernels/registry.h"

namespace mla::gen {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

fs::path mla_dir(const fs::path& root, Arch a) { return root / "hsa" / std::string(arch_name(a)) / "mla"; }

json read_json_file(const fs::path& p) {
  std::ifstream f(p);
  json j;
  f >> j;
  return j;
}

void write_file_atomic(const fs::path& p, const std::string& text) {
  fs::path tmp = p;
  tmp += ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    if (!f) throw std::runtime_error(fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, p);
}

json kernel_entry(const CompiledKernel& k, const std::string& co_name, const std::string& co_sha) {
  const auto& r = k.resources;
  json args = json::array();
  for (const auto& a : k.program.abi.args)
    args.push_back({{"name", a.name}, {"offset", a.offset}, {"size", a.size}, {"value_kind", a.value_kind},
                    {"type", a.type_name}});
  json entry = {{"name", k.spec.name()},
          {"symbol", k.spec.name()},
          {"co", co_name},
          {"shape", k.spec.to_json()},
          {"target_id", k.program.target->target_id},
          {"kernarg_size", k.program.abi.kernarg_size},
          {"args", args},
          {"workgroup_size", k.program.abi.max_workgroup_size},
          {"lds_bytes", r.lds_bytes},
          {"vgprs", r.vgprs},
          {"agprs", r.agprs},
          {"accum_offset", r.accum_offset},
          {"sgprs", r.next_free_sgpr},
          {"instructions", k.program.insts.size()},
          {"waitcnts_inserted", k.waitcnt.inserted},
          {"hazard_nops_inserted", k.hazards.nops_inserted},
          {"schedule", {{"regions", k.schedule.regions},
                        {"instructions_moved", k.schedule.moved},
                        {"modeled_issue_slots_program_order", k.schedule.slots_before},
                        {"modeled_issue_slots_scheduled", k.schedule.slots_after}}},
          {"source_config", k.spec.source_config},
          {"deployment", k.spec.deployment},
          {"generator_version", MLA_GENERATOR_VERSION},
          {"asm_sha256", k.asm_sha256},
          {"co_sha256", co_sha}};
  // How to launch it: the runtime's planner and dispatcher read this.
  if (k.spec.is_attention()) {
    const MlaGeometry g = mla_geometry(k.spec);
    entry["geometry"] = g.to_json();
    entry["decode_plan"] = mla_decode_plan(k.spec, g).to_json();
    // The prefix launch mixes units of one and of six computing row blocks, so the planner
    // balances it by issue as well as bytes (docs/planner.md "Issue-aware prefix launch").
    // The decode launch is priced by the same model (its fill and HBM floor, cost_model.h).
    entry["issue_model"] = issue_model_json(
        k.asm_text, *k.program.target,
        IssueModelShape{.ring = g.ring, .slot_tokens = g.slot_tokens, .tile_tokens = g.tile_tokens,
                        .lds_row_bytes = g.lds_row_bytes, .blocks_per_wave = g.blocks_per_wave,
                        .consumer_dma_waves = g.consumer_dma ? g.consumers : 0,
                        .producer_stage_slots = g.prefix ? 0 : g.stage_slots});
  }
  const Occupancy occ = occupancy(*k.program.target, r.agprs ? int(r.accum_offset + r.agprs) : int(r.vgprs),
                                  r.lds_bytes, int(k.program.abi.max_workgroup_size));
  if (occ.workgroups_per_cu < 1)
    throw std::runtime_error(fmt::format("{}: one workgroup ({} waves of {} unified VGPRs, {} bytes of LDS) does not fit "
                                         "a {} CU (limited by {})",
                                         k.spec.name(), (k.program.abi.max_workgroup_size + 63) / 64,
                                         r.agprs ? r.accum_offset + r.agprs : r.vgprs, r.lds_bytes,
                                         k.program.target->name, occ.limited_by));
  entry["occupancy"] = {{"workgroups_per_cu", occ.workgroups_per_cu}, {"limited_by", occ.limited_by}};
  return entry;
}

std::string csv_row(const KernelSpec& s, const std::string& co_name) {
  return fmt::format("{},{},{},{},{},{},{},{},{}", s.name(), co_name, dtype_name(s.q_dtype), dtype_name(s.kv_dtype),
                     s.heads, s.qseqlen, s.page_size, s.return_lse ? 1 : 0, s.logit_cap ? 1 : 0);
}

}  // namespace

std::string catalog_csv_header() {
  return "kernel,code_object,q_dtype,kv_dtype,heads,qseqlen,page_size,lse,softcap";
}

BuildReport build_catalog(const std::vector<Config>& configs, const BuildOptions& opts) {
  BuildReport report;
  std::vector<KernelSpec> specs;
  std::set<std::string> queued;  // implied kernels may come from several configs
  for (const auto& c : configs)
    for (const auto& s : c.kernels) {
      if (!queued.insert(fmt::format("{}@{}", s.name(), arch_name(s.arch))).second) continue;
      specs.push_back(s);
    }

  const fs::path out(opts.out_dir);
  const fs::path staging = out / fmt::format(".staging-{}", getpid());
  fs::remove_all(staging);
  std::set<Arch> archs;
  for (const auto& s : specs) archs.insert(s.arch);
  for (Arch a : archs) fs::create_directories(mla_dir(staging, a));

  // What the existing catalog already has, to skip unchanged kernels.
  std::map<std::string, json> previous;  // "<gfx>/<name>" -> entry
  for (Arch a : archs) {
    fs::path cj = mla_dir(out, a) / "catalog.json";
    if (!fs::exists(cj)) continue;
    try {
      json old = read_json_file(cj);  // kept alive: a temporary's member would dangle in the loop
      for (const auto& e : old["kernels"])
        previous[fmt::format("{}/{}", arch_name(a), e["name"].get<std::string>())] = e;
    } catch (const std::exception&) {
      // An unreadable old catalog only costs a rebuild.
    }
  }

  std::vector<json> entries(specs.size());
  std::vector<std::string> errors(specs.size());
  std::vector<char> fresh(specs.size(), 0);
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::mutex progress_mutex;
  auto say = [&](const std::string& line) {
    if (!opts.progress) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    opts.progress(line);
  };
  auto worker = [&] {
    for (size_t i = next++; i < specs.size(); i = next++) {
      const KernelSpec& s = specs[i];
      try {
        CompiledKernel k = compile_kernel(s, opts.code_object_version);
        std::string co_name = s.name() + ".co";
        fs::path staged = mla_dir(staging, s.arch) / co_name;
        fs::path existing = mla_dir(out, s.arch) / co_name;
        auto prev = previous.find(fmt::format("{}/{}", arch_name(s.arch), s.name()));
        bool reuse = prev != previous.end() && prev->second.value("asm_sha256", "") == k.asm_sha256 &&
                     prev->second.value("generator_version", "") == MLA_GENERATOR_VERSION && fs::exists(existing) &&
                     sha256_file(existing.string()) == prev->second.value("co_sha256", "");
        if (reuse) {
          fs::copy_file(existing, staged, fs::copy_options::overwrite_existing);
        } else {
          assemble_code_object(k.asm_text, *k.program.target, staged.string());
          fresh[i] = 1;
        }
        entries[i] = kernel_entry(k, co_name, sha256_file(staged.string()));
        say(fmt::format("[{}/{}] {} {} ({})", ++done, specs.size(), reuse ? "up to date" : "built", s.name(),
                        arch_name(s.arch)));
      } catch (const std::exception& e) {
        errors[i] = fmt::format("{} ({}, from {}): {}", s.name(), arch_name(s.arch), s.source_config, e.what());
        say(fmt::format("[{}/{}] FAILED {} ({})", ++done, specs.size(), s.name(), arch_name(s.arch)));
      }
    }
  };
  int jobs = std::max(1, std::min<int>(opts.jobs, int(specs.size())));
  std::vector<std::thread> pool;
  for (int j = 0; j < jobs; ++j) pool.emplace_back(worker);
  for (auto& t : pool) t.join();

  std::vector<std::string> failed;
  for (const auto& e : errors)
    if (!e.empty()) failed.push_back(e);
  if (!failed.empty()) {
    // A kernel llvm-mc rejected left its assembly in the staging folder, which goes away: keep
    // it under out/failed/ and say so, so that the message names a file that exists.
    for (size_t i = 0; i < specs.size(); ++i) {
      const fs::path s_file = mla_dir(staging, specs[i].arch) / (specs[i].name() + ".s");
      if (errors[i].empty() || !fs::exists(s_file)) continue;
      const fs::path kept = out / "failed" / fmt::format("{}_{}.s", arch_name(specs[i].arch), specs[i].name());
      fs::create_directories(kept.parent_path());
      fs::copy_file(s_file, kept, fs::copy_options::overwrite_existing);
      errors[i] += fmt::format("\n    (its assembly is kept at {})", kept.string());
    }
    failed.clear();
    for (const auto& e : errors)
      if (!e.empty()) failed.push_back(e);
    fs::remove_all(staging);
    throw std::runtime_error(fmt::format("{} of {} kernels failed; {} left unchanged:\n  {}", failed.size(),
                                         specs.size(), out.string(), fmt::join(failed, "\n  ")));
  }

  // Per-target catalog files, then swap the staged folders in.
  for (Arch a : archs) {
    json cat{{"target", arch_name(a)},
             {"target_id", target(a).target_id},
             {"generator_version", MLA_GENERATOR_VERSION},
             {"kernels", json::array()}};
    std::string csv = catalog_csv_header() + "\n";
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].arch != a) continue;
      cat["kernels"].push_back(entries[i]);
      if (specs[i].kind == KernelKind::MlaDecode) csv += csv_row(specs[i], entries[i]["co"]) + "\n";
    }
    write_file_atomic(mla_dir(staging, a) / "catalog.json", cat.dump(2) + "\n");
    write_file_atomic(mla_dir(staging, a) / kCatalogCsvName, csv);
  }
  for (Arch a : archs) {
    fs::path dst = mla_dir(out, a);
    fs::create_directories(dst.parent_path());
    fs::path old = dst;
    old += fmt::format(".old-{}", getpid());
    if (fs::exists(dst)) fs::rename(dst, old);
    fs::rename(mla_dir(staging, a), dst);
    fs::remove_all(old);
  }
  fs::remove_all(staging);
  if (fs::is_directory(out / "hsa"))
    for (const auto& d : fs::directory_iterator(out / "hsa")) {
      const std::string name = d.path().filename().string();
      const bool built = std::any_of(archs.begin(), archs.end(), [&](Arch a) { return arch_name(a) == name; });
      if (!built && fs::exists(d.path() / "mla" / "catalog.json")) report.kept_targets.push_back(name);
    }
  std::sort(report.kept_targets.begin(), report.kept_targets.end());
  for (char f : fresh) report.built += f;
  report.up_to_date = int(specs.size()) - report.built;
  return report;
}

std::vector<json> read_catalog(const std::string& out_dir) {
  std::vector<json> out;
  fs::path hsa = fs::path(out_dir) / "hsa";
  if (fs::is_directory(hsa))
    for (const auto& d : fs::directory_iterator(hsa)) {
      fs::path cj = d.path() / "mla" / "catalog.json";
      if (fs::exists(cj)) out.push_back(read_json_file(cj));
    }
  if (out.empty()) throw std::runtime_error(fmt::format("{}: no catalog found (expected hsa/<gfx>/mla/catalog.json)", out_dir));
  std::sort(out.begin(), out.end(), [](const json& a, const json& b) { return a["target"] < b["target"]; });
  return out;
}

}  // namespace mla::gen
