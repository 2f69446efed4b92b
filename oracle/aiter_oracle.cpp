#include "oracle/aiter_oracle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "emulator/code_object.h"
#include "emulator/device.h"
#include "emulator/error.h"
#include "emulator/inst_form.h"
#include "emulator/program.h"

using mla::emu::Dim3;
#include "runtime/problem.h"
#include "tests/reference/mla_reference.h"

namespace mla::oracle {

namespace fs = std::filesystem;
using emu::Gfx;

std::string AiterKernel::stem() const {
  return co_name.size() > 3 && co_name.ends_with(".co") ? co_name.substr(0, co_name.size() - 3) : co_name;
}

std::string resolve_aiter_dir(const std::string& dir) {
  std::string d = dir;
  if (d.empty())
    if (const char* e = std::getenv("AITER_DIR")) d = e;
  if (d.empty())
    throw OracleError("no aiter directory: pass --aiter-dir DIR or set AITER_DIR to a checkout of ROCm/aiter "
                      "(it must hold hsa/gfx942/mla/mla_asm.csv and/or hsa/gfx950/mla/mla_asm.csv)");
  bool any = false;
  for (const char* g : {"gfx942", "gfx950"}) any |= fs::exists(fs::path(d) / "hsa" / g / "mla" / "mla_asm.csv");
  if (!any)
    throw OracleError(fmt::format("aiter directory '{}' has no hsa/gfx942/mla/mla_asm.csv nor hsa/gfx950/mla/mla_asm.csv "
                                  "(expected a checkout of ROCm/aiter; --aiter-dir or AITER_DIR)", d));
  return d;
}

namespace {

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') { out.push_back(cur); cur.clear(); }
    else if (c != '\r') cur += c;
  }
  out.push_back(cur);
  return out;
}

}  // namespace

std::vector<AiterKernel> load_catalog(const std::string& aiter_dir, Gfx gfx) {
  fs::path dir = fs::path(aiter_dir) / "hsa" / emu::gfx_name(gfx) / "mla";
  fs::path csv = dir / "mla_asm.csv";
  std::ifstream f(csv);
  if (!f) throw OracleError(fmt::format("cannot open {} (no {} MLA catalog in this aiter directory)", csv.string(), emu::gfx_name(gfx)));
  std::string line;
  if (!std::getline(f, line)) throw OracleError(csv.string() + ": empty file");
  std::vector<std::string> head = split_csv(line);
  auto col = [&](const char* name) -> int {
    auto it = std::find(head.begin(), head.end(), name);
    return it == head.end() ? -1 : int(it - head.begin());
  };
  for (const char* need : {"qType", "kvType", "Gqa", "ps", "qSeqLen", "prefill", "causal", "knl_name", "co_name"})
    if (col(need) < 0) throw OracleError(fmt::format("{}: header lacks column '{}' (header: {})", csv.string(), need, line));
  std::vector<AiterKernel> out;
  int lineno = 1;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty() || line == "\r") continue;
    auto v = split_csv(line);
    auto get = [&](const char* name) -> std::string {
      int c = col(name);
      return c >= 0 && c < int(v.size()) ? v[c] : std::string();
    };
    auto geti = [&](const char* name) {
      std::string s = get(name);
      try {
        return s.empty() ? 0 : std::stoi(s);
      } catch (const std::exception&) {
        throw OracleError(fmt::format("{}:{}: column {} = '{}' is not an integer", csv.string(), lineno, name, s));
      }
    };
    AiterKernel k;
    k.gfx = gfx;
    k.q_type = get("qType");
    k.kv_type = get("kvType");
    k.gqa = geti("Gqa");
    k.ps = geti("ps");
    k.qseqlen = geti("qSeqLen");
    k.prefill = geti("prefill");
    k.causal = geti("causal");
    k.lse = geti("lse");
    k.cprr = geti("cprr");
    k.knl_name = get("knl_name");
    k.co_name = get("co_name");
    k.co_path = (dir / k.co_name).string();
    out.push_back(std::move(k));
  }
  return out;
}

std::string unsupported_reason(const AiterKernel& k) {
  if (k.prefill) return "prefill kernel (another launch ABI)";
  if (k.kv_type != "fp8" && k.kv_type != "bf16") return "kv type '" + k.kv_type + "' (packed KV with scales) not modelled";
  if (k.q_type != "fp8" && k.q_type != "bf16") return "q type '" + k.q_type + "' not modelled";
  if (k.cprr) return "context-parallel round-robin variant";
  if (!k.causal && k.qseqlen > 1) return "non-causal with qseqlen > 1: the reference models the causal mask only";
  if (std::max(1, k.qseqlen) * k.gqa > 128) return "more than 128 query rows per workgroup: launch grid not derived";
  return "";
}

