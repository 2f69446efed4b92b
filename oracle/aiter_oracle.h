// aiter's MLA code objects as the oracle (DESIGN.md, "Semantics must be anchored to hardware").
//
// aiter's `hsa/<gfx>/mla/*.co` are validated on MI300X / MI355X. Running one unmodified in the
// emulator on a random problem and matching the fp64 reference confirms every instruction form
// it executed. Nothing of aiter is copied here: the launch ABI below is restated from reading
// `csrc/py_itfs_cu/asm_mla.cu` (mla_decode_stage1_asm_fwd) and `aiter/mla.py` (mla_decode_fwd,
// _fwd_kernel_stage2_asm), and the code objects are read from a user's aiter checkout.
//
// Launch ABI of the non-persistent decode kernels (asm_mla.cu, `struct KernelArgs`, packed,
// every field followed by padding to a 16-byte slot; 368 bytes):
//   0x00 ptr_R      split outputs [rows][kv_split][heads][512] fp32, or bf16 o [rows][heads][512]
//                   when kv_split == 1 (out_16_nosplit = 1; mla.py passes o itself)
//   0x10 ptr_LSE    split LSE [rows][kv_split][heads] fp32 (natural log)
//   0x20 ptr_Q      [rows][heads][576]          0x30 ptr_KV  [pages][page_size][576]
//   0x40 ptr_LTP    kv_indptr [batch+1]         0x50 ptr_LTD kv_indices (page ids)
//   0x60 ptr_LTL    kv_last_page_lens [batch]   0x70 scalar  softmax scale (f32)
//   0x80 s_MQA      gqa_ratio * max_seqlen_q    0x90 s_kv_split
//   0xA0 s_Q_Bs     Q.stride(0) * elem * max_seqlen_q (bytes per request)
//   0xB0 s_Bs       KV.stride(0) * elem (bytes per page)       0xC0 s_log2_plen
//   0xD0 ptr_QTP    qo_indptr                   0xE0 ptr_STP num_kv_splits_indptr (arange * S)
//   0xF0 ptr_RP     final o (persistent only)   0x100 ptr_QSCALE, 0x110 ptr_KVSCALE (f32 [1])
//   0x120 out_16_nosplit (kv_split == 1)        0x130 ptr_LSEP final lse (nullable)
//   0x140 ptr_GKVTP, 0x150 s_cp_world_size (1), 0x160 s_cp_rank (0)
// Grid (ceil(qseqlen*gqa / sub_Q), batch, kv_split) x 256 work-items; sub_Q >= qseqlen*gqa for
// every non-persistent decode kernel in the catalogs, so the grid is (1, batch, kv_split).
// The reduce (mla.py _fwd_kernel_stage2_asm) merges splits s < min(kv_split, ceil(len / 64))
// with running max / sum of exp(lse_s - max).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "emulator/device.h"
#include "emulator/gfx.h"
#include "runtime/problem.h"
#include "tests/reference/mla_reference.h"

