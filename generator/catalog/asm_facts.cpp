// Static facts of the generated attention assembly (asm_facts.h).
#include "catalog/asm_facts.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <sstream>
#include <stdexcept>

#include "target/issue_model.h"

namespace mla::gen {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) {
    auto c = l.find(';');  // strip "; hazard: ..." comments
    if (c != std::string::npos) l = l.substr(0, c);
    l = trim(l);
    if (!l.empty()) v.push_back(l);
  }
  return v;
}

std::string mnemonic(const std::string& line) { return line.substr(0, line.find_first_of(" \t")); }
bool is_label(const std::string& l) { return !l.empty() && l.back() == ':'; }
bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Index of the first line of the loop whose label starts with `prefix`, and of its back-branch.
std::pair<size_t, size_t> find_loop(const std::vector<std::string>& L, const std::string& prefix) {
  for (size_t i = 0; i < L.size(); ++i)
    if (is_label(L[i]) && starts(L[i], prefix.c_str())) {
      std::string label = L[i].substr(0, L[i].size() - 1);
      for (size_t j = i + 1; j < L.size(); ++j)
        if (starts(L[j], "s_cbranch") && L[j].find(label) != std::string::npos &&
            L[j].substr(L[j].size() - label.size()) == label)
          return {i, j};
      throw std::runtime_error("hot loop: no back-branch to " + label + " in the decode assembly");
    }
  throw std::runtime_error("hot loop: no label " + prefix + "* in the decode assembly");
}

// Bytes per lane of an LDS instruction.
int lds_lane_bytes(const std::string& m) {
  int bytes = 4;
  for (auto [suffix, b] : std::initializer_list<std::pair<const char*, int>>{
           {"_b64", 8}, {"_b96", 12}, {"_b128", 16}, {"2_b32", 8}, {"2_b64", 16}})
    if (m.find(suffix) != std::string::npos) bytes = std::max(bytes, b);
  return bytes;
}

// The co-issue model's class of one assembly line (s_nop with its count).
IssueOp issue_op_of_line(const std::string& line, const Target& t) {
  const std::string m = mnemonic(line);
  int nops = 0;
  if (m == "s_nop") nops = std::stoi(line.substr(line.find_first_of(" \t") + 1), nullptr, 0);
  try {
    return issue_op_of(t, m, nops);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string("hot loop: ") + e.what());
  }
}

}  // namespace

double issue_cycles_of(const std::string& line, const Target& t) {
  const std::string m = mnemonic(line);
  if (starts(m, "ds_")) return std::max(4.0, 64.0 * lds_lane_bytes(m) / 128.0);
  // One classification with the co-issue model: serially an MFMA costs its passes, every other
  // instruction its issue slots.
  const IssueOp op = issue_op_of_line(line, t);
  return 4.0 * (op.kind == IssueKind::Mfma ? op.passes : op.slots);
}

nlohmann::json HotLoop::to_json() const {
  return {{"instructions", insts.size()},  {"issue_cycles", issue_cycles}, {"mfma", mfma},
          {"valu", valu},                  {"lds", lds},                   {"salu", salu},
          {"mfma_cycles", mfma_cycles},    {"valu_cycles", valu_cycles},   {"lds_cycles", lds_cycles},
          {"salu_cycles", salu_cycles},    {"nop_cycles", nop_cycles},     {"llvm_mca_cycles", mca_cycles},
          {"ring_stall_cycles_modeled", ring_stall_cycles}, {"coissue_cycles_modeled", coissue_cycles},
          {"after_slot_release_cycles_modeled", after_release_cycles},
          {"lds_bytes", lds_bytes}};
}

