// Reading a generated catalog (hsa/<gfx>/mla/catalog.json + .co files) and selecting the
// kernels for a decode shape. The runtime knows kernels only through the catalog: their
// arguments, launch geometry and shape come from catalog.json, checked against the .co.
#pragma once
#include "abi/launch_geometry.h"
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/problem.h"

namespace mla::rt {

struct CatalogError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct KernelArgInfo {
  std::string name;
  uint32_t offset = 0, size = 0;
  std::string value_kind;
};

// A prefix kernel's catalog.json "issue_model": modeled figures (the generator's static
// co-issue model of its hot loop, the target's assumed machine constants), from which the
// planner prices the prefix launch's issue (docs/planner.md "Issue-aware prefix launch").
struct IssueModel {
  double cycles_per_block_tile = 0;    // one token tile through one computing row block's consumer
  double lds_clocks_per_block_tile = 0;  // the CU's LDS clocks of that wave's reads
  double lds_clocks_per_tile = 0;        // and of the producer's write of the tile
  double producer_inflight_bytes = 0;  // per workgroup, steady state
  double producer_cycles_per_tile = 0;  // a decode kernel's producer loop per tile (0: not priced)
  double clock_hz = 0, little_latency_s = 0, cu_port_bytes_per_clk = 0, unit_fill_s = 0, hbm_bytes_per_s = 0;
  // One wave's tile with b = 1.. computing row blocks (kernels of several blocks per wave; empty
  // in catalogs written before the wide prefix kernel, which had one block per wave).
  std::vector<double> wave_tile_cycles, wave_tile_lds_clocks;
  // A kernel whose waves stream the KV themselves (no producer wave) loads Q in a prologue and
  // stores its partials in an epilogue, one after the other with its steady loop: the bytes in
  // flight per workgroup in each (issue_model.phases; both 0 when it has none: Q and the
  // partials overlap the producer's stream).
  double prologue_inflight_bytes = 0, epilogue_inflight_bytes = 0;
};

// The modeled rate (bytes per second) at which one CU streams KV: its resident workgroups' bytes
// in flight over the loaded latency (Little's law), at most its read port. The planner's prefix
// launch and mlabench's every launch price memory with this one formula (docs/performance.md).
inline double modeled_cu_stream_rate(double port_bytes_per_clk, double clock_hz, double inflight_bytes,
                                     double latency_s) {
  return std::min(port_bytes_per_clk * clock_hz, inflight_bytes / latency_s);
}

struct CatalogKernel {
  std::string name;        // symbol
  std::string co_path;     // absolute path of the .co
  std::string target;      // "gfx942" / "gfx950"
  std::string kind;        // "mla_decode", "mla_reduce", ...
  nlohmann::json shape;    // the spec fields (heads, q_dtype, ...)
  nlohmann::json geometry; // decode kernels: catalog.json's geometry, as written
  abi::LaunchGeometry launch;  // decode kernels: the geometry, parsed and checked when the catalog opens
  uint32_t kernarg_size = 0;
  int workgroup_size = 64;  // threads per workgroup (catalog.json, the code object's max_flat_workgroup_size)
  int unified_vgprs = 0;   // VGPRs + AGPRs per lane of one wave (accum_offset + agprs), from catalog.json
  int resident_workgroups_per_cu = 1;  // catalog.json occupancy: workgroups a CU holds at once
  std::optional<IssueModel> issue_model;  // prefix kernels (required there), decode kernels (optional)
  std::vector<KernelArgInfo> args;
  const KernelArgInfo& arg(const std::string& name) const;  // throws CatalogError naming the field
};

// What a decode call needs.
struct DecodeShape {
  Target target = Target::gfx942;
  DType q_dtype = DType::fp8, kv_dtype = DType::fp8;
  int heads = 16, qseqlen = 1, page_size = 1;
  bool return_lse = false;
  bool logit_cap = false;
  // Sparse attention (DSA): each query row attends to its own row of cache slots (kv_indices),
  // -1 or out-of-range slots masked (docs/sparse.md); qseqlen and page_size are 1.
  bool sparse = false;
  // kv holds FlashMLA's fp8_ds_mla entries (sparse, bf16 q; kv_dtype is fp8); the catalog's
  // kv_dtype "fp8_ds_mla".
  bool kv_ds_mla = false;
  std::string kv_name() const { return kv_ds_mla ? "fp8_ds_mla" : name(kv_dtype); }
  // The prefix kernel to select: 0 the shape's default one (48 or 96 rows per workgroup), 192
  // the wide one (docs/shared-prefix.md), which must then be in the catalog.
  int prefix_rows = 0;
  std::string describe() const;
};
DecodeShape shape_of(const Problem& p);

struct Selection {
  CatalogKernel decode, reduce;
  std::optional<CatalogKernel> prefix;  // the shape's prefix kernel (mla_prefix_*), when the catalog has it
};
// Whether `prefix` is the prefix kernel of decode kernel `decode`'s shape (same target, dtypes,
// heads, qseqlen, page size, soft cap and token tile).
// `prefix_rows`: 0 for the default prefix kernel, 192 for the wide one (shape.prefix_rows).
bool prefix_matches(const CatalogKernel& prefix, const CatalogKernel& decode, int prefix_rows = 0);

class Catalog {
 public:
  // Opens `dir` (the --out of mlagen build); throws CatalogError if there is no catalog.
  static Catalog open(const std::string& dir);
  // $MLA_CATALOG_DIR, or CatalogError saying it is unset.
  static Catalog open_from_env();

  const std::vector<CatalogKernel>& kernels() const { return kernels_; }
  const std::string& dir() const { return dir_; }
  // Exact match only. No fitting kernel is a CatalogError that names the closest kernels.
  Selection select(const DecodeShape& shape) const;

 private:
  std::string dir_;
  std::vector<CatalogKernel> kernels_;
};

}  // namespace mla::rt
