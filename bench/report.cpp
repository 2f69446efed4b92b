// Markdown and JSON reports.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "bench/aiter_side.h"
#include "bench/bench.h"

namespace mla::bench {

std::vector<SameBytesGroup> same_bytes_groups(const std::vector<ShapeResult>& r) {
  std::map<int64_t, std::vector<int>> by_total;
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i].shape.set == "seed-001") by_total[int64_t(r[i].shape.ctx_k) * r[i].shape.concurrency].push_back(int(i));
  std::vector<SameBytesGroup> g;
  for (auto& [total, idx] : by_total) {
    if (idx.size() < 2) continue;
    SameBytesGroup x;
    x.index = idx;
    std::sort(x.index.begin(), x.index.end(),
              [&](int a, int b) { return r[a].shape.ctx_k < r[b].shape.ctx_k; });
    for (int i : x.index) {
      x.members += (x.members.empty() ? "" : " ") + fmt::format("{}Kx{}", r[i].shape.ctx_k, r[i].shape.concurrency);
      const double t = r[i].modeled.total_s * 1e6;
      x.lo = x.lo == 0 ? t : std::min(x.lo, t);
      x.hi = std::max(x.hi, t);
    }
    x.spread = x.hi / x.lo;
    for (const auto& p : seed001_published_groups())
      if (p.members == x.members) x.published = p;
    g.push_back(x);
  }
  return g;
}

