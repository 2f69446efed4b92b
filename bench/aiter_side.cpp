// aiter's code objects through mlabench's counters and machine model (bench/aiter_side.h).
#include "bench/aiter_side.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "oracle/aiter_oracle.h"

namespace mla::bench {

// ---- launch configuration -------------------------------------------------------------------

int aiter_meta_splits(int bs, int64_t total_kv, int nhead, int max_seqlen_q, bool q_fp8, int cu_num) {
  if (bs < 1 || cu_num < 1) throw std::invalid_argument("aiter_meta_splits: bs and cu_num must be >= 1");
  // Restated from aiter/mla.py get_meta_param (see the header); the same operation order as the
  // Python expression, so that ties compare equal and go to the smallest i like max(key=...).
  const double avg_kv = double(total_kv) / double(bs);
  const double overhead = 84.1;
  int splits = 1;
  double best = -1;
  for (int i = 1; i <= 16; ++i) {
    const int64_t wgs = int64_t(bs) * i;
    const int64_t rounded = (wgs + cu_num - 1) / cu_num * cu_num;
    const double v = double(wgs) / double(rounded) * avg_kv / (avg_kv + overhead * i);
    if (v > best) {
      best = v;
      splits = i;
    }
  }
  if (q_fp8) {
    const int rows = nhead * max_seqlen_q;
    int min_block_n = 0;
    for (auto [r, b] : std::initializer_list<std::pair<int, int>>{
             {8, 64}, {16, 128}, {24, 128}, {32, 128}, {48, 64}, {64, 64}, {128, 32}, {256, 32}, {384, 32}, {512, 32}})
      if (r == rows) min_block_n = b;
    if (!min_block_n)
      throw std::invalid_argument(fmt::format("aiter_meta_splits: no fp8 block size for nhead*max_seqlen_q = {}", rows));
    splits = int(std::min<int64_t>(splits, (total_kv + int64_t(bs) * min_block_n - 1) / (int64_t(bs) * min_block_n)));
    if (splits > 1)
      splits = std::min(splits, int(std::floor(std::fabs(avg_kv - max_seqlen_q) / min_block_n)) + 1);
  }
  return splits;
}

int aiter_v1_0_splits(rt::Target t, int seqlen_kv, int batch, int num_cu, int num_splits) {
  if (t == rt::Target::gfx942) return 16;
  const int per_cu = (num_cu + batch - 1) / batch;
  int s = std::min(seqlen_kv / 196, per_cu);
  if (num_splits > 0) s = std::min(s, num_splits);
  return std::max(1, s);  // a request always has one item (the kernel's split_local >= 1)
}

std::vector<int> aiter_v1_0_cu_of_items(int items, int num_cu) {
  std::vector<int> indptr(size_t(num_cu) + 1, 0);
  const int per = items / num_cu, res = items % num_cu;
  for (int c = 1; c <= num_cu; ++c)
    indptr[c] = c <= res ? std::min(c * (per + 1), items) : res * (per + 1) + (c - res) * per;
  std::vector<int> cu(static_cast<size_t>(items), 0);
  for (int c = 0; c < num_cu; ++c)
    for (int i = indptr[c]; i < indptr[c + 1]; ++i) cu[size_t(i)] = c;
  return cu;
}

// ---- measurement ----------------------------------------------------------------------------

nlohmann::json AiterSample::to_json() const {
  return {{"kv_lens", kv_lens}, {"kv_split", kv_split}, {"work_items", U}, {"tokens", N}, {"requests", G},
          {"read", read}, {"read_distinct", read_distinct}, {"written", written}, {"kv_read", kv_read},
          {"mfma_macs", macs}, {"issue_cycles_serial", issue_cycles}, {"issue_cycles_by_kind", issue_cycles_by_kind}, {"wave_insts", wave_insts},
          {"insts_by_class", insts_by_class}, {"read_by_buffer", read_by_buffer}, {"written_by_buffer", written_by_buffer},
          {"vm_load_peak_workgroup_bytes", inflight_peak_wg},
          {"vm_load_peak_wave_bytes", inflight_peak_wave}, {"pass", pass}, {"d", d}, {"emulator_seconds", seconds}};
}

nlohmann::json AiterKernelFit::to_json() const {
  nlohmann::json s = nlohmann::json::array();
  for (const auto& x : samples) s.push_back(x.to_json());
  return {{"kernel", kernel},
          {"target", rt::name(target)},
          {"heads", heads},
          {"waves_per_workgroup", waves_per_wg},
          {"fit_max_relative_residual", fit_residual},
          {"read_per_token", facts.read_per_token},
          {"read_per_item", facts.read_per_unit},
          {"distinct_per_token", facts.distinct_per_token},
          {"distinct_per_item", facts.distinct_per_unit},
          {"distinct_per_request", facts.distinct_per_q_group},
          {"write_per_partial_item", facts.write_partial_unit},
          {"write_per_final_item", facts.write_final_unit},
          {"kv_read_per_token", facts.kv_read_per_token},
          {"macs_per_token", macs_per_token},
          {"macs_per_item", macs_per_unit},
          {"issue_cycles_per_token_serial_all_waves", issue_per_token},
          {"issue_cycles_per_item_serial_all_waves", issue_per_unit},
          {"issue_cycles_per_token_by_kind_serial_all_waves", issue_per_token_by_kind},
          {"inflight_peak_workgroup_bytes", inflight_peak_wg},
          {"inflight_peak_wave_bytes", inflight_peak_wave},
          {"reduce_bytes_per_request_computed", facts.reduce_per_entry},
          {"reduce_bytes_per_split_computed", facts.reduce_per_split},
          {"samples", s}};
}

namespace {

const char* mnemonic_kind(const std::string& m) {
  if (m.rfind("v_mfma", 0) == 0 || m.rfind("v_smfmac", 0) == 0) return "mfma";
  if (m.rfind("ds_", 0) == 0) return "lds";
  if (m.rfind("buffer_", 0) == 0 || m.rfind("global_", 0) == 0 || m.rfind("flat_", 0) == 0) return "vmem";
  if (m.rfind("v_", 0) == 0) return "valu";
  if (m.rfind("s_", 0) == 0) return "salu";
  return "other";
}

double serial_issue_cycles(const std::vector<std::pair<std::string, uint64_t>>& counts, rt::Target t,
                           std::set<std::string>& unknown, std::map<std::string, double>& by_kind) {
  double c = 0;
  for (const auto& [text, n] : counts) {
    const std::string m = text.substr(0, text.find_first_of(" \t"));
    double x = 4;  // one issue slot, for a mnemonic the issue table does not know (reported)
    try {
      x = issue_cycles_of(text, t);
    } catch (const std::exception&) {
      unknown.insert(m);
    }
    c += x * double(n);
    by_kind[mnemonic_kind(m)] += x * double(n);
  }
  return c;
}

}  // namespace

AiterKernelFit measure_aiter_kernel(const std::string& aiter_dir, rt::Target t, const std::string& stem,
                                    const AiterSideOptions& o) {
  const emu::Gfx gfx = t == rt::Target::gfx942 ? emu::Gfx::gfx942 : emu::Gfx::gfx950;
  const std::string dir = oracle::resolve_aiter_dir(aiter_dir);
  std::optional<oracle::AiterKernel> k;
  for (const auto& x : oracle::load_catalog(dir, gfx))
    if (x.stem() == stem) k = x;
  if (!k) throw std::runtime_error(fmt::format("mlabench --aiter-dir: {} has no {} in hsa/{}/mla/mla_asm.csv", dir, stem, emu::gfx_name(gfx)));
  if (o.unit_tokens < 128 || o.unit_tokens % 128)
    throw std::invalid_argument("mlabench: aiter unit tokens must be a positive multiple of 128");
  AiterKernelFit fit;
  fit.kernel = stem;
  fit.co_path = k->co_path;
  fit.target = t;
  fit.heads = k->gqa;
  // Scaled problems (work items of L and 2L tokens; 128-token aligned so the oracle's metadata
  // cuts them exactly): one request in 4 items of L, one in 4 of 2L, two requests in 4 of L each
  // (more Q blocks), four requests of L unsplit (final bf16 o through ptr_RP).
  const int L = o.unit_tokens;
  struct Run {
    std::vector<int> lens;
    int split;
  };
  const std::vector<Run> runs = {{{4 * L}, 4}, {{8 * L}, 4}, {{4 * L, 4 * L}, 4}, {{L, L, L, L}, 1}};
  std::set<std::string> unknown;
  for (size_t i = 0; i < runs.size(); ++i) {
    oracle::RunConfig cfg;
    cfg.kv_split = runs[i].split;
    cfg.kv_lens = runs[i].lens;
    cfg.seed = 1 + i;
    cfg.count_distinct = true;
    cfg.qseqlen = 1;  // decode: one query row per request (the shapes mlabench prices)
    oracle::RunResult r = oracle::run_kernel(*k, cfg);
    if (!r.ran) throw std::runtime_error(fmt::format("mlabench --aiter-dir: {} did not run: {}", stem, r.error));
    AiterSample x;
    x.kv_lens = runs[i].lens;
    x.kv_split = runs[i].split;
    x.U = r.work_items;
    for (int len : x.kv_lens) {
      x.N += len;
      const auto items = oracle::persistent_item_ranges(len, x.kv_split);
      (items.size() > 1 ? x.partial_units : x.final_units) += double(items.size());
    }
    x.G = double(x.kv_lens.size());
    for (const auto& b : r.counters.buffers) {
      if (b.name == "kernarg") continue;
      x.read += double(b.read);
      x.read_distinct += double(b.read_distinct);
      x.written += double(b.written);
      if (b.read) x.read_by_buffer[b.name] = double(b.read);
      if (b.written) x.written_by_buffer[b.name] = double(b.written);
      if (b.name == "kv") x.kv_read = double(b.read);
    }
    x.macs = double(r.counters.total.mfma_macs);
    x.wave_insts = double(r.counters.total.wave_insts);
    for (size_t c = 0; c < emu::kNumInstClasses; ++c)
      x.insts_by_class[emu::inst_class_name(static_cast<emu::InstClass>(c))] = double(r.counters.total.insts[c]);
    x.issue_cycles = serial_issue_cycles(r.inst_counts, t, unknown, x.issue_cycles_by_kind);
    x.inflight_peak_wg = double(r.counters.total.vm_load_peak_wg_bytes);
    x.inflight_peak_wave = double(r.counters.total.vm_load_peak_wave_bytes);
    x.pass = r.pass;
    x.d = r.d;
    x.seconds = r.seconds;
    if (r.counters.workgroups) fit.waves_per_wg = int(r.counters.total.waves / r.counters.workgroups);
    if (o.verbose)
      fmt::print(stderr, "  aiter {} run {}: {} requests of {} tokens, kv_split {}: {} items, {:.1f} s, d {:.2e} ({})\n", stem, i,
                 x.kv_lens.size(), x.kv_lens[0], x.kv_split, x.U, x.seconds, x.d, x.pass ? "pass" : "FAIL");
    fit.samples.push_back(x);
  }
  if (!unknown.empty()) {
    std::string u;
    for (const auto& m : unknown) u += (u.empty() ? "" : ", ") + m;
    fmt::print(stderr, "mlabench: {}: issue table has no entry for {} (counted as one issue slot)\n", stem, u);
  }
  std::vector<double> xu, xn, yr, ym, yi, ykv;
  std::vector<std::vector<double>> xung;
  std::vector<double> yd;
  for (const auto& x : fit.samples) {
    xu.push_back(x.U);
    xn.push_back(x.N);
    xung.push_back({x.U, x.N, x.G});
    yr.push_back(x.read);
    yd.push_back(x.read_distinct);
    ym.push_back(x.macs);
    yi.push_back(x.issue_cycles);
    ykv.push_back(x.kv_read);
    fit.inflight_peak_wg = std::max(fit.inflight_peak_wg, x.inflight_peak_wg);
    fit.inflight_peak_wave = std::max(fit.inflight_peak_wave, x.inflight_peak_wave);
  }
  const Fit2 fr = fit2(xu, xn, yr), fm = fit2(xu, xn, ym), fi = fit2(xu, xn, yi), fkv = fit2(xu, xn, ykv);
  const FitN fd = fit_linear(xung, yd);
  fit.fit_residual = std::max({fr.residual, fm.residual, fi.residual, fd.residual});
  double wp = 0, np = 0, wf = 0, nf = 0;
  for (const auto& x : fit.samples) {
    if (x.final_units == 0) wp += x.written, np += x.partial_units;
    else if (x.partial_units == 0) wf += x.written, nf += x.final_units;
  }
  KernelFacts& f = fit.facts;
  // model_time's view of a work item: tile = 1 token; each of the workgroup's waves on its own
  // SIMD (consumers = waves, one row block); the hot-loop cycles are the serial issue table's
  // cycles per token summed over the waves (an upper bound: no co-issue, no overlap).
  f.tile_tokens = 1;
  f.row_blocks = 1;
  f.row_groups = 1;
  f.consumers = fit.waves_per_wg;
  f.max_resident_wgs = 1;  // the persistent launch: one workgroup per CU (and <= 1 item per CU here)
  f.read_per_unit = fr.a;
  f.read_per_token = fr.b;
  f.distinct_per_unit = fd.c[0];
  f.distinct_per_token = fd.c[1];
  f.distinct_per_q_group = fd.c[2];
  f.write_partial_unit = np ? wp / np : 0;
  f.write_final_unit = nf ? wf / nf : 0;
  f.kv_read_per_unit = fkv.a;
  f.kv_read_per_token = fkv.b;
  f.macs_per_unit = fit.macs_per_unit = fm.a;
  f.macs_per_token = fit.macs_per_token = fm.b;
  fit.issue_per_unit = fi.a;
  fit.issue_per_token = fi.b;
  // Per-token slope by kind: runs 0 and 1 (the same 4 items, 4L vs 8L tokens).
  for (const auto& [kind, c1] : fit.samples[1].issue_cycles_by_kind) {
    const auto it = fit.samples[0].issue_cycles_by_kind.find(kind);
    const double c0 = it == fit.samples[0].issue_cycles_by_kind.end() ? 0 : it->second;
    fit.issue_per_token_by_kind[kind] = (c1 - c0) / (fit.samples[1].N - fit.samples[0].N);
  }
  f.hot_loop_cycles = fi.b;
  f.lds_cycles_per_tile = 0;  // not modelled for aiter's kernels (no static LDS analysis of their code)
  f.inflight_bytes_per_wg = fit.inflight_peak_wg;
  // aiter's reduce (mla.py _fwd_kernel_stage2_asm; mla_reduce_v1 for the persistent path moves
  // the same bytes): per request row and head it reads every valid split's fp32 o (512) and its
  // lse, and writes bf16 o. Computed from that layout, not measured (the reduce is a Triton kernel).
  f.reduce_per_split = double(fit.heads) * (512 * 4 + 4);
  f.reduce_per_entry = double(fit.heads) * 512 * 2;
  return fit;
}

AiterLaunch aiter_launch_for(const BenchShape& s, int num_cu) {
  AiterLaunch l;
  const auto& sh = s.shape;
  const int bs = int(s.kv_lens.size());
  std::vector<int> splits_of(size_t(bs), 1);
  if (sh.target == rt::Target::gfx942 && sh.q_dtype == rt::DType::bf16 && sh.kv_dtype == rt::DType::fp8 &&
      sh.heads == 16 && sh.qseqlen == 1) {
    // The only bf16-q / fp8-KV code object of aiter's gfx942 catalog is the persistent one
    // (asm_mla.cu picks it for bf16/fp8 at 16 heads); seed 001's times follow the split choice of
    // get_meta_param, which v1_0's metadata (16 splits per request on gfx942) matches.
    l.stem = "mla_a16w8_qh16_m16x4_n16x1_coex0_mask1_ps";
    const int S = aiter_meta_splits(bs, s.total_tokens(), 16, 1, false, num_cu);
    std::fill(splits_of.begin(), splits_of.end(), S);
    l.splits = S;
    l.launch = fmt::format("get_meta_param: {} splits per request (v1_0 on gfx942: 16); one work item per workgroup, "
                           "v1_0 work_indptr over {} CUs", S, num_cu);
  } else if (sh.target == rt::Target::gfx950 && sh.q_dtype == rt::DType::fp8 && sh.kv_dtype == rt::DType::fp8 &&
             sh.heads <= 16 && sh.qseqlen == 1) {
    l.stem = "mla_a8w8_qh16_qseqlen1_gqaratio16_ps";
    for (int b = 0; b < bs; ++b) splits_of[size_t(b)] = aiter_v1_0_splits(sh.target, s.kv_lens[size_t(b)], bs, num_cu);
    l.splits = *std::max_element(splits_of.begin(), splits_of.end());
    l.launch = fmt::format("v1_0 metadata (intra_batch_mode): min(len / 196, ceil({} / {})) = {} splits per request, no "
                           "max_split_per_batch cap; heads padded to 16; page size 1 (per-token kv_indices)",
                           num_cu, bs, l.splits);
  } else {
    l.not_run = "no aiter kernel modelled for this shape";
    return l;
  }
  for (int b = 0; b < bs; ++b) {
    const auto items = oracle::persistent_item_ranges(s.kv_lens[size_t(b)], splits_of[size_t(b)]);
    for (auto [st, en] : items) {
      l.item_tokens.push_back(en - st);
      l.item_partial.push_back(items.size() > 1);
    }
    if (items.size() > 1) {
      l.reduce_entries += 1;
      l.reduce_splits += int(items.size());
      l.reduce_max_splits = std::max(l.reduce_max_splits, int(items.size()));
    }
  }
  l.cu_of_item = aiter_v1_0_cu_of_items(int(l.item_tokens.size()), num_cu);
  return l;
}

AiterLaunch aiter_v1_2_launch_for(const BenchShape& s, int num_cu, int gran) {
  AiterLaunch l = aiter_launch_for(s, num_cu);  // the kernel (and the not-run reason)
  if (l.stem.empty()) return l;
  l.item_tokens.clear();
  l.item_partial.clear();
  l.cu_of_item.clear();
  l.reduce_entries = l.reduce_splits = l.reduce_max_splits = 0;
  const int overhead = 16;  // fixed_over_head_num_blocks = max(1, ceil(16 / page_size)) at page size 1
  const int B = int(s.kv_lens.size());
  auto blocks = [&](int b) { return (s.kv_lens[size_t(b)] + gran - 1) / gran; };
  int64_t sum = 0;
  for (int b = 0; b < B; ++b) sum += blocks(b) + overhead;
  const int payload = int((sum + num_cu - 1) / num_cu) + overhead;
  std::vector<int> item_batch;
  int batch = 0, kv_block = 0;
  bool tail_done = false;
  for (int c = 0; c < num_cu && batch < B; ++c) {
    int remain = payload;
    while (batch < B) {
      const int len = s.kv_lens[size_t(batch)];
      const int rest = blocks(batch) - kv_block;
      if (remain >= rest + overhead || tail_done) {  // the request's rest fits this CU
        l.item_tokens.push_back(len - kv_block * gran);
        l.cu_of_item.push_back(c);
        item_batch.push_back(batch);
        remain -= rest + overhead;
        ++batch;
        kv_block = 0;
        tail_done = false;
        continue;
      }
      if (remain > overhead) {  // this CU takes what its payload has left of the request
        const int take = remain - overhead;
        const int end = std::min((kv_block + take) * gran, len);
        if (len - end < 1) {  // that is the request's end: recorded by the branch above
          tail_done = true;
          continue;
        }
        l.item_tokens.push_back(end - kv_block * gran);
        l.cu_of_item.push_back(c);
        item_batch.push_back(batch);
        kv_block += take;
      }
      break;  // next CU
    }
  }
  if (batch < B) throw std::runtime_error("aiter_v1_2_launch_for: requests left after the last CU");
  std::vector<int> n(size_t(B), 0);
  for (int b : item_batch) ++n[size_t(b)];
  for (int b : item_batch) l.item_partial.push_back(n[size_t(b)] > 1);
  l.splits = 0;
  for (int b = 0; b < B; ++b) {
    l.splits = std::max(l.splits, n[size_t(b)]);
    if (n[size_t(b)] > 1) {
      l.reduce_entries += 1;
      l.reduce_splits += n[size_t(b)];
      l.reduce_max_splits = std::max(l.reduce_max_splits, n[size_t(b)]);
    }
  }
  l.launch = fmt::format("v1_2 (fast_mode, get_mla_metadata_v1's default): payload {} blocks of {} tokens per CU "
                         "(+16 per request), up to {} splits per request, CUs in order",
                         payload, gran, l.splits);
  return l;
}

nlohmann::json AiterSide::to_json() const {
  if (!ran) return {{"ran", false}, {"not_run", not_run}};
  nlohmann::json j = {{"ran", true},
                      {"kernel", kernel},
                      {"launch", launch},
                      {"splits", splits},
                      {"work_items", items},
                      {"cus_used", cus_used},
                      {"reduce_entries", reduce_entries},
                      {"reduce_splits", reduce_splits},
                      {"measured_extrapolated",
                       {{"read_bytes", read_bytes}, {"written_bytes", written_bytes}, {"macs", macs}}},
                      {"reduce_bytes_computed", reduce_bytes},
                      {"modeled", modeled.to_json()},
                      {"ours_over_aiter_modeled", ours_over_aiter_modeled}};
  if (published_us) {
    j["published_seed001_aiter_us"] = *published_us;
    j["model_over_published"] = model_over_published;
  }
  return j;
}

AiterSide aiter_not_run(const BenchShape&, const std::string& why) {
  AiterSide a;
  a.not_run = why;
  return a;
}

AiterSide aiter_side(const BenchShape& s, const std::shared_ptr<const AiterKernelFit>& fit, const AiterLaunch& l,
                     double ours_total_s) {
  AiterSide a;
  a.ran = true;
  a.fit = fit;
  a.kernel = l.stem;
  a.launch = l.launch;
  a.splits = l.splits;
  a.items = int(l.item_tokens.size());
  a.reduce_entries = l.reduce_entries;
  a.reduce_splits = l.reduce_splits;
  a.facts = fit->facts;
  const Machine m = machine_for(s.shape.target);
  std::vector<ModelUnit> units;
  for (size_t i = 0; i < l.item_tokens.size(); ++i) {
    units.push_back({l.item_tokens[i], bool(l.item_partial[i])});
    const double w = l.item_partial[i] ? a.facts.write_partial_unit : a.facts.write_final_unit;
    a.read_bytes += a.facts.read_per_unit + a.facts.read_per_token * l.item_tokens[i];
    a.written_bytes += w;
    a.macs += a.facts.macs_per_unit + a.facts.macs_per_token * l.item_tokens[i];
  }
  a.cus_used = int(std::set<int>(l.cu_of_item.begin(), l.cu_of_item.end()).size());
  a.reduce_bytes = a.facts.reduce_per_entry * l.reduce_entries + a.facts.reduce_per_split * l.reduce_splits;
  a.modeled = model_time_assigned(m, a.facts, units, l.cu_of_item, l.reduce_entries, l.reduce_splits,
                                  int(s.kv_lens.size()), 0, l.reduce_rounds());
  a.published_us = s.pub_aiter_us;
  if (a.published_us) a.model_over_published = a.modeled.total_s * 1e6 / *a.published_us;
  a.ours_over_aiter_modeled = ours_total_s / a.modeled.total_s;
  return a;
}

namespace {
// The problem aiter runs for a shape: a sparse one expanded as vLLM's ROCm sparse backend does
// (every query row a request of its 2048 slots, page 1, fp8 KV with a per-tensor scale and fp8 q,
// bf16 q on gfx942 where aiter's only bf16-q code object is; aiter has no fp8_ds_mla kernel), a
// dense one as it is.
BenchShape aiter_problem(const BenchShape& s) {
  if (!s.shape.sparse) return s;
  BenchShape e = s;
  e.shape.sparse = e.shape.kv_ds_mla = false;
  e.shape.kv_dtype = rt::DType::fp8;
  e.shape.q_dtype = s.shape.target == rt::Target::gfx942 ? rt::DType::bf16 : rt::DType::fp8;
  e.shape.page_size = 1;
  return e;
}
}  // namespace

void add_aiter_sides(std::vector<ShapeResult>& r, const AiterSideOptions& o) {
  std::map<std::string, std::shared_ptr<const AiterKernelFit>> fits;
  for (auto& x : r) {
    if (o.aiter_dir.empty()) {
      x.aiter = std::make_shared<AiterSide>(aiter_not_run(x.shape, "not run (no --aiter-dir)"));
      x.aiter_spread = std::make_shared<AiterSide>(aiter_not_run(x.shape, "not run (no --aiter-dir)"));
      continue;
    }
    const Machine m = machine_for(x.shape.shape.target);
    const BenchShape problem = aiter_problem(x.shape);
    const AiterLaunch l = aiter_launch_for(problem, m.cus);
    if (l.stem.empty()) {
      x.aiter = std::make_shared<AiterSide>(aiter_not_run(x.shape, "not run (" + l.not_run + ")"));
      x.aiter_spread = std::make_shared<AiterSide>(aiter_not_run(x.shape, "not run (" + l.not_run + ")"));
      continue;
    }
    const std::string key = std::string(rt::name(x.shape.shape.target)) + "/" + l.stem;
    if (!fits.count(key)) {
      fmt::print(stderr, "mlabench: aiter {} ({}): scaled emulator runs\n", l.stem, rt::name(x.shape.shape.target));
      fits[key] = std::make_shared<AiterKernelFit>(measure_aiter_kernel(o.aiter_dir, x.shape.shape.target, l.stem, o));
    }
    x.aiter = std::make_shared<AiterSide>(aiter_side(problem, fits[key], l, x.modeled.total_s));
    x.aiter_spread = std::make_shared<AiterSide>(
        aiter_side(problem, fits[key], aiter_v1_2_launch_for(problem, m.cus), x.modeled.total_s));
    fmt::print(stderr, "mlabench: {}: aiter modeled {:.1f} us ({}){}\n", x.shape.name, x.aiter->modeled.total_s * 1e6,
               x.aiter->modeled.bound,
               x.aiter->published_us ? fmt::format(", published {:.1f} us, model / published {:.3f}", *x.aiter->published_us,
                                                   x.aiter->model_over_published)
                                     : "");
  }
}

std::string aiter_markdown(const std::vector<ShapeResult>& r) {
  std::string s;
  s += "\naiter side by side (issue #17): aiter's own code objects (unmodified, on the emulator through oracle/) measured "
       "like ours (scaled runs, fitted per token and per work item, extrapolated to aiter's full-scale launch) and "
       "priced by the **same** machine model. aiter **modeled** is the model's time; aiter published is seed 001's "
       "MI300X figure; model / published is the model's only calibration against hardware.\n\n"
       "The no-overlap column is a bracket, not the model: the worst CU's memory and issue times added instead of "
       "overlapped (model_time takes their max).\n\n"
       "| shape | aiter kernel | splits / work items / CUs with work | aiter **modeled** us | **modeled** bound | worst "
       "CU memory / issue us (**modeled**) | no overlap: memory + issue (**modeled** bracket) us | aiter published us "
       "(seed 001) | model / published | no overlap / published | ours **modeled** us | ours / aiter **modeled** | v1_2 "
       "(fast_mode) spread: max splits / items / CUs | v1_2 aiter **modeled** us | v1_2 bound |\n"
       "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::map<std::string, std::shared_ptr<const AiterKernelFit>> fits;
  for (const auto& x : r) {
    if (!x.aiter || !x.aiter->ran) {
      s += fmt::format("| {} | {} | | not run | | | | {} | | | {:.1f} | | | not run | |\n", x.shape.name,
                       x.aiter ? x.aiter->not_run : std::string("not run"),
                       x.shape.pub_aiter_us ? fmt::format("{:.2f}", *x.shape.pub_aiter_us) : "", x.modeled.total_s * 1e6);
      continue;
    }
    const auto& a = *x.aiter;
    fits[a.kernel] = a.fit;
    const double no_overlap = a.modeled.total_s + std::min(a.modeled.max_cu_mem_s, a.modeled.max_cu_compute_s);
    const bool sp = x.aiter_spread && x.aiter_spread->ran;
    s += fmt::format("| {} | {} | {} / {} / {} | {:.1f} | {} | {:.1f} / {:.1f} | {:.1f} | {} | {} | {} | {:.1f} | {:.3f} | {} | {} | {} |\n",
                     x.shape.name, a.kernel, a.splits, a.items, a.cus_used, a.modeled.total_s * 1e6, a.modeled.bound,
                     a.modeled.max_cu_mem_s * 1e6, a.modeled.max_cu_compute_s * 1e6, no_overlap * 1e6,
                     a.published_us ? fmt::format("{:.2f}", *a.published_us) : "",
                     a.published_us ? fmt::format("{:.3f}", a.model_over_published) : "",
                     a.published_us ? fmt::format("{:.3f}", no_overlap * 1e6 / *a.published_us) : "",
                     x.modeled.total_s * 1e6, a.ours_over_aiter_modeled,
                     sp ? fmt::format("{} / {} / {}", x.aiter_spread->splits, x.aiter_spread->items, x.aiter_spread->cus_used) : "",
                     sp ? fmt::format("{:.1f}", x.aiter_spread->modeled.total_s * 1e6) : "not run",
                     sp ? x.aiter_spread->modeled.bound : "");
  }
  if (fits.empty()) return s;
  s += "\naiter kernels, **measured** on the emulator (scaled runs; per work item and per token fits) and the model's view "
       "of them (issue cycles: the serial issue table over every executed wave-instruction, no co-issue and no stalls; in flight: "
       "the emulator's peak outstanding vector-memory load bytes of a workgroup, all its waves, from the waitcnt "
       "scoreboard):\n\n"
       "| kernel | waves / WG | read B / token | read B / item | written B / partial item | written B / final item | "
       "MACs / token | issue cycles / token (all waves) | of which MFMA / VALU / LDS / other | issue cycles / item | in flight "
       "per WG / per wave KiB | fit residual | runs pass the reference |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& [name, f] : fits) {
    int pass = 0;
    for (const auto& x : f->samples) pass += x.pass;
    auto kind = [&](const char* k) {
      auto it = f->issue_per_token_by_kind.find(k);
      return it == f->issue_per_token_by_kind.end() ? 0.0 : it->second;
    };
    const double other = f->issue_per_token - kind("mfma") - kind("valu") - kind("lds");
    s += fmt::format("| {} | {} | {:.1f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.1f} | {:.0f} / {:.0f} / {:.0f} / {:.0f} | {:.0f} | "
                     "{:.1f} / {:.1f} | {:.1e} | {}/{} |\n",
                     name, f->waves_per_wg, f->facts.read_per_token, f->facts.read_per_unit, f->facts.write_partial_unit,
                     f->facts.write_final_unit, f->macs_per_token, f->issue_per_token, kind("mfma"), kind("valu"),
                     kind("lds"), other, f->issue_per_unit,
                     f->inflight_peak_wg / 1024, f->inflight_peak_wave / 1024, f->fit_residual, pass, f->samples.size());
  }
  return s;
}

}  // namespace mla::bench
