#include "config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "kernels/dsa_indexer.h"
#include "kernels/mla_geometry.h"

namespace mla::gen {

namespace {

using json = nlohmann::json;

// Query heads and rows per request the decode builder supports natively (no padding in memory:
// rows past heads * qseqlen in the last 16-row block are range-checked to zero and never stored).
constexpr int kMaxHeads = 128, kMaxQseqlen = 8;
const std::vector<int> kPageSizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
// The indexer: MTP rows per request (DeepGEMM's next_n), the cache's block sizes (DeepGEMM's 64,
// vLLM ROCm's 1, and between).
constexpr int kMaxIndexerNextN = 4;
const std::vector<int> kIndexerBlockSizes = {1, 2, 4, 8, 16, 32, 64};

[[noreturn]] void fail(const std::string& path, const std::string& field, const std::string& what) {
  throw ConfigError(fmt::format("{}: {}: {}", path, field, what));
}

std::string show(const json& v) { return v.dump(); }

// A field that may be a scalar or a non-empty list of scalars; returns the list.
std::vector<json> as_list(const json& v, const std::string& path, const std::string& field) {
  if (!v.is_array()) return {v};
  if (v.empty()) fail(path, field, "empty list (give at least one value)");
  return std::vector<json>(v.begin(), v.end());
}

int as_int(const json& v, const std::string& path, const std::string& field, const std::vector<int>& allowed) {
  if (!v.is_number_integer())
    fail(path, field, fmt::format("{} is not an integer (allowed: {})", show(v), fmt::join(allowed, ", ")));
  // Range first: narrowing 4294967304 to int would give 8 (a wrong kernel, no error).
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT32_MAX)
                                               : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
  if (!in_range) fail(path, field, fmt::format("{} is not supported (allowed: {})", show(v), fmt::join(allowed, ", ")));
  int x = v.get<int>();
  if (std::find(allowed.begin(), allowed.end(), x) == allowed.end())
    fail(path, field, fmt::format("{} is not supported (allowed: {})", x, fmt::join(allowed, ", ")));
  return x;
}

// An integer in [lo, hi], range-checked before narrowing.
int as_int_in(const json& v, const std::string& path, const std::string& field, int lo, int hi) {
  const std::string allowed = fmt::format("{}..{}", lo, hi);
  if (!v.is_number_integer()) fail(path, field, fmt::format("{} is not an integer (allowed: {})", show(v), allowed));
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() >= uint64_t(lo) && v.get<uint64_t>() <= uint64_t(hi)
                                               : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  if (!in_range) fail(path, field, fmt::format("{} is not supported (allowed: {})", show(v), allowed));
  return v.get<int>();
}

bool as_bool(const json& v, const std::string& path, const std::string& field) {
  if (!v.is_boolean()) fail(path, field, fmt::format("{} is not a boolean (allowed: true, false)", show(v)));
  return v.get<bool>();
}

std::string as_string(const json& v, const std::string& path, const std::string& field,
                      const std::vector<std::string>& allowed) {
  if (!v.is_string() ||
      (!allowed.empty() && std::find(allowed.begin(), allowed.end(), v.get<std::string>()) == allowed.end()))
    fail(path, field,
         allowed.empty() ? fmt::format("{} is not a string", show(v))
                         : fmt::format("{} is not supported (allowed: {})", show(v), fmt::join(allowed, ", ")));
  return v.get<std::string>();
}

void check_keys(const json& obj, const std::string& path, const std::string& where,
                const std::vector<std::string>& allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end())
      fail(path, where.empty() ? it.key() : where + "." + it.key(),
           fmt::format("unknown key (allowed: {})", fmt::join(allowed, ", ")));
}

const std::map<std::string, KernelKind> kKinds = {{"mla_decode", KernelKind::MlaDecode},
                                                  {"dsa_indexer_logits", KernelKind::DsaIndexerLogits},
                                                  {"vector_copy", KernelKind::VectorCopy},
                                                  {"fp8_dequant", KernelKind::Fp8Dequant},
                                                  {"mfma_tile", KernelKind::MfmaTile}};