// Whether the steady state of `loop` takes a forward branch to `target` (throws for a branch
// it has no rule for).
// - The consumer loop (a full tile deep inside a long unit): the masked-tile path and the O
//   rescale are skipped (".Lskip", ".Lrescaled": taken); a wave always has its tile and, deep
//   inside the unit, a next one (".Ltile_absent", ".Ltail_plain": not taken); a tile that
//   released its slot early jumps over the absent tile's barriers (".Lslot_written",
//   ".Ltile_done", ".Ltail_done": taken). Split PV with the speculative softmax: a full tile
//   (".Ltile_slow": not taken) whose rows keep their max (".Lsoftmax_rescale": not taken), both
//   row blocks of the wave's pair with rows (".Lpv_own_only", ".Lpv_partner_only": not taken),
//   the partner's max kept too (".Lpartner_rescale": not taken); the other paths are out of line.
// - The decode producer's loop: a full tile of the unit (".Lpartial_tile": not taken; the row
//   loads then jump over that path, ".Lloaded": taken), a tile that exists (its write's
//   ".Lskip": not taken) and slots still to come (".Lproducer_done": not taken). gfx942's
//   fp8_ds_mla tiles have scales whose products are bf16 numbers, as DeepSeek's power-of-two
//   scales (".Ldsmla_round": not taken; ".Ldsmla_done": taken; docs/sparse.md).
static bool steady_branch_taken(const std::string& loop, const std::string& target) {
  auto any = [&](std::initializer_list<const char*> labels) {
    for (const char* x : labels)
      if (starts(target, x)) return true;
    return false;
  };
  if (starts(loop, ".Lproducer_loop_")) {
    if (any({".Lloaded", ".Ldsmla_done"})) return true;
    if (any({".Lpartial_tile", ".Lskip", ".Lproducer_done", ".Ldsmla_round"})) return false;
    throw std::runtime_error("hot loop: no steady-state rule for the producer loop's branch to " + target);
  }
  // The indexer's logits loop (dsa_indexer_logits.cpp): the mid-loop exit is not taken.
  if (starts(loop, ".Ltile_loop_")) {
    if (any({".Ldone"})) return false;
    throw std::runtime_error("hot loop: no steady-state rule for the indexer loop's branch to " + target);
  }
  if (any({".Ltile_absent", ".Ltail_plain", ".Ltile_slow", ".Lsoftmax_rescale", ".Lpv_own_only", ".Lpv_partner_only",
           ".Lpartner_rescale"}))
    return false;
  if (any({".Lskip", ".Lrescaled", ".Lslot_written", ".Ltile_done", ".Ltail_done"})) return true;
  throw std::runtime_error("hot loop: no steady-state rule for the consumer loop's branch to " + target);
}

HotLoop analyze_hot_loop(const std::string& asm_text, const Target& t, const std::string& loop) {
  const auto L = lines_of(asm_text);
  auto [begin, end] = find_loop(L, loop);
  HotLoop h;
  // The back-branch (L[end]) ends the path: it issues once per iteration too.
  for (size_t i = begin + 1, next = 0; i <= end; i = std::max(i, next) + 1) {
    const std::string& l = L[i];
    if (is_label(l)) continue;
    const std::string m = mnemonic(l);
    if (i < end && (starts(m, "s_cbranch") || m == "s_branch")) {
      // Taken or not, a branch on the steady path takes its issue slot (the issue table's
      // "branch = 4"); the taken ones then continue at their target.
      const std::string target = trim(l.substr(m.size()));
      if (steady_branch_taken(loop, target)) {
        size_t j = i + 1;
        while (j < end && L[j] != target + ":") ++j;
        if (j < end) next = j;
      }
    }
    h.insts.push_back(l);
    double c = issue_cycles_of(l, t);
    h.issue_cycles += c;
    if (starts(m, "v_mfma")) {
      ++h.mfma;
      h.mfma_cycles += c;
    } else if (starts(m, "v_")) {
      ++h.valu;
      h.valu_cycles += c;
    } else if (starts(m, "ds_")) {
      ++h.lds;
      h.lds_cycles += c;
    } else if (m == "s_nop") {
      h.nop_cycles += c;
    } else if (starts(m, "s_")) {
      ++h.salu;
      h.salu_cycles += c;
    }
  }
  {
    // Co-execution issue model over three iterations: the third one is the steady state (the
    // MFMA pipe carries over the back edge).
    std::vector<IssueOp> ops;
    for (const auto& l : h.insts) {
      ops.push_back(issue_op_of_line(l, t));
      if (starts(mnemonic(l), "ds_")) h.lds_bytes += 64.0 * lds_lane_bytes(mnemonic(l));
    }
    IssueTimeline tl;
    int end2 = 0;
    std::vector<int> barriers;
    for (int it = 0; it < 3; ++it) {
      for (size_t k = 0; k < ops.size(); ++k) {
        const int at = tl.issue(ops[k]);
        if (it < 2) continue;
        h.coissue_slots.push_back(at);
        if (mnemonic(h.insts[k]) == "s_barrier") barriers.push_back(at);
      }
      if (it == 1) end2 = tl.now();
    }
    h.coissue_cycles = 4.0 * (tl.now() - end2);
    // From the slot's release (the first barrier) to the next barrier, or to the iteration's end.
    if (!barriers.empty())
      h.after_release_cycles = 4.0 * ((barriers.size() > 1 ? barriers[1] : tl.now()) - barriers[0]);
  }
  return h;
}