namespace {
// Shapes with a prefix group: the per-request plan and the cascade plan side by side, the
// planner's word, and the prefix kernel's hot loop.
// Each shape's cascade results: the default prefix kernel's, then the wide one's where it ran.
template <class F>
void for_each_cascade(const std::vector<ShapeResult>& r, F f) {
  for (const auto& x : r)
    for (const auto* c : {x.cascade ? &*x.cascade : nullptr, x.cascade_wide ? &*x.cascade_wide : nullptr})
      if (c) f(x, *c);
}

std::string cascade_markdown(const std::vector<ShapeResult>& r) {
  std::string s;
  bool any = false;
  for (const auto& x : r) any = any || x.cascade.has_value();
  if (!any) return s;
  s += "\nShared prefix (seed 000: every request shares its first 63,911 tokens; whole pages only, 63,872 at page "
       "128): the per-request plan vs the planner's full-scale cascade plan. KV bytes and MACs are measured "
       "(emulator counters, scaled runs extrapolated with the exact plan); times are **modeled** (on one stream: the "
       "decode launch when the plan has decode units, then the prefix launch, then the reduce; each launch on the machine "
       "model with its own kernel's facts; partials MB = bytes the partials hold, written once and read once; as run: the "
       "runtime's 3 launches per layer, decode, prefix and reduce, each whether it has work or not, as a captured graph "
       "holds them).\n\n"
       "| shape | plan | units decode + prefix (prefix splits) | KV read MB | distinct KV MB | KV read / distinct | "
       "MACs issued G | partials MB | **modeled** us: launches / decode kernel / prefix kernel / reduce / total | **modeled** "
       "us as run (3 launches) | **modeled** bound (per launch) | what-if: the same plan with HBM at the datasheet peak (the "
       "issue's \"from 92 us\"), **modeled** us |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& x : r) {
    if (!x.cascade) continue;
    const auto& c = *x.cascade;
    std::vector<std::pair<const PlanSide*, std::string>> sides = {
        {&c.per_request, c.forced ? "per-request (planner's choice)" : "per-request"},
        {&c.cascade, c.forced ? "cascade (policy always)" : "cascade (planner's choice)"}};
    if (x.cascade_wide)
      sides.push_back({&x.cascade_wide->cascade, fmt::format("cascade, wide prefix kernel, 192 rows ({})",
                                                             x.cascade_wide->forced ? "policy always" : "planner's choice")});
    for (const auto& [p, label] : sides) {
      const bool pre = p->prefix_units > 0;
      const double launches = p->decode.launch_s + (pre ? p->prefix.launch_s : 0);
      const double reduce = pre ? p->prefix.reduce_s : p->decode.reduce_s;
      const double launch_s = machine_for(x.shape.shape.target).launch_s;
      const double as_run = p->total_s + (3 - std::lround(launches / launch_s)) * launch_s;
      s += fmt::format("| {} | {} | {} + {} ({}) | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.1f} | {:.1f} / {:.1f} / {} / {:.1f} / "
                       "**{:.1f}** | {:.1f} | {} | {:.1f} |\n",
                       x.shape.name, label, p->decode_units, p->prefix_units, p->prefix_splits, p->kv_read / 1e6, p->kv_distinct / 1e6,
                       p->kv_read / p->kv_distinct, p->macs / 1e9, p->partial_bytes / 1e6, launches * 1e6,
                       p->decode.decode_s * 1e6, pre ? fmt::format("{:.1f}", p->prefix.decode_s * 1e6) : "-", reduce * 1e6,
                       p->total_s * 1e6, as_run * 1e6, p->bound, p->total_at_peak_s * 1e6);
    }
  }
  s += "\nWhat reading the prefix once costs at the least (**modeled** lower bound, bench/bound.cpp, docs/shared-prefix.md): "
       "every prefix row of a split on one CU (a fraction f of the prefix on CU pairs of half the rows, read twice, where "
       "the reads may reach 1.10x), the MFMA work at the rate named, balanced over n CUs, each split writing its rows' "
       "partials that the reduce reads back; Q, O, page ids and the unique parts cost nothing. Layer = 2 launches + unit "
       "fill + max(MFMA work / n, HBM bytes / bandwidth) + partials / bandwidth, least over n (one launch fewer where the "
       "reduce is merged into the attention launch). Bandwidth: the model's achievable ceiling, except the rows marked "
       "what-if, priced at the datasheet peak that the issue's 30 us target (\"from 92 us\") was set at.\n\n"
       "| shape | prefix kernel | MFMA rate | HBM TB/s | KV read / distinct at most | f | CUs n | splits | MFMA / n us | HBM us | reduce us | "
       "**modeled** layer at least us | O^T of the rows fits a CU |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for_each_cascade(r, [&](const ShapeResult& x, const CascadeResult& c) {
    for (const auto& b : c.one_read) {
      // The best MFMA's rows depend on the shape only: once per shape, with its default kernel.
      if (&c != &*x.cascade && b.basis == kBestMfmaBasis) continue;
      s += fmt::format("| {} | {} | {} | {:.1f} | {:.2f} | {:.2f} | {} | {:.0f} | {:.1f} | {:.1f} | {:.1f} | **{:.1f}** | {} |\n", x.shape.name,
                       c.prefix_kernel, b.basis, b.hbm_bytes_per_s / 1e12, b.kv_ratio, b.pair_fraction, b.cus, b.splits, b.compute_s * 1e6,
                       b.hbm_s * 1e6, b.reduce_s * 1e6, b.total_s * 1e6, b.o_fits_registers ? "yes" : "no");
    }
  });
  bool full = false;
  for (const auto& x : r) full = full || (x.cascade && x.cascade->full_scale);
  if (full) {
    s += "\nThe cascade plan emulated end to end at full scale (measured, emulator counters) beside its extrapolation:\n\n"
         "| shape | units decode + prefix | KV read MB: full scale / extrapolated | distinct KV MB | MACs issued G: full scale / "
         "extrapolated | emulator s |\n|---|---|---|---|---|---|\n";
    for (const auto& x : r) {
      if (!x.cascade || !x.cascade->full_scale) continue;
      const RunSample& f = *x.cascade->full_scale;
      const PlanSide& b = x.cascade->cascade;
      const double kv = f.decode_kv_read + f.prefix_kv_read, macs = f.mfma_macs + f.prefix_macs;
      s += fmt::format("| {} | {:.0f} + {:.0f} | {:.3f} / {:.3f} ({:.6f}) | {:.3f} | {:.4f} / {:.4f} ({:.6f}) | {:.0f} |\n", x.shape.name,
                       f.U, f.Up, kv / 1e6, b.kv_read / 1e6, kv / b.kv_read, f.kv_distinct / 1e6, macs / 1e9, b.macs / 1e9,
                       macs / b.macs, f.seconds);
    }
  }
  s += "\nThe planner's word on each group (cost model, token-equivalents, docs/planner.md):\n\n"
       "| shape | group (first, count, shared) | row groups per member / prefix row groups | cascade | reason | cost "
       "cascade / per request | prefix splits (row groups on one XCD) | prefix launch, worst CU: memory / issue (LDS incl.) / HBM "
       "floor us (**modeled**; + the phased kernel's prologues and epilogues) |\n"
       "|---|---|---|---|---|---|---|---|\n";
  for_each_cascade(r, [&](const ShapeResult& x, const CascadeResult& cr) {
    const auto& d = cr.decision;
    const ModeledTime& p = cr.cascade.prefix;
    const PlanSide& c = cr.cascade;
    s += fmt::format("| {}{} | {}, {}, {} | {} / {} | {} | {} | {:.0f} / {:.0f} | {} ({} of {}) | {:.1f} / {:.1f} / {:.1f}{} |\n",
                     x.shape.name, &cr == &*x.cascade ? "" : " (wide prefix kernel)", d.group.first, d.group.count, d.group.shared_tokens, d.row_groups,
                     d.prefix_row_groups, d.cascade ? "yes" : "no", d.reason, d.cost_cascade, d.cost_per_request,
                     d.prefix_splits, c.row_group_bundles_one_xcd, c.row_group_bundles, p.max_cu_mem_s * 1e6,
                     p.max_cu_compute_s * 1e6, p.hbm_floor_s * 1e6,
                     p.max_cu_phases_s > 0 ? fmt::format(" + {:.1f}", p.max_cu_phases_s * 1e6) : "");
  });
  s += "\nPrefix kernel hot loop per tile (static, generated .s; co-issue model **modeled**): matrix-pipe busy "
       "fraction = MFMA cycles / (co-issue + ring stall).\n\n| kernel | tile tokens | row blocks x consumers | "
       "instructions | MFMA / VALU / LDS / SALU | MFMA cycles | VALU cycles | co-issue cycles | + ring stall | MFMA "
       "busy (**modeled**) | tile memory cycles | (co-issue + stall) / (memory x waves / row blocks) |\n"
       "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::map<std::string, bool> seen;
  for_each_cascade(r, [&](const ShapeResult&, const CascadeResult& c) {
    if (seen[c.prefix_kernel]) return;
    seen[c.prefix_kernel] = true;
    s += fmt::format("| {} | {} | {} x {} | {} | {} / {} / {} / {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.2f} | {:.0f} | "
                     "{:.2f} |\n",
                     c.prefix_kernel, c.facts.tile_tokens, c.facts.row_blocks, c.facts.consumers, c.hot.insts.size(),
                     c.hot.mfma, c.hot.valu, c.hot.lds, c.hot.salu, c.hot.mfma_cycles, c.hot.valu_cycles,
                     c.hot.coissue_cycles, c.hot.ring_stall_cycles, c.mfma_busy, c.tile_mem_cycles, c.coissue_over_mem);
  });
  return s;
}
}  // namespace