// The DSA indexer's logits kernels: heads x next_n x block_size. Every query row of a request
// (next_n of them, each round_up(heads, 8) rows in the MFMA's view) stays in registers.
std::vector<KernelSpec> expand_indexer(const json& e, const std::string& path, const std::string& where,
                                       std::vector<KernelSpec> out) {
  if (!e.contains("heads")) fail(path, where + ".heads", "missing (the indexer's query heads, 1..128)");
  auto cross = [&](const char* key, const json& dflt, auto&& set) {
    std::vector<KernelSpec> next;
    for (const KernelSpec& s : out)
      for (const auto& x : as_list(e.contains(key) ? e[key] : dflt, path, where + "." + key)) {
        KernelSpec t = s;
        set(t, x, where + "." + key);
        next.push_back(std::move(t));
      }
    out = std::move(next);
  };
  cross("heads", json(), [&](KernelSpec& t, const json& x, const std::string& f) { t.heads = as_int_in(x, path, f, 1, kMaxHeads); });
  cross("next_n", json(1), [&](KernelSpec& t, const json& x, const std::string& f) {
    t.next_n = as_int_in(x, path, f, 1, kMaxIndexerNextN);
  });
  cross("block_size", json(64), [&](KernelSpec& t, const json& x, const std::string& f) {
    t.page_size = as_int(x, path, f, kIndexerBlockSizes);
  });
  for (const KernelSpec& t : out)
    if (indexer_rows(t) > kMaxIndexerRows)
      fail(path, where,
           fmt::format("heads {} x next_n {} is {} query rows (heads rounded up to 8); at most {} stay in registers",
                       t.heads, t.next_n, indexer_rows(t), kMaxIndexerRows));
  return out;
}