std::vector<uint8_t> pack_args(const AiterArgs& a) {
  std::vector<uint8_t> b(kAiterArgsBytes, 0);
  auto put = [&](size_t off, const void* v, size_t n) { std::memcpy(b.data() + off, v, n); };
  auto p64 = [&](size_t off, uint64_t v) { put(off, &v, 8); };
  auto p32 = [&](size_t off, uint32_t v) { put(off, &v, 4); };
  p64(0x00, a.ptr_R);
  p64(0x10, a.ptr_LSE);
  p64(0x20, a.ptr_Q);
  p64(0x30, a.ptr_KV);
  p64(0x40, a.ptr_LTP);
  p64(0x50, a.ptr_LTD);
  p64(0x60, a.ptr_LTL);
  put(0x70, &a.scalar, 4);
  p32(0x80, a.s_MQA);
  p32(0x90, a.s_kv_split);
  p32(0xA0, a.s_Q_Bs);
  p32(0xB0, a.s_Bs);
  p32(0xC0, a.s_log2_plen);
  p64(0xD0, a.ptr_QTP);
  p64(0xE0, a.ptr_STP);
  p64(0xF0, a.ptr_RP);
  p64(0x100, a.ptr_QSCALE);
  p64(0x110, a.ptr_KVSCALE);
  p32(0x120, a.out_16_nosplit);
  p64(0x130, a.ptr_LSEP);
  p64(0x140, a.ptr_GKVTP);
  p32(0x150, a.s_cp_world_size);
  p32(0x160, a.s_cp_rank);
  return b;
}

Merged merge_splits(const std::vector<float>& po, const std::vector<float>& pl, int rows, int S, int H,
                    const std::vector<int>& valid) {
  Merged m;
  m.o.assign(size_t(rows) * H * 512, 0.f);
  m.lse.assign(size_t(rows) * H, 0.f);
  std::vector<double> acc(512);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < H; ++h) {
      double e_max = -std::numeric_limits<double>::infinity(), e_sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int s = 0; s < std::min(S, valid[r]); ++s) {
        double l = pl[(size_t(r) * S + s) * H + h];
        double n_max = std::max(l, e_max);
        double old_scale = std::exp(e_max - n_max), w = std::exp(l - n_max);
        const float* o = &po[((size_t(r) * S + s) * H + h) * 512];
        for (int d = 0; d < 512; ++d) acc[d] = acc[d] * old_scale + w * o[d];
        e_sum = e_sum * old_scale + w;
        e_max = n_max;
      }
      for (int d = 0; d < 512; ++d) m.o[(size_t(r) * H + h) * 512 + d] = float(acc[d] / e_sum);
      m.lse[size_t(r) * H + h] = float(e_max + std::log(e_sum));
    }
  return m;
}

