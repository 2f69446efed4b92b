// aiter's own MLA decode code objects through mlabench's counters and machine model (issue #17
// item 2): `mlabench --aiter-dir DIR`. Every time here is MODELED (the same `Machine` and the
// same per-CU model as ours, docs/performance.md); the counters are MEASURED on the emulator
// (aiter's code objects run unmodified by oracle/, relaxed mode); the launch configuration is
// restated from reading aiter's sources (cited per function). The only hardware fact is seed 001's
// published aiter time, which the model's aiter time is held against (model / published).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"

namespace mla::bench {

// ---- aiter's launch configuration (restated, not copied) -----------------------------------

// aiter/mla.py `get_meta_param` (non-persistent decode; mla_decode_fwd calls it when the caller
// leaves num_kv_splits to aiter): the split count i in 1..16 maximising
//   (bs*i / (ceil(bs*i / cu_num) * cu_num)) * avg_kv / (avg_kv + 84.1 * i),   avg_kv = total_kv / bs
// (CU-occupancy of one wave of bs*i workgroups times a per-split overhead term; ties to the
// smallest i), then for fp8 q only: capped at ceil(avg_kv / min_block_n) and, when > 1, at
// floor(|avg_kv - max_seqlen_q| / min_block_n) + 1, with min_block_n from nhead*max_seqlen_q
// (8: 64, 16..32: 128, 48..64: 64, >= 128: 32). tg_factor = 1, ignore_total_kv = 0 (defaults).
int aiter_meta_splits(int bs, int64_t total_kv, int nhead, int max_seqlen_q, bool q_fp8, int cu_num);

// csrc/kernels/mla/metadata/v1_0_device.cuh (`get_mla_metadata_v1(..., intra_batch_mode=True)`),
// `get_local_splits`: 16 splits per request on gfx942; elsewhere min(seqlen / 196,
// ceil(num_cu / batch), num_splits) (num_splits = the caller's max_split_per_batch; < 1: no cap).
int aiter_v1_0_splits(rt::Target t, int seqlen_kv, int batch, int num_cu, int num_splits = -1);

// v1_0's work_indptr: W work items over num_cu CUs in contiguous runs, the first W % num_cu CUs
// taking W / num_cu + 1 items, the others W / num_cu. Returns the CU of each item.
std::vector<int> aiter_v1_0_cu_of_items(int items, int num_cu);

// ---- aiter's kernel, measured like ours ----------------------------------------------------

// One scaled emulator run of an aiter code object.
struct AiterSample {
  std::vector<int> kv_lens;
  int kv_split = 1;
  double U = 0, N = 0, G = 0;               // work items, tokens, requests (Q blocks)
  double partial_units = 0, final_units = 0;
  double read = 0, read_distinct = 0, written = 0, kv_read = 0, macs = 0;
  double issue_cycles = 0;                  // serial issue table over every executed wave-instruction
  std::map<std::string, double> issue_cycles_by_kind;  // the same by mnemonic kind (mfma, valu, lds, salu, vmem, other)
  double wave_insts = 0;
  std::map<std::string, double> insts_by_class;
  std::map<std::string, double> read_by_buffer, written_by_buffer;  // global bytes per allocation
  double inflight_peak_wg = 0, inflight_peak_wave = 0;  // emulator: peak outstanding VMEM load bytes
  bool pass = false;                        // against the fp64 reference (oracle's criterion)
  double d = 0, seconds = 0;
  nlohmann::json to_json() const;
};

// The fitted facts of one aiter kernel (per token and per work item), shared by every shape
// that runs it.
struct AiterKernelFit {
  std::string kernel, co_path;
  rt::Target target = rt::Target::gfx942;
  int heads = 16;                 // the kernel's heads (Q, o, partials sized for them)
  int waves_per_wg = 4;
  std::vector<AiterSample> samples;
  double fit_residual = 0;
  double issue_per_token = 0, issue_per_unit = 0;  // serial issue cycles, all waves of a workgroup
  std::map<std::string, double> issue_per_token_by_kind;  // its per-token slope by mnemonic kind
  double macs_per_token = 0, macs_per_unit = 0;
  double inflight_peak_wg = 0, inflight_peak_wave = 0;
  KernelFacts facts;              // model_time's view (see measure_aiter_kernel)
  nlohmann::json to_json() const;
};

struct AiterSideOptions {
  std::string aiter_dir;          // empty: not run
  int unit_tokens = 256;          // tokens per work item in the scaled runs (multiple of 128)
  bool verbose = false;
};

// Runs the scaled problems of `kernel_stem` (hsa/<gfx>/mla/<stem>.co) and fits them. Throws
// std::runtime_error naming what is missing (directory, catalog row, a failed run).
AiterKernelFit measure_aiter_kernel(const std::string& aiter_dir, rt::Target t, const std::string& kernel_stem,
                                    const AiterSideOptions& o);

// One shape priced with aiter's launch and aiter's fitted facts.
struct AiterSide {
  bool ran = false;
  std::string not_run;            // why not (no --aiter-dir, no aiter kernel for the shape, ...)
  std::string kernel, launch;     // the code object; how it is launched ("v1_0 metadata, 16 splits ...")
  int splits = 0, items = 0, cus_used = 0, reduce_entries = 0, reduce_splits = 0;
  double read_bytes = 0, written_bytes = 0, macs = 0, reduce_bytes = 0;
  KernelFacts facts;
  ModeledTime modeled;
  std::optional<double> published_us;  // seed 001 (MI300X), published
  double model_over_published = 0;     // 0 when nothing is published
  double ours_over_aiter_modeled = 0;
  std::shared_ptr<const AiterKernelFit> fit;
  nlohmann::json to_json() const;
};

// The aiter kernel and launch for a shape: gfx942 bf16/fp8 16 heads -> the a16w8 kernel with
// get_meta_param's splits; gfx950 fp8/fp8 <= 16 heads -> mla_a8w8_qh16_qseqlen1_gqaratio16_ps
// with v1_0's splits (heads padded to 16). Empty stem: no aiter kernel modelled for the shape.
struct AiterLaunch {
  std::string stem, launch, not_run;
  int splits = 0;
  std::vector<int> item_tokens;   // per work item, launch order
  std::vector<bool> item_partial;
  std::vector<int> cu_of_item;
  int reduce_entries = 0, reduce_splits = 0, kernel_heads = 16;
  int reduce_max_splits = 0;  // the most splits of one reduce entry
  // aiter's reduce (csrc/kernels/mla/reduce.cu): the lse of an entry's splits in one round (through
  // LDS), then its partial rows two splits in flight: 1 + ceil(S / 2) dependent rounds.
  int reduce_rounds() const { return reduce_max_splits ? 1 + (reduce_max_splits + 1) / 2 : 0; }
};
AiterLaunch aiter_launch_for(const BenchShape& s, int num_cu);

// The same kernel with get_mla_metadata_v1's default `fast_mode` layout (v1_2,
// csrc/kernels/mla/metadata/v1_2_device.cuh `kn_get_mla_metadata_v1_2`), restated for one qo
// tile per request (qseqlen 1, 16 heads), page size 1, no max_split_per_batch: every request
// costs ceil(len / gran) blocks + 16 (fixed_over_head_num_blocks at page size 1); each CU's
// payload is ceil(sum / num_cu) + 16; CUs are filled in order, a request's rest going to the
// current CU when it fits with its overhead, else the CU takes payload - 16 blocks of it (if more
// than 16 remain) and the next CU goes on. gran = kv_granularity (get_mla_metadata_v1's default 16).
AiterLaunch aiter_v1_2_launch_for(const BenchShape& s, int num_cu, int gran = 16);

// Prices one shape (ours_total_s: our modeled time for the ours / aiter column).
AiterSide aiter_side(const BenchShape& s, const std::shared_ptr<const AiterKernelFit>& fit, const AiterLaunch& l,
                     double ours_total_s);
// The side for a run without --aiter-dir (or without a kernel for the shape): "not run".
AiterSide aiter_not_run(const BenchShape& s, const std::string& why);

// Every shape of `r` gets its aiter side (kernels fitted once each, cached); without a
// directory each says "not run".
void add_aiter_sides(std::vector<ShapeResult>& r, const AiterSideOptions& o);

std::string aiter_markdown(const std::vector<ShapeResult>& r);

}  // namespace mla::bench