std::vector<KernelSpec> expand_entry(const json& e, const std::string& path, const std::string& where,
                                     const std::string& deployment) {
  if (!e.is_object()) fail(path, where, "each kernel entry must be an object");
  std::vector<std::string> kind_names;
  for (const auto& [k, _] : kKinds) kind_names.push_back(k);
  KernelKind kind = KernelKind::MlaDecode;
  if (e.contains("kind")) kind = kKinds.at(as_string(e["kind"], path, where + ".kind", kind_names));
  const bool mla = kind == KernelKind::MlaDecode;
  const bool indexer = kind == KernelKind::DsaIndexerLogits;
  if (indexer)
    check_keys(e, path, where, {"kind", "target", "heads", "next_n", "block_size"});
  else if (mla)
    check_keys(e, path, where,
               {"kind", "target", "heads", "q_dtype", "kv_dtype", "qseqlen", "page_size", "return_lse", "logit_cap",
                "attention"});
  else
    check_keys(e, path, where, {"kind", "target"});

  if (!e.contains("target")) fail(path, where + ".target", "missing (allowed: gfx942, gfx950)");
  std::vector<Arch> archs;
  for (const auto& t : as_list(e["target"], path, where + ".target"))
    archs.push_back(*parse_arch(as_string(t, path, where + ".target", {"gfx942", "gfx950"})));

  KernelSpec base;
  base.kind = kind;
  base.source_config = path;
  base.deployment = deployment;
  std::vector<KernelSpec> out;
  for (Arch a : archs) {
    base.arch = a;
    out.push_back(base);
  }
  if (indexer) return expand_indexer(e, path, where, std::move(out));
  if (!mla) return out;
  // Every field takes a scalar or a list; the kernels are the cross product (README).
  // Sparse attention (DSA): each query row reads its own row of cache slots, so the kernel has
  // neither a page size (a slot is block * page_block_size + offset for any block size) nor
  // query rows per request (engines flatten MTP rows: each has its own index row).
  bool sparse = false;
  if (e.contains("attention"))
    sparse = as_string(e["attention"], path, where + ".attention", {"dense", "sparse"}) == "sparse";
  if (sparse) {
    if (e.contains("page_size"))
      fail(path, where + ".page_size",
           "not allowed with attention \"sparse\": its indices are cache slots (block * page_block_size + offset), "
           "one kernel serves every page block size");
    if (e.contains("qseqlen") && !(e["qseqlen"].is_number_integer() && e["qseqlen"].get<int64_t>() == 1))
      fail(path, where + ".qseqlen",
           fmt::format("{} with attention \"sparse\" (allowed: 1; every query row reads its own index row, so MTP "
                       "rows are separate rows of the batch)", show(e["qseqlen"])));
    if (e.contains("logit_cap") && !(e["logit_cap"].is_boolean() && !e["logit_cap"].get<bool>()))
      fail(path, where + ".logit_cap", "not supported with attention \"sparse\" (allowed: false)");
  }
  for (const char* req : {"heads", "q_dtype", "kv_dtype"})
    if (!e.contains(req)) fail(path, where + "." + req, "missing");
  if (!sparse && !e.contains("page_size")) fail(path, where + ".page_size", "missing");
  for (KernelSpec& s : out) s.sparse = sparse;
  auto expand = [&](const char* key, const json& dflt, auto&& set) {
    const json v = e.contains(key) ? e[key] : dflt;
    std::vector<KernelSpec> next;
    for (const KernelSpec& s : out)
      for (const auto& x : as_list(v, path, where + "." + key)) {
        KernelSpec t = s;
        set(t, x, where + "." + key);
        next.push_back(std::move(t));
      }
    out = std::move(next);
  };
  auto dtype = [&](const json& x, const std::string& f) {
    return as_string(x, path, f, {"fp8", "bf16"}) == "fp8" ? DType::fp8 : DType::bf16;
  };
  // fp8_ds_mla: FlashMLA's 656-byte sparse cache entry, read as bf16 rows (KernelSpec::kv_ds_mla).
  auto kv_dtype = [&](KernelSpec& t, const json& x, const std::string& f) {
    const std::string d = as_string(x, path, f, {"fp8", "bf16", "fp8_ds_mla"});
    t.kv_ds_mla = d == "fp8_ds_mla";
    if (t.kv_ds_mla && !sparse)
      fail(path, f, "fp8_ds_mla with attention \"dense\" (allowed: attention \"sparse\", FlashMLA's sparse cache)");
    t.kv_dtype = d == "fp8" ? DType::fp8 : DType::bf16;
  };
  expand("heads", json(), [&](KernelSpec& t, const json& x, const std::string& f) { t.heads = as_int_in(x, path, f, 1, kMaxHeads); });
  expand("q_dtype", json(), [&](KernelSpec& t, const json& x, const std::string& f) { t.q_dtype = dtype(x, f); });
  expand("kv_dtype", json(), kv_dtype);
  for (const KernelSpec& t : out)
    if (t.kv_ds_mla && t.q_dtype != DType::bf16)
      fail(path, where, "q_dtype fp8 with kv_dtype fp8_ds_mla is not supported (allowed: bf16 q, as FlashMLA)");
  for (const KernelSpec& t : out)
    if (t.q_dtype == DType::fp8 && t.kv_dtype == DType::bf16 && !t.kv_ds_mla)
      fail(path, where, "q_dtype fp8 with kv_dtype bf16 is not supported (allowed pairs: fp8/fp8, bf16/fp8, bf16/bf16)");
  expand("qseqlen", json(1),
         [&](KernelSpec& t, const json& x, const std::string& f) { t.qseqlen = as_int_in(x, path, f, 1, kMaxQseqlen); });
  expand("page_size", json(1),
         [&](KernelSpec& t, const json& x, const std::string& f) { t.page_size = as_int(x, path, f, kPageSizes); });
  expand("return_lse", json(false),
         [&](KernelSpec& t, const json& x, const std::string& f) { t.return_lse = as_bool(x, path, f); });
  expand("logit_cap", json(false),
         [&](KernelSpec& t, const json& x, const std::string& f) {
           // The kernel compiles soft-capping in or out; the cap's value is a run-time argument
           // (problem.json's logit_cap, mla_decode_args.logit_cap), so a number here is an error.
           if (x.is_number())
             fail(path, f, fmt::format("{} is not a boolean (allowed: true, false: true builds the _softcap kernel; the "
                                       "cap value is a run-time argument)", show(x)));
           t.logit_cap = as_bool(x, path, f);
         });
  return out;
}

}  // namespace