namespace {

// Tokens per split chunk in aiter's reduce (mla.py, mgc), for the max_seqlen_q aiter launches
// this kernel with: asm_mla.cu sends bf16 gqa 64 at max_seqlen_q 1 to the qSeqLen-1 row
// (mla_a16w16_qh64_qseqlen1_gqaratio64_v3) and only max_seqlen_q >= 2 to the generic qSeqLen-0 row
// (MLA_A16W16_1TG_4W_64mx1_*), where mla.py's mgc is 16, not the 32 of max_seqlen_q 1.
int reduce_chunk(const AiterKernel& k, int qseqlen) {
  int heads = k.gqa;
  if (k.qseqlen == 0 && heads == 64 && k.q_type == "bf16" && k.kv_type == "bf16") qseqlen = std::max(qseqlen, 2);
  int mgc = (heads == 8 || heads == 16) && (qseqlen == 1 || (heads == 8 && qseqlen == 2)) ? 64 : 16;
  if ((heads == 128 && k.q_type == "fp8" && k.kv_type == "fp8") || (heads == 64 && k.q_type == "bf16" && k.kv_type == "bf16" && qseqlen == 1))
    mgc = 32;
  return mgc;
}

// Which tokens did split s take? aiter's kernels hand out fixed-size chunks round robin (chunk c to
// split c % S). Tries chunk sizes against the split LSEs of head 0 of each request's first row
// and returns the one that matches (0 if none does within 1e-3).
int detect_split_chunk(const rt::Problem& p, const std::vector<float>& lse, int S) {
  const int H = p.heads;
  int best = 0;
  double best_err = 1e-3;
  for (int C : {16, 32, 64, 128, 256}) {
    double err = 0;
    for (int b = 0; b < p.batch(); ++b) {
      int row = p.qo_indptr[b], len = p.kv_len(b);
      std::vector<double> sum(S, 0.0);
      for (int t = 0; t < len; ++t) {
        double acc = 0;
        for (int d = 0; d < rt::kQkDim; ++d)
          acc += ref::decode(p.q.bits(p.q_elem(row, 0, d)), p.q_dtype, p.target) * ref::decode(p.kv.bits(p.kv_elem(b, t, d)), p.kv_dtype, p.target);
        sum[(t / C) % S] += std::exp(acc * p.sm_scale * p.q_scale * p.kv_scale);
      }
      for (int s = 0; s < S; ++s) {
        if (sum[s] == 0) continue;  // an empty split: the kernel may leave it unwritten
        double k = lse[(size_t(row) * S + s) * H];
        err = std::max(err, std::isfinite(k) ? std::fabs(k - std::log(sum[s])) : 1e9);
      }
    }
    if (err < best_err) { best_err = err; best = C; }
  }
  return best;
}

std::string first_line(const std::string& s) {
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

namespace {

// s_MQA as asm_mla.cu sets it: gqa_ratio * max_seqlen_q, except gqa 8 bf16 qlen 2 and the gfx950
// persistent launches whose kernel choice it remaps, which pass gqa_ratio.
uint32_t s_mqa(const AiterKernel& k, int qseqlen) {
  const int g = k.gqa, q = qseqlen;
  const bool fp8 = k.q_type == "fp8" && k.kv_type == "fp8", bf16 = k.q_type == "bf16" && k.kv_type == "bf16";
  if (g == 8 && q == 2 && k.q_type == "bf16") return uint32_t(g);
  if (k.ps && k.gfx == Gfx::gfx950) {
    bool remap = false;
    if (fp8)
      remap = (g == 32 && q >= 4) || (g == 64 && q >= 2) || g == 128 || (g == 16 && (q == 3 || q == 4)) ||
              (g == 32 && (q == 2 || q == 3)) || (g == 64 && q == 1);
    if (bf16) remap = ((g * q >= 128 || g > 64) && g != 48) || g * q >= 64 || g >= 16;
    if (remap) return uint32_t(g);
  }
  return uint32_t(g * q);
}

// Persistent (_ps) kernels: aiter's work metadata (csrc/include/mla.h MlaWorkInfo, filled as
// csrc/kernels/mla/metadata/v1_0_device.cuh does): per request up to kv_split work items over
// 128-token-aligned kv ranges [kv_start, kv_end) (absolute positions in kv_indices),
// kv_offset = request end - kv_end, partial_qo_loc = -1 (write the final o through ptr_RP) for
// a request with one item, else the item's row in the partial buffers; one item per workgroup.
struct WorkItem {
  int32_t batch_idx, partial_qo_loc, qo_start, qo_end, kv_start, kv_end, kv_offset, pad;
};
struct WorkPlan {
  std::vector<WorkItem> items;
  std::vector<std::vector<int>> partials_of;  // partial slots of each request
  int num_partials = 0;
};
WorkPlan plan_work(const rt::Problem& p, int S, int qseqlen) {
  WorkPlan w;
  w.partials_of.resize(p.batch());
  for (int b = 0; b < p.batch(); ++b) {
    const int kv0 = p.kv_indptr[b], kv1 = p.kv_indptr[b + 1];
    std::vector<WorkItem> items;
    for (auto [st, end] : persistent_item_ranges(kv1 - kv0, S))
      items.push_back({b, 0, p.qo_indptr[b], p.qo_indptr[b + 1], kv0 + st, kv0 + end, kv1 - (kv0 + end), 0});
    for (auto& it : items) {
      if (items.size() == 1) it.partial_qo_loc = -1;
      else {
        it.partial_qo_loc = w.num_partials * qseqlen;
        w.partials_of[b].push_back(w.num_partials++);
      }
      w.items.push_back(it);
    }
  }
  return w;
}

}  // namespace

std::vector<std::pair<int, int>> persistent_item_ranges(int len, int S) {
  // kn_get_mla_metadata_v1_0: payload = ceil(ceil(len / 128) / S) blocks of 128 tokens; a last
  // item of at most 4 tokens is folded into the one before it (split_local-- when the tail is
  // 1..4; kv_offset <= 4 stretches kv_end to the request's end), so no item is a few tokens that
  // a causal qseqlen <= 4 row may see none of.
  std::vector<std::pair<int, int>> r;
  const int blocks = (len + 127) / 128, payload = (blocks + S - 1) / S * 128;
  int items = (len + payload - 1) / payload;
  const int tail = len % payload;
  if (tail != 0 && tail <= 4 && items > 1) --items;
  // The last item ends at the request's end. (v1_0 as written keeps kv_end = payload when the
  // fold leaves one item, dropping the 1-4 tail tokens; docs/aiter-oracle.md.)
  for (int sid = 0; sid < items; ++sid) r.push_back({sid * payload, sid == items - 1 ? len : (sid + 1) * payload});
  return r;
}

namespace {

// Findings per rule and one line per site: "rule +0xPC `text` xN: <the rule's words> (distance)".
void record_findings(RunResult& res, const std::vector<emu::Finding>& findings) {
  for (auto& f : findings) {
    res.findings[f.rule] += f.count;
    std::string what;  // "... `text`: rule: <what> (<details>)"
    if (auto at = f.message.find("`: " + f.rule + ": "); at != std::string::npos) {
      what = f.message.substr(at + f.rule.size() + 5);
      what = what.substr(0, std::min(what.find(" ("), what.find(": needs")));
    }
    res.finding_lines.push_back(fmt::format("{} +0x{:x} `{}` x{}: {}{}", f.rule, f.pc, f.text, f.count, what,
                                            f.min_distance >= 0 ? fmt::format(" ({}..{} wait states after the load)", f.min_distance, f.max_distance) : ""));
  }
}

// The outputs of the launched problem `p` (its heads >= the original's: padded ones dropped here),
// compared with the reference of the original problem. lse_all: `lse` covers every row (else it
// is kept for the caller but not compared).
void compare_into(RunResult& res, const RunConfig& cfg, const rt::Problem& p, std::vector<uint16_t> o_bits,
                  std::vector<float> lse_rows, bool lse_all) {
  const rt::Problem& orig = cfg.problem ? *cfg.problem : p;
  if (orig.heads != p.heads) {
    const size_t rows = size_t(p.rows());
    std::vector<uint16_t> o(rows * orig.heads * 512);
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(&o[r * orig.heads * 512], &o_bits[r * p.heads * 512], size_t(orig.heads) * 512 * 2);
    o_bits = std::move(o);
    if (!lse_rows.empty()) {
      std::vector<float> l(rows * orig.heads);
      for (size_t r = 0; r < rows; ++r) std::memcpy(&l[r * orig.heads], &lse_rows[r * p.heads], size_t(orig.heads) * 4);
      lse_rows = std::move(l);
    }
  }
  std::optional<ref::Reference> own;
  if (!cfg.reference) own = ref::run_reference(orig);
  const ref::Reference& r = cfg.reference ? *cfg.reference : *own;
  const std::vector<float>* lse = lse_all && !lse_rows.empty() ? &lse_rows : nullptr;
  ref::Compare cmp = ref::compare(r, o_bits, lse);
  if (cfg.keep_outputs) {
    res.o_bits = o_bits;
    res.lse = lse_rows;
  }
  res.d = cmp.d;
  res.max_err_pct = cmp.max_abs_ref > 0 ? 100.0 * cmp.max_abs_err / cmp.max_abs_ref : 0.0;
  res.lse_err = lse ? cmp.lse_max_abs_err : -1.0;
  res.unwritten = cmp.unwritten;
  res.nonfinite = cmp.nonfinite + cmp.lse_nonfinite;
  res.pass = cmp.clean() && res.d <= 3e-4 && res.max_err_pct <= 2.5;
}

// Persistent kernels: requests with one work item wrote bf16 o through ptr_RP; the others wrote
// partials [slot*qseqlen + r][1][heads][512] + LSE, merged here as mla_reduce_v1 would.
RunResult finish_persistent(RunResult& res, const RunConfig& cfg, const rt::Problem& p, emu::Device& dev, uint64_t final_o,
                            uint64_t ps_out, uint64_t ps_lse, int num_partials, const std::vector<std::vector<int>>& partials_of,
                            int qseqlen) {
  const int H = p.heads, rows = p.rows();
  std::vector<uint16_t> o_bits = dev.read_vector<uint16_t>(final_o, size_t(rows) * H * 512);
  const size_t prow = size_t(std::max(1, num_partials)) * qseqlen;
  std::vector<float> po = dev.read_vector<float>(ps_out, prow * H * 512), pl = dev.read_vector<float>(ps_lse, prow * H);
  std::vector<float> lse(size_t(rows) * H, std::numeric_limits<float>::quiet_NaN());
  bool all_merged = true;
  for (int b = 0; b < p.batch(); ++b) {
    const auto& slots = partials_of[b];
    if (slots.empty()) { all_merged = false; continue; }
    for (int r = 0; r < qseqlen; ++r) {
      // Gather this row's partials into [1][S][H] / [1][S][H][512] and merge.
      const int S = int(slots.size()), row = p.qo_indptr[b] + r;
      std::vector<float> o1(size_t(S) * H * 512), l1(size_t(S) * H);
      for (int s = 0; s < S; ++s) {
        size_t src = size_t(slots[s]) * qseqlen + r;
        std::memcpy(&o1[size_t(s) * H * 512], &po[src * H * 512], size_t(H) * 512 * 4);
        std::memcpy(&l1[size_t(s) * H], &pl[src * H], size_t(H) * 4);
      }
      Merged m = merge_splits(o1, l1, 1, S, H, {S});
      for (int h = 0; h < H; ++h) {
        lse[size_t(row) * H + h] = m.lse[h];
        for (int d = 0; d < 512; ++d) {
          float v = m.o[size_t(h) * 512 + d];
          o_bits[(size_t(row) * H + h) * 512 + d] = std::isnan(v) ? ref::kUnwrittenBf16 : ref::bf16_bits(double(v));
        }
      }
    }
  }
  res.output_layout = fmt::format("persistent: {} work items, {} partials merged as mla_reduce_v1, single-item requests bf16 o via ptr_RP",
                                  num_partials ? "split" : "unsplit", num_partials);
  if (const char* dump = std::getenv("MLAORACLE_DUMP")) {  // debugging aid
    fs::create_directories(dump);
    std::string base = fmt::format("{}/{}_{}_ps{}", dump, res.kernel, res.target, res.kv_split);
    ref::Reference r = ref::run_reference(p);
    std::ofstream(base + ".o_bf16.bin", std::ios::binary).write(reinterpret_cast<const char*>(o_bits.data()), o_bits.size() * 2);
    std::ofstream(base + ".ref_f64.bin", std::ios::binary).write(reinterpret_cast<const char*>(r.o.data()), r.o.size() * 8);
  }
  compare_into(res, cfg, p, std::move(o_bits), std::move(lse), all_merged);
  return res;
}

// RunConfig::problem checked against the kernel, and q zero-padded to the kernel's heads.
rt::Problem launched_problem(const AiterKernel& k, const rt::Problem& given, int kernel_qseqlen) {
  const rt::Target t = k.gfx == Gfx::gfx942 ? rt::Target::gfx942 : rt::Target::gfx950;
  auto bad = [&](const std::string& what, const std::string& value, const std::string& allowed) {
    return OracleError(fmt::format("problem for {} ({}): {} = {} (allowed: {})", k.stem(), emu::gfx_name(k.gfx), what, value, allowed));
  };
  if (given.target != t) throw bad("target", rt::name(given.target), std::string(emu::gfx_name(k.gfx)));
  if (rt::name(given.q_dtype) != k.q_type) throw bad("q_dtype", rt::name(given.q_dtype), k.q_type);
  if (rt::name(given.kv_dtype) != k.kv_type) throw bad("kv_dtype", rt::name(given.kv_dtype), k.kv_type);
  if (given.page_size != 1) throw bad("page_size", std::to_string(given.page_size), "1, the oracle's launch");
  if (given.qseqlen > kernel_qseqlen) throw bad("qseqlen", std::to_string(given.qseqlen), fmt::format("1..{}", kernel_qseqlen));
  if (given.heads > k.gqa) throw bad("heads", std::to_string(given.heads), fmt::format("1..{}, the kernel's gqa", k.gqa));
  if (given.logit_cap != 0) throw bad("logit_cap", fmt::format("{}", given.logit_cap), "0: aiter's decode kernels have no soft cap");
  rt::Problem p = given;
  if (given.heads == k.gqa) return p;
  p.heads = k.gqa;
  p.q.shape[1] = size_t(k.gqa);
  p.q.bytes.assign(size_t(p.rows()) * k.gqa * rt::kQkDim * p.q.elem_bytes, 0);  // +0 in every format
  const size_t row_bytes = size_t(given.heads) * rt::kQkDim * p.q.elem_bytes;
  for (int r = 0; r < p.rows(); ++r)
    std::memcpy(&p.q.bytes[size_t(r) * k.gqa * rt::kQkDim * p.q.elem_bytes], &given.q.bytes[size_t(r) * row_bytes], row_bytes);
  return p;
}

}  // namespace

RunResult run_kernel(const AiterKernel& k, const RunConfig& cfg) {
  RunResult res;
  res.kernel = k.stem();
  res.target = emu::gfx_name(k.gfx);
  res.kv_split = cfg.kv_split;
  if (std::string why = unsupported_reason(k); !why.empty()) throw OracleError(k.stem() + ": " + why);
  if (cfg.kv_split < 1) throw OracleError("kv_split must be >= 1");

  if (cfg.qseqlen > std::max(1, k.qseqlen))
    throw OracleError(fmt::format("{}: qseqlen {} is more than the kernel's {}", k.stem(), cfg.qseqlen, std::max(1, k.qseqlen)));
  const int qseqlen = cfg.problem ? cfg.problem->qseqlen : cfg.qseqlen > 0 ? cfg.qseqlen : std::max(1, k.qseqlen), H = k.gqa,
            S = cfg.kv_split;
  rt::ProblemParams pp;
  pp.target = k.gfx == Gfx::gfx942 ? rt::Target::gfx942 : rt::Target::gfx950;
  pp.heads = H;
  pp.qseqlen = qseqlen;
  pp.q_dtype = k.q_type == "fp8" ? rt::DType::fp8 : rt::DType::bf16;
  pp.kv_dtype = k.kv_type == "fp8" ? rt::DType::fp8 : rt::DType::bf16;
  pp.page_size = 1;
  pp.kv_lens = cfg.kv_lens;
  pp.seed = cfg.seed;
  pp.q_scale = pp.q_dtype == rt::DType::fp8 ? cfg.q_scale : 1.0;
  pp.kv_scale = pp.kv_dtype == rt::DType::fp8 ? cfg.kv_scale : 1.0;
  pp.extra_pages = 7;
  rt::Problem p = cfg.problem ? launched_problem(k, *cfg.problem, std::max(1, k.qseqlen)) : rt::make_random_problem(pp);
  const int batch = p.batch(), rows = p.rows();

  std::shared_ptr<const emu::CodeObject> co;
  try {
    co = emu::CodeObject::load_file(k.co_path);
  } catch (const emu::Error& e) {
    res.error = first_line(e.what());
    res.error_rule = e.rule;
    return res;
  }
  const emu::Kernel* kern = nullptr;
  for (auto& kk : co->kernels())
    if (kk.name == k.knl_name) kern = &kk;
  if (!kern) {
    res.error = fmt::format("{} has no kernel {}", k.co_path, k.knl_name);
    res.error_rule = "loader";
    return res;
  }

  emu::Device dev(k.gfx);
  auto upload = [&](const void* data, size_t n, const char* name) {
    uint64_t a = dev.alloc(std::max<size_t>(n, 4) + cfg.input_slack, 256, name, 0xff);
    if (n) dev.write(a, data, n);
    return a;
  };
  const uint64_t q = upload(p.q.bytes.data(), p.q.bytes.size(), "q");
  const uint64_t kv = upload(p.kv.bytes.data(), p.kv.bytes.size(), "kv");
  const uint64_t kv_indptr = upload(p.kv_indptr.data(), p.kv_indptr.size() * 4, "kv_indptr");
  const uint64_t kv_indices = upload(p.kv_indices.data(), p.kv_indices.size() * 4, "kv_indices");
  const uint64_t last = upload(p.kv_last_page_lens.data(), p.kv_last_page_lens.size() * 4, "kv_last_page_lens");
  const uint64_t qo_indptr = upload(p.qo_indptr.data(), p.qo_indptr.size() * 4, "qo_indptr");
  std::vector<int32_t> split_indptr(batch + 1);
  for (int b = 0; b <= batch; ++b) split_indptr[b] = b * S;
  const uint64_t splits = upload(split_indptr.data(), split_indptr.size() * 4, "num_kv_splits_indptr");
  float qs = float(p.q_scale), ks = float(p.kv_scale);
  const uint64_t q_scale = upload(&qs, 4, "q_scale"), kv_scale = upload(&ks, 4, "kv_scale");
  const size_t out_elems = size_t(rows) * S * H * 512, lse_elems = size_t(rows) * S * H;
  const uint64_t out = dev.alloc(out_elems * 4, 256, "split_o", 0xff);
  const uint64_t lse = dev.alloc(lse_elems * 4, 256, "split_lse", 0xff);

  AiterArgs a;
  a.ptr_R = out;
  a.ptr_LSE = lse;
  a.ptr_Q = q;
  a.ptr_KV = kv;
  a.ptr_LTP = kv_indptr;
  a.ptr_LTD = kv_indices;
  a.ptr_LTL = last;
  a.scalar = float(p.sm_scale);
  a.s_MQA = s_mqa(k, qseqlen);
  a.s_kv_split = uint32_t(S);
  a.s_Q_Bs = uint32_t(H * rt::kQkDim * rt::elem_bytes(p.q_dtype) * qseqlen);
  a.s_Bs = uint32_t(p.page_size * rt::kQkDim * rt::elem_bytes(p.kv_dtype));
  a.s_log2_plen = 0;
  a.ptr_QTP = qo_indptr;
  a.ptr_STP = splits;
  a.ptr_QSCALE = q_scale;
  a.ptr_KVSCALE = kv_scale;
  a.out_16_nosplit = S == 1 ? 1 : 0;
  if (cfg.fill_rp) a.ptr_RP = out;

  WorkPlan plan;
  uint64_t final_o = 0, ps_out = 0, ps_lse = 0;
  if (k.ps) {
    plan = plan_work(p, S, qseqlen);
    const auto& work = plan.items;
    std::vector<int32_t> work_indptr(work.size() + 1);
    for (size_t i = 0; i <= work.size(); ++i) work_indptr[i] = int32_t(i);
    const uint64_t wi = upload(work_indptr.data(), work_indptr.size() * 4, "work_indptr");
    const uint64_t ws = upload(work.data(), work.size() * sizeof(WorkItem), "work_info_set");
    uint64_t meta[10] = {wi, ws};
    a.ptr_STP = upload(meta, sizeof meta, "ps_meta");
    const size_t prow = size_t(std::max(1, plan.num_partials)) * qseqlen;
    ps_out = dev.alloc(prow * H * 512 * 4, 256, "partial_o", 0xff);
    ps_lse = dev.alloc(prow * H * 4, 256, "partial_lse", 0xff);
    final_o = dev.alloc(size_t(rows) * H * 512 * 2, 256, "o", 0xff);
    a.ptr_R = ps_out;
    a.ptr_LSE = ps_lse;
    a.ptr_RP = final_o;
    a.s_kv_split = 1;       // splitData.size(1)
    a.out_16_nosplit = 1;   // = kv_split in the persistent launch
    if (k.lse) a.ptr_LSEP = dev.alloc(size_t(rows) * H * 4, 256, "final_lse", 0xff);
  }

  emu::DispatchOptions opt;
  opt.relaxed = cfg.relaxed;
  opt.early_read = cfg.early_read;
  opt.random_seed = cfg.sched_seed;
  opt.quantum = cfg.quantum;
  std::ostringstream quiet;
  opt.warnings = cfg.show_warnings ? &std::cerr : &quiet;
  opt.count_distinct = cfg.count_distinct;  // per-allocation byte counts stay on
  std::vector<uint64_t> counts;
  opt.exec_counts = &counts;
  emu::Counters c;
  try {
    Dim3 grid = k.ps ? Dim3{unsigned(plan.items.size()), 1, 1} : Dim3{1, unsigned(batch), unsigned(S)};
    c = dev.dispatch(co, k.knl_name, grid, {256, 1, 1}, pack_args(a), opt);
  } catch (const emu::Error& e) {
    res.error = first_line(e.what());
    res.error_rule = e.rule;
    if (e.rule == "unsupported") {
      std::string m = e.what();
      auto at = m.find("instruction '");
      if (at != std::string::npos) res.unsupported = m.substr(at + 13, m.find('\'', at + 13) - at - 13);
      else res.unsupported = "(unparsed)";
    }
    return res;
  }
  res.ran = true;
  res.counters = c;
  res.work_items = k.ps ? int(plan.items.size()) : batch * S;
  for (auto& b : c.buffers)
    if (b.written) res.written[b.name] = b.written;
  res.wave_insts = c.total.wave_insts;
  res.seconds = c.seconds;
  record_findings(res, c.findings);
  auto prog = emu::build_program(co, *kern);
  for (size_t i = 0; i < counts.size() && i < prog->insts.size(); ++i)
    if (counts[i]) {
      res.forms[emu::inst_form(prog->insts[i])] += counts[i];
      res.inst_counts.push_back({prog->insts[i].text, counts[i]});
    }

  if (k.ps) return finish_persistent(res, cfg, p, dev, final_o, ps_out, ps_lse, plan.num_partials, plan.partials_of, qseqlen);

  // Outputs.
  std::vector<uint32_t> raw_o = dev.read_vector<uint32_t>(out, out_elems);
  std::vector<float> raw_lse = dev.read_vector<float>(lse, lse_elems);
  std::vector<uint32_t> raw_lse_bits(lse_elems);
  std::memcpy(raw_lse_bits.data(), raw_lse.data(), lse_elems * 4);
  const size_t final_elems = size_t(rows) * H * 512;
  std::vector<uint16_t> o_bits(final_elems, ref::kUnwrittenBf16);
  std::vector<float> final_lse;
  bool have_lse = false;
  auto to_bf16 = [](uint32_t fbits) -> uint16_t {
    if (fbits == 0xffffffffu) return ref::kUnwrittenBf16;
    float f;
    std::memcpy(&f, &fbits, 4);
    return ref::bf16_bits(double(f));
  };
  if (S == 1) {
    // out_16_nosplit: bf16 o [rows][heads][512] in the first half; a kernel that ignores the flag
    // writes fp32 [rows][1][heads][512] instead. Which one is told by the bytes written.
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(raw_o.data());
    bool upper_written = false;
    for (size_t i = final_elems * 2; i < out_elems * 4 && !upper_written; ++i) upper_written = bytes[i] != 0xff;
    if (!upper_written) {
      res.output_layout = "bf16 o";
      std::memcpy(o_bits.data(), bytes, final_elems * 2);
    } else {
      res.output_layout = "fp32 o";
      for (size_t i = 0; i < final_elems; ++i) o_bits[i] = to_bf16(raw_o[i]);
    }
    bool all = true;
    for (size_t i = 0; i < size_t(rows) * H; ++i) all &= raw_lse_bits[i] != 0xffffffffu;
    if (all) {
      have_lse = true;
      final_lse.assign(raw_lse.begin(), raw_lse.begin() + size_t(rows) * H);
      res.output_layout += " + lse";
    }
  } else {
    res.output_layout = "fp32 split partials + lse, merged as aiter's reduce";
    std::vector<float> po(out_elems);
    std::memcpy(po.data(), raw_o.data(), out_elems * 4);
    std::vector<int> valid(rows);
    int chunk = reduce_chunk(k, qseqlen);
    for (int b = 0; b < batch; ++b)
      for (int r = p.qo_indptr[b]; r < p.qo_indptr[b + 1]; ++r) valid[r] = std::min(S, (p.kv_len(b) + chunk - 1) / chunk);
    // A split the reduce reads but the kernel never wrote stays NaN (poison) and shows as non-finite.
    res.split_chunk = detect_split_chunk(p, raw_lse, S);
    Merged m = merge_splits(po, raw_lse, rows, S, H, valid);
    for (size_t i = 0; i < final_elems; ++i) {
      uint32_t b;
      std::memcpy(&b, &m.o[i], 4);
      o_bits[i] = std::isnan(m.o[i]) ? ref::kUnwrittenBf16 : to_bf16(b);
    }
    final_lse = m.lse;
    have_lse = true;
  }
  if (const char* dump = std::getenv("MLAORACLE_DUMP")) {  // debugging aid: raw outputs
    fs::create_directories(dump);
    std::string base = fmt::format("{}/{}_{}_s{}", dump, res.kernel, res.target, S);
    std::ofstream(base + ".o_bf16.bin", std::ios::binary).write(reinterpret_cast<const char*>(o_bits.data()), o_bits.size() * 2);
    std::ofstream(base + ".raw_o.bin", std::ios::binary).write(reinterpret_cast<const char*>(raw_o.data()), raw_o.size() * 4);
    std::ofstream(base + ".raw_lse.bin", std::ios::binary).write(reinterpret_cast<const char*>(raw_lse.data()), raw_lse.size() * 4);
  }
  compare_into(res, cfg, p, std::move(o_bits), have_lse ? std::move(final_lse) : std::vector<float>{}, have_lse);
  return res;
}

}  // namespace mla::oracle