// Bytes one wave64 vector-memory instruction moves, if it is a load (stores = false) or a store
// (stores = true) of global / buffer / flat memory; 0 otherwise.
static double vmem_bytes(const std::string& m, bool stores) {
  const char* const kinds[] = {"global_", "buffer_", "flat_"};
  bool match = false;
  for (const char* k : kinds)
    if (starts(m, (std::string(k) + (stores ? "store" : "load")).c_str())) match = true;
  if (!match) return 0;
  int dw = 1;
  if (m.find("dwordx4") != std::string::npos) dw = 4;
  else if (m.find("dwordx3") != std::string::npos) dw = 3;
  else if (m.find("dwordx2") != std::string::npos) dw = 2;
  else if (m.find("byte") != std::string::npos) return 64;
  else if (m.find("short") != std::string::npos) return 128;
  return 64.0 * 4 * dw;
}

// Peak bytes of outstanding loads (or stores) of one wave over L[begin, end): a static replay
// of its vector-memory instructions and s_waitcnt vmcnt(N), `iterations` times (a loop's steady
// state: the peak of the iterations after the first; a straight range: 1). Forward s_branch
// skips its block (a loop's partial-tile path); conditional branches fall through (the steady
// state's guards; a prologue's widest wave). At most 63 operations count (a 6-bit vmcnt, which
// counts loads and stores alike on gfx9: the oldest is counted as landed).
static double replay_inflight_bytes(const std::vector<std::string>& L, size_t begin, size_t end, int iterations,
                                    bool stores) {
  constexpr size_t kMaxVmOutstanding = 63;
  std::deque<double> q;  // outstanding vector-memory operations (bytes per wave), in issue order
  double peak = 0;
  for (int iter = 0; iter < iterations; ++iter) {
    for (size_t i = begin; i < end; ++i) {
      const std::string& l = L[i];
      if (is_label(l)) continue;
      const std::string m = mnemonic(l);
      if (m == "s_branch") {
        std::string target = trim(l.substr(m.size()));
        size_t j = i + 1;
        while (j < end && L[j] != target + ":") ++j;
        i = j;
        continue;
      }
      if (m == "s_waitcnt") {
        auto p = l.find("vmcnt(");
        if (p != std::string::npos) {
          size_t n = std::stoul(l.substr(p + 6));
          while (q.size() > n) q.pop_front();
        }
        continue;
      }
      // The other direction's operations still take vmcnt slots (0 bytes of this kind).
      const double b = vmem_bytes(m, stores), other = vmem_bytes(m, !stores);
      if (b > 0 || other > 0) {
        if (q.size() == kMaxVmOutstanding) q.pop_front();
        q.push_back(b);
        double sum = 0;
        for (double x : q) sum += x;
        if (iterations == 1 || iter > 0) peak = std::max(peak, sum);
      }
    }
  }
  return peak;
}

// One producer loop's peak outstanding load bytes (see producer_inflight_bytes).
static double loop_inflight_bytes(const std::vector<std::string>& L, size_t begin, size_t end) {
  return replay_inflight_bytes(L, begin + 1, end, 3, false);
}

// One loop per producer wave (LDS-DMA prefix kernels have two). At most 63 loads count per wave
// (modeled: whether hardware keeps more in flight is not known here, so the model does not
// assume it).
double producer_inflight_bytes(const std::string& asm_text, int consumer_dma_waves) {
  const auto L = lines_of(asm_text);
  if (consumer_dma_waves > 0) {
    auto [begin, end] = find_loop(L, ".Lconsumer_loop_");
    return consumer_dma_waves * loop_inflight_bytes(L, begin, end);
  }
  double total = 0;
  for (size_t from = 0;;) {
    size_t at = L.size();
    for (size_t i = from; i < L.size(); ++i)
      if (is_label(L[i]) && starts(L[i], ".Lproducer_loop_")) { at = i; break; }
    if (at == L.size()) break;
    const std::vector<std::string> rest(L.begin() + long(at), L.end());
    auto [begin, end] = find_loop(rest, ".Lproducer_loop_");
    total += loop_inflight_bytes(rest, begin, end);
    from = at + end + 1;
  }
  if (total == 0) throw std::runtime_error("hot loop: no producer loop in the assembly");
  return total;
}