std::string markdown_report(const std::vector<ShapeResult>& r, const std::vector<SameBytesGroup>& g) {
  std::string s;
  s += "Measured = emulator counters of the exact code objects (scaled runs extrapolated linearly with the "
       "planner's full-scale plan) and static facts of the generated assembly. **Modeled** = the machine model of "
       "docs/performance.md, not a measurement. Published = the seed's own figures (MI300X, seed 001), not ours.\n\n";
  s += "HBM ceiling of every modeled time (the achievable bandwidth, not the datasheet peak):\n\n";
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) s += "- " + machine_for(t).ceiling_text() + "\n";
  s += "\n";
  s += "| shape | kernel | units | CUs with work | max/mean work | read / min | moved / (min + partials) | distinct moved / (min + partials) | partials / KV "
       "| MACs issued / useful | in flight per CU vs Little | hot-loop issue / tile mem: serial table / co-issue (**modeled**) | **modeled** us | **modeled** "
       "TB/s (of the achievable ceiling) | **modeled** plan / brute force | published aiter us | published seed kernel us | "
       "aiter **modeled** us | aiter model / published | ours / aiter **modeled** |\n";
  s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& x : r) {
    s += fmt::format(
        "| {} | {} | {} | {}/{} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.4f} | {:.2f} | {:.1f} / {:.1f} KiB ({:.0f}%) | {:.2f} / {:.2f} | {:.1f} | "
        "{:.2f} ({:.0f}%) | {:.3f} (best s={}, {} WG/CU) | {} | {} | {} | {} | {} |\n",
        x.shape.name, x.decode_kernel, x.units, x.cus_used, x.cus, x.balance, x.ratio_read_over_min,
        x.ratio_moved_over_plan, x.ratio_distinct_moved_over_plan, x.partial_over_kv, x.mac_ratio, x.inflight_per_cu / 1024, x.little_per_cu / 1024,
        100 * x.inflight_per_cu / x.little_per_cu, x.issue_over_mem, x.coissue_over_mem, x.modeled.total_s * 1e6, x.modeled_tbps,
        100 * x.modeled_tbps * 1e12 / machine_for(x.shape.shape.target).hbm_bytes_per_s, x.plan_over_best, x.brute.best_splits, x.facts.max_resident_wgs, x.shape.pub_aiter_us ? fmt::format("{:.2f}", *x.shape.pub_aiter_us) : "",
        x.shape.pub_ours_us ? fmt::format("{:.2f}", *x.shape.pub_ours_us) : "",
        // aiter's code objects on the same model (bench/aiter_side.h); "not run" without --aiter-dir.
        x.aiter && x.aiter->ran ? fmt::format("{:.1f}", x.aiter->modeled.total_s * 1e6) : "not run",
        x.aiter && x.aiter->ran ? (x.aiter->published_us ? fmt::format("{:.3f}", x.aiter->model_over_published) : "")
                                : "not run",
        x.aiter && x.aiter->ran ? fmt::format("{:.3f}", x.aiter->ours_over_aiter_modeled) : "not run");
  }
  if (std::any_of(r.begin(), r.end(), [](const ShapeResult& x) { return x.shape.set == "mixed"; })) {
    s += "\nLengths that differ (issue #42), all **modeled**: each plan against the layer's lower bound "
         "(docs/performance.md \"Lower bound\": one launch plus the larger of the HBM floor of what every plan moves "
         "and the mean CU's share of the CUs' traffic plus a unit fill; a request longer than that must split: its "
         "partials and the reduce launch).\n\n| shape | requests | tokens | **modeled** us | lower bound us | plan / "
         "bound | plan / brute force |\n|---|---|---|---|---|---|---|\n";
    for (const auto& x : r)
      if (x.shape.set == "mixed")
        s += fmt::format("| {} | {} | {} | {:.1f} | {:.1f} | {:.3f} | {:.3f} |\n", x.shape.name, x.shape.kv_lens.size(),
                         x.shape.total_tokens(), x.modeled.total_s * 1e6, x.lower_bound_s * 1e6,
                         x.modeled.total_s / x.lower_bound_s, x.plan_over_best);
  }
  if (std::any_of(r.begin(), r.end(), [](const ShapeResult& x) { return x.shape.set == "sparse"; })) {
    s += "\nSparse decode (issue #43), all **modeled**: each query row attends to its own 2048 slots of the fp8_ds_mla "
         "cache; aiter runs the expanded problem (vLLM's ROCm sparse backend: each row a request, page 1, fp8 per-tensor). "
         "Floor (docs/sparse.md): the launches as run, two dependent trips (a slot's index, then its row), the reduce's "
         "rounds and the bytes every plan moves (entries, indices, Q, O) at the HBM rate. Bytes: moved / (entries x 656 + "
         "indices + Q + O + partials + tables).\n\n| shape | rows | **modeled** us as run | floor us | as run / floor | aiter "
         "**modeled** us | ours / aiter | bytes moved / needed | launches |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& x : r)
      if (x.shape.set == "sparse") {
        const bool ran = x.aiter && x.aiter->ran;
        const double aiter_s = ran ? x.aiter->modeled.total_s : 0;
        s += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.3f} | {} | {} | {:.3f} | {} |\n", x.shape.name,
                         x.shape.kv_lens.size(), x.as_run_s * 1e6, x.sparse_floor_s * 1e6, x.as_run_s / x.sparse_floor_s,
                         ran ? fmt::format("{:.1f}", aiter_s * 1e6) : "not run",
                         ran ? fmt::format("{:.3f}", x.as_run_s / aiter_s) : "not run", x.ratio_moved_over_plan,
                         x.launches_as_run);
      }
  }
  s += "\nLaunches per layer (issue #33), all **modeled**: the runtime fixes its launches when a plan is made (graph "
       "capture): decode, prefix (the selection has a prefix kernel, cascades on: the default) and reduce, each a launch "
       "whether it has work or not; the table above prices the decode launch and a reduce launch with reduce entries. One "
       "launch: MLA_OPTION_MERGE 1 (cascades off), the merging plan's decode launch plus the in-launch merge of its most-split "
       "request (1 + 5 S dependent trips of the last split of a row block, docs/performance.md).\n\n"
       "| shape | launches as run (priced above) | **modeled** us as run | most splits of a request (one launch) | in-launch merge "
       "**modeled** us | one launch **modeled** us | one launch / as run |\n|---|---|---|---|---|---|---|\n";
  for (const auto& x : r)
    s += fmt::format("| {} | {} ({}) | {:.1f} | {} | {:.1f} | {:.1f} | {:.3f} |\n", x.shape.name, x.launches_as_run,
                     x.launches_priced, x.as_run_s * 1e6, x.one_launch_max_splits, x.one_launch_merge_s * 1e6,
                     x.one_launch_s * 1e6, x.one_launch_s / x.as_run_s);
  if (!g.empty()) {
    s += "\nSame total bytes (seed 001 groups): **modeled** time range and spread, next to the seed's published "
         "figures.\n\n| group | **modeled** us | **modeled** spread | published seed kernel us | published aiter us |\n"
         "|---|---|---|---|---|\n";
    for (const auto& x : g)
      s += fmt::format("| {} | {:.1f} - {:.1f} | {:.3f}x | {} | {} |\n", x.members, x.lo, x.hi, x.spread,
                       x.published ? fmt::format("{:.2f} - {:.2f} ({:.2f}x)", x.published->ours_lo, x.published->ours_hi,
                                                 x.published->ours_hi / x.published->ours_lo)
                                   : "",
                       x.published ? fmt::format("{:.1f} - {:.1f} ({:.2f}x)", x.published->aiter_lo,
                                                 x.published->aiter_hi, x.published->aiter_hi / x.published->aiter_lo)
                                   : "");
  }
  s += "\nHot loop per tile (measured statically from the generated .s; issue table of docs/performance.md; "
       "llvm-mca as a cross-check):\n\n| kernel | tile tokens | instructions | MFMA / VALU / LDS / SALU | issue cycles "
       "(serial table) | co-issue cycles (**modeled**, MFMA co-execution) | + one-slot ring stall (**modeled**) | llvm-mca cycles | "
       "tile memory cycles at the CU's HBM share | consumer waves per CU (resident WGs x consumers) / row blocks | (issue + "
       "stall) / (memory x waves / row blocks): serial / co-issue | CU LDS clocks per tile / tile memory (**modeled**, 128 B/clk) "
       "| LDS clocks / conflict-free (**modeled** bank model) |\n"
       "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::map<std::string, bool> seen;
  for (const auto& x : r) {
    if (seen[x.decode_kernel]) continue;
    seen[x.decode_kernel] = true;
    s += fmt::format("| {} | {} | {} | {} / {} / {} / {} | {:.0f} | {:.0f} | {:.0f} | {} | {:.0f} | {} x {} / {} | {:.2f} / {:.2f} | {:.2f} | {:.2f} |\n",
                     x.decode_kernel, x.facts.tile_tokens, x.hot.insts.size(), x.hot.mfma, x.hot.valu, x.hot.lds,
                     x.hot.salu, x.hot.issue_cycles, x.hot.coissue_cycles, x.hot.ring_stall_cycles,
                     x.hot.mca_cycles >= 0 ? fmt::format("{:.0f}", x.hot.mca_cycles) : "n/a", x.tile_mem_cycles,
                     x.facts.max_resident_wgs, x.facts.consumers, x.facts.row_blocks, x.issue_over_mem,
                     x.coissue_over_mem, x.lds_over_mem, x.lds_bank_factor);
  }
  s += cascade_markdown(r);
  s += aiter_markdown(r);
  return s;
}

