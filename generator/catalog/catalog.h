// The catalog: out/hsa/<gfx>/mla/<kernel>.co, plus catalog.json (shape, target ID, kernarg
// layout, register and LDS use, source config, generator version, sha256 of each .co: the source
// of truth the runtime reads) and mlagen_kernels.csv (an index of the decode kernels for people)
// in the same folder. The csv is deliberately not aiter's mla_asm.csv: aiter's hsa/codegen.py
// reads every *.csv under hsa/<gfx>/mla/ and would launch a kernel listed with its knl_name and
// co_name columns with aiter's 368-byte argument struct, which our kernels do not take. Without
// those columns, codegen.py stops with "Missing required columns" instead (docs/engines.md).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace mla::gen {

struct BuildOptions {
  std::string out_dir = "out";
  int jobs = 1;
  int code_object_version = 5;
  std::function<void(const std::string&)> progress;  // one line per event; may be empty
};

struct BuildReport {
  int built = 0;
  int up_to_date = 0;
  // Targets with a catalog in out_dir that no config of this build targets: left as they were
  // (the runtime still reads them), so the caller can say so.
  std::vector<std::string> kept_targets;
};

// Builds every kernel of the configs. Stages into out_dir/.staging-<pid> and swaps the
// finished per-target folders in only when every kernel succeeded: a failure leaves out_dir
// as it was. Kernels whose .s text and .co are unchanged are not reassembled.
BuildReport build_catalog(const std::vector<Config>& configs, const BuildOptions& opts);

// Reads every out_dir/hsa/*/mla/catalog.json. Throws std::runtime_error if none exist.
std::vector<nlohmann::json> read_catalog(const std::string& out_dir);

// The csv index: its file name and header (no aiter key column: not knl_name, co_name, qType, Gqa).
inline constexpr const char* kCatalogCsvName = "mlagen_kernels.csv";
std::string catalog_csv_header();

}  // namespace mla::gen