KernelPhases kernel_phases_inflight(const std::string& asm_text, int waves) {
  const auto L = lines_of(asm_text);
  KernelPhases ph;
  size_t barrier = L.size();
  for (size_t i = 0; i < L.size(); ++i)
    if (!is_label(L[i]) && mnemonic(L[i]) == "s_barrier") { barrier = i; break; }
  if (barrier == L.size()) throw std::runtime_error("kernel phases: no s_barrier in the assembly");
  ph.prologue_load_bytes = waves * replay_inflight_bytes(L, 0, barrier, 1, false);
  auto [begin, end] = find_loop(L, ".Lconsumer_loop_");
  (void)begin;
  size_t stop = end + 1;
  // The unit ends at the branch to the persistent walk's meeting point (mla_decode.cpp).
  auto unit_ends = [&](const std::string& l) {
    return mnemonic(l) == "s_endpgm" || (mnemonic(l) == "s_branch" && l.find(".Lunit_end_") != std::string::npos);
  };
  while (stop < L.size() && !unit_ends(L[stop])) ++stop;
  if (stop == L.size()) throw std::runtime_error("kernel phases: no end of the unit after the consumer loop");
  ph.epilogue_store_bytes = waves * replay_inflight_bytes(L, end + 1, stop, 1, true);
  if (!(ph.prologue_load_bytes > 0) || !(ph.epilogue_store_bytes > 0))
    throw std::runtime_error(fmt::format("kernel phases: {} prologue load bytes, {} epilogue store bytes in flight",
                                         ph.prologue_load_bytes, ph.epilogue_store_bytes));
  return ph;
}

double modeled_ring_stall_cycles(const HotLoop& h, int ring, int slot_tokens, int lds_row_bytes) {
  if (ring != 1) return 0;
  return std::max(0.0, double(slot_tokens) * double(lds_row_bytes) / 128.0 - h.after_release_cycles);
}

nlohmann::json issue_model_json(const std::string& asm_text, const Target& t, const IssueModelShape& shape) {
  const HotLoop h = analyze_hot_loop(asm_text, t);
  const double stall = modeled_ring_stall_cycles(h, shape.ring, shape.slot_tokens, shape.lds_row_bytes);
  const MachineModel& m = t.machine;
  const int bpw = shape.blocks_per_wave;
  // One wave-tile per computing row-block count: the loop of that many blocks (the full loop is
  // `consumer_loop`, the others `wide_loop_b<b>`).
  nlohmann::json cycles = nlohmann::json::array(), lds = nlohmann::json::array();
  for (int b = 1; b <= bpw; ++b) {
    const HotLoop hb = b == bpw ? h : analyze_hot_loop(asm_text, t, fmt::format(".Lwide_loop_b{}_", b));
    cycles.push_back(hb.coissue_cycles + (b == bpw ? stall : 0.0));
    lds.push_back(hb.lds_bytes / 128.0);
  }
  return {{"modeled", "static co-issue model of the generated hot loop and the target's machine constants "
                      "(docs/performance.md); not measured"},
          {"hot_loop_coissue_cycles", h.coissue_cycles},
          {"ring_stall_cycles", stall},
          {"cycles_per_block_tile", (h.coissue_cycles + stall) / bpw},
          {"lds_clocks_per_block_tile", h.lds_bytes / 128.0 / bpw},
          {"lds_clocks_per_tile", double(shape.tile_tokens) * shape.lds_row_bytes / 128.0},
          {"blocks_per_wave", bpw},
          {"wave_tile_cycles", cycles},
          {"wave_tile_lds_clocks", lds},
          {"producer_inflight_bytes", producer_inflight_bytes(asm_text, shape.consumer_dma_waves)},
          {"producer_cycles_per_tile",
           shape.producer_stage_slots > 0
               ? analyze_hot_loop(asm_text, t, ".Lproducer_loop_").coissue_cycles /
                     (shape.producer_stage_slots * double(shape.slot_tokens) / shape.tile_tokens)
               : 0.0},
          {"phases", shape.consumer_dma_waves > 0 ? kernel_phases_inflight(asm_text, shape.consumer_dma_waves).to_json()
                                                   : nlohmann::json(nullptr)},
          {"clock_hz", m.clock_hz},
          {"little_latency_s", m.little_latency_s},
          {"cu_port_bytes_per_clk", m.cu_port_bytes_per_clk},
          {"unit_fill_s", m.unit_fill_s},
          {"hbm_bytes_per_s", t.hbm_achievable_bytes_per_s}};
}

}  // namespace mla::gen