Config parse_config(const std::string& text, const std::string& path) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {  // parse errors, and numbers out of range (1e400)
    throw ConfigError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  if (!root.is_object()) fail(path, "(top level)", "must be a JSON object");
  check_keys(root, path, "", {"deployment", "description", "kernels"});
  Config c;
  c.path = path;
  if (!root.contains("deployment")) fail(path, "deployment", "missing (a name for the model deployment)");
  c.deployment = as_string(root["deployment"], path, "deployment", {});
  if (root.contains("description")) c.description = as_string(root["description"], path, "description", {});
  if (!root.contains("kernels") || !root["kernels"].is_array() || root["kernels"].empty())
    fail(path, "kernels", "missing or empty (a non-empty array of kernel entries)");
  std::map<std::string, std::string> seen;  // name@target -> where
  for (size_t i = 0; i < root["kernels"].size(); ++i) {
    std::string where = fmt::format("kernels[{}]", i);
    for (auto& s : expand_entry(root["kernels"][i], path, where, c.deployment)) {
      std::string key = fmt::format("{}@{}", s.name(), arch_name(s.arch));
      if (auto it = seen.find(key); it != seen.end())
        fail(path, where,
             fmt::format("kernel {} for {} is also produced by {}", s.name(), arch_name(s.arch), it->second));
      seen[key] = where;
      c.kernels.push_back(std::move(s));
    }
  }
  // Every decode shape needs the reduce kernel that merges its split partials, and the prefix
  // kernel that reads a prefix shared by several requests once for all of them (the runtime
  // plans it when it pays, docs/shared-prefix.md).
  std::vector<KernelSpec> implied;
  auto imply = [&](KernelSpec r) {
    r.implied = true;
    std::string key = fmt::format("{}@{}", r.name(), arch_name(r.arch));
    if (seen.count(key)) return;
    seen[key] = "(implied)";
    implied.push_back(r);
  };
  // A kernel with no shape of its own, one per target, from the entry that implies it.
  auto per_target = [](KernelKind kind, const KernelSpec& from) {
    KernelSpec t;
    t.kind = kind;
    t.arch = from.arch;
    t.source_config = from.source_config;
    t.deployment = from.deployment;
    return t;
  };
  for (const auto& s : c.kernels) {
    // The indexer's logits imply the top-k that turns them into index rows.
    if (s.kind == KernelKind::DsaIndexerLogits) imply(per_target(KernelKind::DsaTopk, s));
    if (s.kind != KernelKind::MlaDecode) continue;
    KernelSpec r = s;
    r.kind = KernelKind::MlaReduce;
    r.page_size = 1;
    r.logit_cap = false;
    r.sparse = false;
    r.kv_ds_mla = false;
    imply(r);
    if (s.sparse) continue;  // no shared prefixes in sparse attention
    KernelSpec x = s;
    x.kind = KernelKind::MlaPrefix;
    x.return_lse = false;
    imply(x);
    // And, where it exists, the wide prefix kernel (192 rows per workgroup: a K3 c16 group's
    // prefix read once), which the runtime runs when asked (docs/shared-prefix.md).
    if (wide_prefix_fits(x)) {
      x.prefix_rows = kWidePrefixRows;
      imply(x);
    }
    // merge_attn_states (decode context parallelism), one per target.
    imply(per_target(KernelKind::MlaMerge, s));
  }
  c.kernels.insert(c.kernels.end(), implied.begin(), implied.end());
  return c;
}

Config load_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError(fmt::format("{}: cannot read config file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config(ss.str(), path);
}

std::vector<Config> load_configs(const std::vector<std::string>& paths) {
  std::vector<Config> out;
  std::map<std::string, std::string> seen;  // name@target -> path
  for (const auto& p : paths) {
    Config c = load_config(p);
    for (const auto& s : c.kernels) {
      if (s.implied) continue;
      std::string key = fmt::format("{}@{}", s.name(), arch_name(s.arch));
      if (auto it = seen.find(key); it != seen.end() && it->second != p)
        throw ConfigError(fmt::format("{}: kernel {} for {} is also produced by {}; each kernel must come from one config",
                                      p, s.name(), arch_name(s.arch), it->second));
      seen[key] = p;
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace mla::gen