nlohmann::json json_report(const std::vector<ShapeResult>& r, const std::vector<SameBytesGroup>& g) {
  nlohmann::json j;
  j["note"] = "measured: emulator counters + static assembly facts; modeled: docs/performance.md machine model; "
              "published: seed 001's own figures";
  j["machines"] = {machine_for(rt::Target::gfx942).to_json(), machine_for(rt::Target::gfx950).to_json()};
  j["shapes"] = nlohmann::json::array();
  for (const auto& x : r) j["shapes"].push_back(x.to_json());
  // aiter's kernels as fitted for the aiter columns (mlabench --aiter-dir): samples and facts.
  j["aiter_kernels"] = nlohmann::json::array();
  std::map<std::string, bool> fitted;
  for (const auto& x : r)
    if (x.aiter && x.aiter->ran && x.aiter->fit && !fitted[x.aiter->kernel]) {
      fitted[x.aiter->kernel] = true;
      j["aiter_kernels"].push_back(x.aiter->fit->to_json());
    }
  j["same_bytes_groups"] = nlohmann::json::array();
  for (const auto& x : g) {
    nlohmann::json e = {{"members", x.members}, {"modeled_us_lo", x.lo}, {"modeled_us_hi", x.hi}, {"modeled_spread", x.spread}};
    if (x.published)
      e["published_seed001"] = {{"ours_us", {x.published->ours_lo, x.published->ours_hi}},
                                {"aiter_us", {x.published->aiter_lo, x.published->aiter_hi}}};
    j["same_bytes_groups"].push_back(e);
  }
  return j;
}

}  // namespace mla::bench