namespace mla::oracle {

struct OracleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One row of hsa/<gfx>/mla/mla_asm.csv.
struct AiterKernel {
  emu::Gfx gfx = emu::Gfx::gfx942;
  std::string q_type, kv_type;  // "fp8", "bf16", "byte"
  int gqa = 0, ps = 0, qseqlen = 0, prefill = 0, causal = 0, lse = 0, cprr = 0;
  std::string knl_name, co_name, co_path;
  std::string stem() const;  // co_name without ".co"
};

// The aiter directory: `dir` if non-empty, else $AITER_DIR; it must hold hsa/<gfx>/mla/mla_asm.csv.
// Throws OracleError with a message saying what is missing.
std::string resolve_aiter_dir(const std::string& dir);
std::vector<AiterKernel> load_catalog(const std::string& aiter_dir, emu::Gfx gfx);

// Why the oracle cannot run a kernel (empty = it can).
std::string unsupported_reason(const AiterKernel& k);

// The packed launch arguments (asm_mla.cu KernelArgs), one 16-byte slot per field.
struct AiterArgs {
  uint64_t ptr_R = 0, ptr_LSE = 0, ptr_Q = 0, ptr_KV = 0, ptr_LTP = 0, ptr_LTD = 0, ptr_LTL = 0;
  float scalar = 0.f;
  uint32_t s_MQA = 0, s_kv_split = 0, s_Q_Bs = 0, s_Bs = 0, s_log2_plen = 0;
  uint64_t ptr_QTP = 0, ptr_STP = 0, ptr_RP = 0, ptr_QSCALE = 0, ptr_KVSCALE = 0;
  uint32_t out_16_nosplit = 0;
  uint64_t ptr_LSEP = 0, ptr_GKVTP = 0;
  uint32_t s_cp_world_size = 1, s_cp_rank = 0;
};
inline constexpr size_t kAiterArgsBytes = 0x170;
std::vector<uint8_t> pack_args(const AiterArgs& a);

// The reduce of aiter's split outputs (as _fwd_kernel_stage2_asm does it), per (row, head):
// splits s < valid[b]: m = max lse_s, o = sum_s exp(lse_s - m) o_s / sum_s exp(lse_s - m),
// lse = m + log(sum). partial_o [rows][S][heads][512], partial_lse [rows][S][heads].
struct Merged {
  std::vector<float> o;    // [rows][heads][512]
  std::vector<float> lse;  // [rows][heads]
};
Merged merge_splits(const std::vector<float>& partial_o, const std::vector<float>& partial_lse, int rows, int splits, int heads,
                    const std::vector<int>& valid_splits_per_row);

struct RunConfig {
  int kv_split = 1;
  // Tokens per request. Every split of kv_split <= 4 gets tokens on both targets (gfx950 hands out
  // 128-token chunks: a request of <= 384 tokens leaves split 3 unwritten; docs/aiter-oracle.md).
  std::vector<int> kv_lens = {421, 777, 1029};
  uint64_t seed = 1;
  bool relaxed = true;
  double q_scale = 1.0, kv_scale = 1.0;
  bool show_warnings = false;  // print the emulator's relaxed-mode warnings on stderr
  emu::DispatchOptions::EarlyRead early_read = emu::DispatchOptions::EarlyRead::latency;
  // Harness experiments (off by default): slot 0xF0 (ptr_RP) gets the output buffer too (asm_mla.cu
  // leaves it null for non-persistent launches); inputs get this many bytes of 0xFF slack after
  // their end (a kernel that reads past a tensor reads poison instead of faulting).
  bool fill_rp = false;
  size_t input_slack = 0;
  uint64_t sched_seed = 0;  // wave interleaving: 0 round robin, else random with this seed
  unsigned quantum = 1;     // instructions per wave turn
  // mlabench (bench/aiter_side.cpp): distinct global bytes per allocation (costs a bitmap each).
  bool count_distinct = false;
  // Query rows per request; 0: the catalog's qSeqLen (1 for its generic 0). A smaller count runs a
  // kernel as asm_mla.cu pads to it (e.g. qseqlen 1 on the qSeqLen-4 bf16/fp8 `_ps` kernel, s_MQA
  // = gqa x 1).
  int qseqlen = 0;
  // A given problem instead of the random one (mlaoracle --problem, the engine accuracy table,
  // docs/accuracy.md): its target, dtypes and page size (1) must be the kernel's and its qseqlen at
  // most the kernel's. Fewer heads than the kernel's gqa are zero-padded in q, as SGLang and ATOM
  // pad 12 heads to 16, and the padded heads' outputs are dropped before the comparison.
  const rt::Problem* problem = nullptr;
  const ref::Reference* reference = nullptr;  // the fp64 reference of `problem`, if the caller has it
  bool keep_outputs = false;                  // fill RunResult::o_bits and lse
};

struct RunResult {
  std::string kernel, target;  // co stem, gfx name
  int kv_split = 1;
  bool ran = false;           // the dispatch finished
  std::string error;          // emulator error message (first line) when not ran
  std::string error_rule;     // Error::rule
  std::string unsupported;    // mnemonic of an unsupported instruction, if that stopped it
  std::string output_layout;  // "bf16 o" / "fp32 partials + lse"
  int split_chunk = 0;        // kv_split > 1: tokens per round-robin chunk the split LSEs match (0: none)
  double d = 0, max_err_pct = 0, lse_err = -1;  // lse_err < 0: no LSE output to compare
  size_t unwritten = 0, nonfinite = 0;
  bool pass = false;          // d <= 3e-4, max error <= 2.5% of max|ref|, all written
  std::map<std::string, uint64_t> findings;  // rule -> occurrences
  std::vector<std::string> finding_lines;    // "rule +0xPC `text` xN"
  uint64_t wave_insts = 0;
  double seconds = 0;
  std::map<std::string, uint64_t> forms;     // inst_form -> wave-instructions executed
  std::map<std::string, uint64_t> written;   // allocation name -> bytes the kernel stored there
  // The dispatch's counters (global bytes per allocation, instructions by class, MACs, peak
  // outstanding load bytes) and every executed instruction's text with its wave-instruction
  // count (mlabench prices them on its issue table).
  emu::Counters counters;
  std::vector<std::pair<std::string, uint64_t>> inst_counts;
  int work_items = 0;   // persistent kernels: work items (= workgroups); else batch x kv_split
  // RunConfig::keep_outputs: o [rows][heads][512] bf16 bits and lse [rows][heads] of the problem's
  // heads (padded heads dropped); lse is NaN for rows the kernel gave none (kv_split 1 without an
  // lse output; persistent requests of one work item), empty when no row has one.
  std::vector<uint16_t> o_bits;
  std::vector<float> lse;
};

// Runs `k` on a random problem (N(0,1) inputs quantised to the kernel's dtypes; page size 1), or
// on RunConfig::problem, and compares with the fp64 reference. Never throws for emulator errors (they land in
// RunResult::error); throws OracleError for a kernel it cannot set up.
RunResult run_kernel(const AiterKernel& k, const RunConfig& cfg);

// The work items the oracle gives a persistent kernel for a request of `len` tokens and
// `kv_split` splits (as get_mla_metadata_v1's v1_0 layout: ranges aligned to 128 tokens, at most
// kv_split of them, a tail of 1-4 tokens folded into the item before it): [start, end) token ranges
// within the request.
std::vector<std::pair<int, int>> persistent_item_ranges(int len, int kv_split);

}  // namespace mla::oracle
