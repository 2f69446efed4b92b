#include "runtime/backend.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <span>
#include <iterator>

#include <fmt/format.h>


namespace mla::rt {

namespace {

size_t align_up(size_t v, size_t a = 256) { return (v + a - 1) / a * a; }

}  // namespace

KernargPacker& KernargPacker::put(const std::string& name, const void* v, uint32_t size) {
  const KernelArgInfo& a = k_.arg(name);
  if (a.size != size)
    throw CatalogError(fmt::format("kernel {}: argument '{}' is {} bytes in the catalog, packed as {}", k_.name, name,
                                   a.size, size));
  if (a.offset + size > bytes_.size())
    throw CatalogError(fmt::format("kernel {}: argument '{}' at {} overruns the {}-byte kernarg segment", k_.name,
                                   name, a.offset, bytes_.size()));
  std::memcpy(bytes_.data() + a.offset, v, size);
  set_[size_t(&a - k_.args.data())] = true;
  return *this;
}

std::vector<uint8_t> KernargPacker::finish() const {
  for (size_t i = 0; i < k_.args.size(); ++i)
    if (!set_[i] && k_.args[i].name != "reserved")
      throw CatalogError(fmt::format("kernel {}: argument '{}' was not packed", k_.name, k_.args[i].name));
  return bytes_;
}

void check_kernel_interface(const CatalogKernel& k, const CodeObjectInfo& co) {
  const CodeObjectKernel* ek = co.kernel(k.name);
  if (!ek) throw CatalogError(fmt::format("{}: code object has no kernel '{}'", k.co_path, k.name));
  if (ek->args.size() != k.args.size())
    throw CatalogError(fmt::format("{}: kernel {} declares {} arguments in its metadata, the catalog {}", k.co_path,
                                   k.name, ek->args.size(), k.args.size()));
  for (size_t i = 0; i < k.args.size(); ++i) {
    const auto& a = k.args[i];
    const auto& b = ek->args[i];
    if (a.name != b.name || a.offset != b.offset || a.size != b.size)
      throw CatalogError(fmt::format(
          "{}: kernel {} argument {}: catalog says '{}' at {} ({} bytes), code object says '{}' at {} ({} bytes)",
          k.co_path, k.name, i, a.name, a.offset, a.size, b.name, b.offset, b.size));
  }
  if (ek->kernarg_segment_size < k.kernarg_size)
    throw CatalogError(fmt::format("{}: kernel {} kernarg size {} < catalog's {}", k.co_path, k.name,
                                   ek->kernarg_segment_size, k.kernarg_size));
}

// The argument list of a decode, reduce, merge or indexer kernel is the contract's (abi/mla_abi.h), which the
// generator declared it from and the packing below relies on.
void check_contract_args(const CatalogKernel& k) {
  std::span<const abi::KernargField> table;
  if (k.kind == "mla_decode" || k.kind == "mla_prefix") table = abi::kDecodeArgs;
  else if (k.kind == "mla_reduce") table = abi::kReduceArgs;
  else if (k.kind == "mla_merge") table = abi::kMergeArgs;
  else if (k.kind == "dsa_indexer_logits") table = abi::kIndexerArgs;
  else if (k.kind == "dsa_topk") table = abi::kTopkArgs;
  else return;
  if (k.args.size() != table.size())
    throw RtError(MLA_ERROR_KERNARG_MISMATCH, fmt::format("{}: kernel {} has {} arguments, the contract (abi/mla_abi.h) {}",
                                                          k.co_path, k.name, k.args.size(), table.size()));
  for (size_t i = 0; i < table.size(); ++i)
    if (k.args[i].name != table[i].name || k.args[i].offset != table[i].offset || k.args[i].size != table[i].size)
      throw RtError(MLA_ERROR_KERNARG_MISMATCH,
                    fmt::format("{}: kernel {} argument {}: '{}' at {} ({} bytes), the contract (abi/mla_abi.h) says '{}' "
                                "at {} ({} bytes)",
                                k.co_path, k.name, i, k.args[i].name, k.args[i].offset, k.args[i].size, table[i].name,
                                table[i].offset, table[i].size));
}

CheckedCode load_checked_code(const CatalogKernel& k, const std::string& dev) {
  if (k.target != dev)
    throw RtError(MLA_ERROR_TARGET_MISMATCH,
                  fmt::format("kernel {} is catalogued for {}, the device is {}", k.name, k.target, dev));
  CheckedCode c;
  {
    std::ifstream f(k.co_path, std::ios::binary);
    if (!f)
      throw RtError(MLA_ERROR_CODE_OBJECT, fmt::format("{}: cannot read the code object of kernel {}", k.co_path, k.name));
    c.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::string t = elf_gfx_target(c.bytes, k.co_path);
  if (t != dev)
    throw RtError(MLA_ERROR_TARGET_MISMATCH,
                  fmt::format("{}: code object is built for {}, the device is {} (only code objects of the device's "
                              "target are loaded; regenerate the catalog for {})",
                              k.co_path, t, dev, dev));
  c.info = read_code_object_info(c.bytes, k.co_path);
  if (!c.info.kernel(k.name))
    throw RtError(MLA_ERROR_CODE_OBJECT, fmt::format("{}: code object has no kernel '{}'", k.co_path, k.name));
  try {
    check_kernel_interface(k, c.info);
  } catch (const CatalogError& e) {
    throw RtError(MLA_ERROR_KERNARG_MISMATCH, e.what());
  }
  check_contract_args(k);
  return c;
}

SelectedKernels selected_kernels(const Selection& sel, const DecodeShape& caller) {
  SelectedKernels k;
  k.decode = sel.decode;
  k.reduce = sel.reduce;
  k.prefix = sel.prefix;
  k.heads = caller.heads;
  k.qseqlen = caller.qseqlen;
  k.kheads = sel.decode.shape.value("heads", caller.heads);
  k.kqseqlen = sel.decode.shape.value("qseqlen", caller.qseqlen);
  k.q_dtype = caller.q_dtype;
  k.kv_dtype = caller.kv_dtype;
  k.page_size = caller.page_size;
  k.return_lse = caller.return_lse;
  k.logit_cap = caller.logit_cap;
  k.sparse = caller.sparse;
  k.kv_ds_mla = caller.kv_ds_mla;
  return k;
}

namespace {


void fill_sizes(WorkspaceLayout& w, const SelectedKernels& k, size_t batch) {
  const size_t M = size_t(k.kheads) * k.kqseqlen;
  size_t off = 0;
  auto region = [&](size_t& at, size_t bytes) {
    at = off;
    off += align_up(bytes);
  };
  w.tables_bytes = step_tables::bytes(w.max_units, w.max_reduces, size_t(w.decode_grid) + w.prefix_grid);
  region(w.tables, w.tables_bytes);
  region(w.partial_o, w.max_partials * M * kVDim * 4);
  region(w.partial_lse, w.max_partials * M * 4);
  if (k.padded()) {
    w.q_pad_bytes = batch * M * kQkDim * size_t(elem_bytes(k.q_dtype));
    w.o_pad_bytes = batch * M * kVDim * 2;
    w.lse_pad_bytes = k.return_lse ? batch * M * 4 : 0;
  }
  region(w.q_pad, w.q_pad_bytes);
  region(w.o_pad, w.o_pad_bytes);
  region(w.lse_pad, w.lse_pad_bytes);
  w.counters_bytes = w.merge_in_launch ? batch * size_t(merge_blocks_per_request(k)) * 4 : 0;
  region(w.counters, w.counters_bytes);
  w.total = off;
}

}  // namespace

int merge_blocks_per_request(const SelectedKernels& k) {
  const int M = k.kheads * k.kqseqlen, rpg = k.decode.launch.rows_per_group;
  return (M + rpg - 1) / rpg * (rpg / 16);
}

WorkspaceLayout workspace_layout(const SelectedKernels& k, int max_batch, int64_t max_total_tokens, int num_cus,
                                 int workgroups_per_cu, bool merge_in_launch) {
  const int64_t M = int64_t(k.kheads) * k.kqseqlen;
  const int64_t rpg = k.decode.launch.rows_per_group, T = k.decode.launch.tile_tokens;
  const int64_t G = (M + rpg - 1) / rpg;
  const int64_t wpc = workgroups_per_cu > 0 ? workgroups_per_cu : k.decode.resident_workgroups_per_cu;
  // plan_decode: every request is one piece, and each workgroup's walk cuts at most one more
  // (a piece is G units on G workgroups); every split holds at least one tile.
  int64_t units = int64_t(max_batch) * G + wpc * num_cus;
  if (max_total_tokens > 0) units = std::min(units, G * ((max_total_tokens + T - 1) / T + max_batch));
  WorkspaceLayout w;
  w.max_units = size_t(units);
  w.max_partials = size_t(int64_t(max_batch) + (wpc * num_cus + G - 1) / G);
  if (k.prefix) {
    // A cascade's prefix splits write a partial for every member: a split holds Gp >= count M /
    // prefix rows workgroups of the prefix launch, so kp x count <= its workgroups x prefix rows / M
    // (+ count); its members' unique splits fill the reserve.
    const int64_t prefix_wpc = workgroups_per_cu > 0 ? workgroups_per_cu : k.prefix->resident_workgroups_per_cu;
    const int64_t rows_per_prefix_row = (k.prefix->launch.rows_per_group + M - 1) / M;
    w.max_units += size_t(kCascadeReserve) * size_t(num_cus);
    w.max_partials += size_t(num_cus) * size_t(prefix_wpc * rows_per_prefix_row + kCascadeReserve) + size_t(max_batch);
  }
  w.max_reduces = size_t(max_batch);
  // Persistent grids: every resident workgroup of the device (the planner's workgroups).
  auto resident = [&](int catalog_wpc) {
    return unsigned(int64_t(num_cus) * (workgroups_per_cu > 0 ? workgroups_per_cu : catalog_wpc));
  };
  w.decode_grid = resident(k.decode.resident_workgroups_per_cu);
  w.prefix_grid = k.prefix ? resident(k.prefix->resident_workgroups_per_cu) : 0;
  w.reduce_grid = unsigned(std::max<size_t>(1, w.max_reduces));
  w.merge_in_launch = merge_in_launch;
  if (merge_in_launch) {
    w.prefix_grid = 0;  // no cascade: no prefix launch
    w.max_units += size_t(max_batch) * size_t((M + rpg - 1) / rpg);  // an empty request's units
  }
  fill_sizes(w, k, size_t(max_batch));
  return w;
}

WorkspaceLayout workspace_layout_for(const SelectedKernels& k, const Plan& plan, int batch) {
  WorkspaceLayout w;
  w.max_units = plan.units.size() + plan.prefix_units.size();
  w.max_partials = size_t(plan.num_partials);
  w.max_reduces = plan.reduces.size();
  w.decode_grid = unsigned(std::max<size_t>(1, plan.unit_ranges.size()) - 1 + plan.unit_ranges.empty());
  w.prefix_grid = k.prefix ? unsigned(std::max<size_t>(1, plan.prefix_unit_ranges.size()) - 1 + plan.prefix_unit_ranges.empty()) : 0;
  w.reduce_grid = unsigned(std::max<size_t>(1, w.max_reduces));
  w.merge_in_launch = plan.merge_in_launch;
  if (plan.merge_in_launch) w.prefix_grid = 0;
  fill_sizes(w, k, size_t(batch));
  return w;
}

WorkspaceAddrs workspace_addrs(uint64_t base, const WorkspaceLayout& ws) {
  WorkspaceAddrs a;
  a.scales = base + ws.tables + step_tables::scales;
  a.decode_header = base + ws.tables + step_tables::decode_header;
  a.prefix_header = base + ws.tables + step_tables::prefix_header;
  a.reduce_header = base + ws.tables + step_tables::reduce_header;
  a.partial_o = base + ws.partial_o;
  a.partial_lse = base + ws.partial_lse;
  a.q_pad = ws.q_pad_bytes ? base + ws.q_pad : 0;
  a.o_pad = ws.o_pad_bytes ? base + ws.o_pad : 0;
  a.lse_pad = ws.lse_pad_bytes ? base + ws.lse_pad : 0;
  return a;
}

void write_launch_header(uint8_t* dst, size_t count, size_t entries_offset, unsigned stride, int64_t merge_offset,
                         int64_t counters_offset, size_t ranges_offset) {
  abi::LaunchHeader h{};
  h.count = int32_t(count);
  h.entries_offset = int32_t(entries_offset);
  h.stride = int32_t(stride);
  h.merge_offset = int32_t(merge_offset);
  h.counters_offset = int32_t(counters_offset);
  h.ranges_offset = int32_t(ranges_offset);
  std::memcpy(dst, &h, sizeof h);
}

size_t pack_step_tables(const Plan& plan, float q_scale, float kv_scale, const WorkspaceLayout& ws, uint8_t* dst) {
  namespace S = step_tables;
  std::memset(dst, 0, S::entries);
  std::memcpy(dst + S::scales, &q_scale, 4);
  std::memcpy(dst + S::scales + 4, &kv_scale, 4);
  const size_t nd = plan.units.size(), np = plan.prefix_units.size(), nr = plan.reduces.size();
  const size_t decode_at = S::entries, prefix_at = decode_at + nd * 32, reduce_at = prefix_at + np * 32;
  if (plan.merge_in_launch != ws.merge_in_launch && !(plan.units.empty() && plan.reduces.empty()))
    throw std::logic_error("pack_step_tables: a plan's merge_in_launch differs from its workspace layout's");
  // In-launch merge: the decode kernel finds request b's entry at reduce_at + 32 b and the
  // counters in their workspace region (offsets from its header).
  const int64_t merge_offset = ws.merge_in_launch ? int64_t(reduce_at) - int64_t(S::decode_header) : 0;
  const int64_t counters_offset =
      ws.merge_in_launch ? int64_t(ws.counters) - int64_t(ws.tables + S::decode_header) : 0;
  // Each persistent launch's workgroup ranges (int32[grid + 1]) after the entries; none planned:
  // every workgroup's range is empty.
  const size_t dranges_at = reduce_at + nr * 32, pranges_at = dranges_at + 4 * (size_t(ws.decode_grid) + 1);
  const size_t end = pranges_at + 4 * (size_t(ws.prefix_grid) + 1);
  auto put_ranges = [&](const std::vector<int32_t>& r, unsigned grid, size_t at, const char* which) {
    if (!r.empty() && r.size() != size_t(grid) + 1)
      throw std::logic_error(fmt::format("pack_step_tables: the plan's {} ranges hold {} workgroups, the launch's grid {}",
                                         which, r.size() - 1, grid));
    if (r.empty()) std::memset(dst + at, 0, 4 * (size_t(grid) + 1));
    else std::memcpy(dst + at, r.data(), 4 * r.size());
  };
  write_launch_header(dst + S::decode_header, nd, decode_at - S::decode_header, ws.decode_grid, merge_offset,
                      counters_offset, dranges_at - S::decode_header);
  write_launch_header(dst + S::prefix_header, np, prefix_at - S::prefix_header, std::max(1u, ws.prefix_grid), 0, 0,
                      pranges_at - S::prefix_header);
  write_launch_header(dst + S::reduce_header, ws.merge_in_launch ? 0 : nr, reduce_at - S::reduce_header, ws.reduce_grid);
  static_assert(sizeof(WorkUnit) == 32 && sizeof(abi::PrefixUnit) == 32 && sizeof(ReduceEntry) == 32);
  if (nd) std::memcpy(dst + decode_at, plan.units.data(), nd * 32);
  if (np) std::memcpy(dst + prefix_at, plan.prefix_units.data(), np * 32);
  if (nr) std::memcpy(dst + reduce_at, plan.reduces.data(), nr * 32);
  put_ranges(plan.unit_ranges, ws.decode_grid, dranges_at, "decode");
  put_ranges(plan.prefix_unit_ranges, ws.prefix_grid, pranges_at, "prefix");
  return end;
}

LaunchGrids launch_grids(const SelectedKernels& k, const WorkspaceLayout& ws) {
  LaunchGrids g;
  g.decode = {ws.decode_grid, 1, 1};
  g.prefix = {k.prefix ? ws.prefix_grid : 0u, 1, 1};
  g.reduce = {ws.reduce_grid, unsigned(k.kheads * k.kqseqlen), 1};
  if (ws.merge_in_launch) g.prefix.x = 0, g.reduce.x = 0;
  g.launches = 1 + (g.prefix.x ? 1 : 0) + (g.reduce.x ? 1 : 0);
  return g;
}

PlanInputs plan_inputs_for(const SelectedKernels& k, const std::vector<int>& kv_lens, int num_cus,
                           int workgroups_per_cu) {
  PlanInputs in;
  in.kv_lens = kv_lens;
  in.qseqlen = k.kqseqlen;
  in.heads = k.kheads;
  in.page_size = k.page_size;
  in.kv_bytes_per_token = k.kv_ds_mla ? abi::kDsMlaRowBytes : kQkDim * elem_bytes(k.kv_dtype);
  in.q_row_bytes = kQkDim * elem_bytes(k.q_dtype);
  in.num_cus = num_cus;
  const auto target = abi::parse_target(k.decode.target);
  if (!target) throw CatalogError(fmt::format("{}: target '{}' (allowed: gfx942, gfx950)", k.decode.name, k.decode.target));
  in.num_xcds = abi::facts(*target).num_xcds;  // workgroup i runs on XCD i mod num_xcds
  // 0: as many as the decode kernel's occupancy lets a CU hold (catalog.json).
  in.workgroups_per_cu = workgroups_per_cu > 0 ? workgroups_per_cu : k.decode.resident_workgroups_per_cu;
  in.tile_tokens = k.decode.launch.tile_tokens;
  in.rows_per_group = k.decode.launch.rows_per_group;
  // The partial o element: f32, or bf16 for sparse kernels (ReduceEntry::bf16_splits).
  if (k.decode.launch.partial_o_bytes != 2 && k.decode.launch.partial_o_bytes != 4)
    throw CatalogError(fmt::format("{}: geometry.partial_o_bytes = {} (allowed: 4 for f32 partials, 2 for bf16)",
                                   k.decode.name, k.decode.launch.partial_o_bytes));
  in.partial_o_bytes = k.decode.launch.partial_o_bytes;
  // The decode launch's cost model (modeled, catalog.json): a unit's fill and the HBM floor, in
  // token-equivalents at the CU's rate with its resident workgroups (cost_model.h).
  if (const auto& im = k.decode.issue_model) {
    const double rate = modeled_cu_stream_rate(im->cu_port_bytes_per_clk, im->clock_hz,
                                               in.workgroups_per_cu * im->producer_inflight_bytes, im->little_latency_s);
    in.unit_fill = im->unit_fill_s * rate / in.kv_bytes_per_token;
    in.hbm_factor = num_cus * rate / im->hbm_bytes_per_s;
    in.producer_per_tile = im->producer_cycles_per_tile * rate / im->clock_hz / in.kv_bytes_per_token;
  }
  if (k.prefix) {
    in.prefix_rows_per_group = k.prefix->launch.rows_per_group;
    in.prefix_partial_o_bytes = k.prefix->launch.partial_o_bytes;
    in.prefix_workgroups_per_cu = workgroups_per_cu > 0 ? workgroups_per_cu : k.prefix->resident_workgroups_per_cu;
    // The prefix launch's issue model (modeled, catalog.json): a CU streams at its resident
    // workgroups' bytes in flight over the loaded latency (Little's law), at most its read port;
    // a token-equivalent is one KV token at that rate.
    if (!k.prefix->issue_model)
      throw CatalogError(fmt::format("{}: no issue_model (catalog.json's modeled hot loop of a prefix kernel)",
                                     k.prefix->name));
    const IssueModel& im = *k.prefix->issue_model;
    const double rate = modeled_cu_stream_rate(im.cu_port_bytes_per_clk, im.clock_hz,
                                               in.prefix_workgroups_per_cu * im.producer_inflight_bytes,
                                               im.little_latency_s);
    const double teq_per_clock = rate / im.clock_hz / in.kv_bytes_per_token;
    in.prefix_issue_per_block_tile = im.cycles_per_block_tile * teq_per_clock;
    in.prefix_lds_per_block_tile = im.lds_clocks_per_block_tile * teq_per_clock;
    in.prefix_lds_per_tile = im.lds_clocks_per_tile * teq_per_clock;
    in.prefix_blocks_per_wave = k.prefix->launch.blocks_per_wave;
    if (in.prefix_blocks_per_wave > 1) {
      if (im.wave_tile_cycles.size() != size_t(in.prefix_blocks_per_wave) ||
          im.wave_tile_lds_clocks.size() != size_t(in.prefix_blocks_per_wave))
        throw CatalogError(fmt::format("{}: issue_model has {} / {} wave-tile figures for {} row blocks per wave",
                                       k.prefix->name, im.wave_tile_cycles.size(), im.wave_tile_lds_clocks.size(),
                                       in.prefix_blocks_per_wave));
      for (double c : im.wave_tile_cycles) in.prefix_wave_tile_issue.push_back(c * teq_per_clock);
      for (double c : im.wave_tile_lds_clocks) in.prefix_wave_tile_lds.push_back(c * teq_per_clock);
    }
    in.prefix_hbm_factor = num_cus * rate / im.hbm_bytes_per_s;
    in.prefix_unit_fill = im.unit_fill_s * rate / in.kv_bytes_per_token;
    if (im.prologue_inflight_bytes > 0) {  // phased (no producer wave): Q and the partials apart from the stream
      if (in.prefix_workgroups_per_cu != 1)
        throw CatalogError(fmt::format("{}: a phased prefix kernel (issue_model.phases) at {} workgroups per CU "
                                       "(allowed: 1)",
                                       k.prefix->name, in.prefix_workgroups_per_cu));
      const double q_rate = modeled_cu_stream_rate(im.cu_port_bytes_per_clk, im.clock_hz, im.prologue_inflight_bytes,
                                                   im.little_latency_s);
      const double store_rate = modeled_cu_stream_rate(im.cu_port_bytes_per_clk, im.clock_hz,
                                                       im.epilogue_inflight_bytes, im.little_latency_s);
      in.prefix_prologue_per_row = double(kQkDim * elem_bytes(k.q_dtype)) / q_rate * rate / in.kv_bytes_per_token;
      in.prefix_store_factor = rate / store_rate;
    }
  }
  return in;
}

std::vector<DecodeOp> decode_ops(const SelectedKernels& k, const WorkspaceLayout& ws, int batch, const DeviceTensors& t,
                                 const WorkspaceAddrs& wa) {
  std::vector<DecodeOp> ops;
  if (batch == 0) return ops;
  const size_t B = size_t(batch), q = size_t(k.qseqlen), kq = size_t(k.kqseqlen);
  const size_t H = size_t(k.heads), KH = size_t(k.kheads);
  const size_t eq = size_t(elem_bytes(k.q_dtype));
  const bool pad = k.padded();
  const LaunchGrids grids = launch_grids(k, ws);
  // Padded kernel: request b's row r goes to kernel row kq - q + r (the last q rows of the
  // kernel's kq, whose causal limits are the caller's), heads 0..H-1 of KH. The padding rows and
  // heads are never written here: the first upload into a workspace zeroes them.
  auto copy_rows = [&](uint64_t dst, uint64_t src, size_t elem_per_head, bool into_pad, const char* what) {
    for (size_t r = 0; r < q; ++r) {
      DecodeOp op;
      op.kind = DecodeOp::Copy2D;
      size_t user_off = r * H * elem_per_head, pad_off = (kq - q + r) * KH * elem_per_head;
      size_t user_pitch = q * H * elem_per_head, pad_pitch = kq * KH * elem_per_head;
      op.dst = dst + (into_pad ? pad_off : user_off);
      op.dpitch = into_pad ? pad_pitch : user_pitch;
      op.src = src + (into_pad ? user_off : pad_off);
      op.spitch = into_pad ? user_pitch : pad_pitch;
      op.width = H * elem_per_head;
      op.height = B;
      op.what = what;
      ops.push_back(op);
    }
  };
  uint64_t q_addr = t.q, o_addr = t.o, lse_addr = k.return_lse ? t.lse : 0;
  if (pad) {
    copy_rows(wa.q_pad, t.q, kQkDim * eq, true, "copy q into padded q");
    q_addr = wa.q_pad;
    o_addr = wa.o_pad;
    lse_addr = k.return_lse ? wa.lse_pad : 0;
  }
  const uint64_t po = ws.max_partials ? wa.partial_o : 0, pl = ws.max_partials ? wa.partial_lse : 0;
  // The decode kernel over the requests (and the unique parts of prefix-group members), then the
  // prefix kernel over the shared prefixes; both take the decode arguments.
  auto attention = [&](const CatalogKernel& kernel, uint64_t header, Dim3 grid, const char* what) {
    KernargPacker dk(kernel);
    dk.ptr("q", q_addr).ptr("kv", t.kv).ptr("kv_indices", t.kv_indices).ptr("work", header).ptr("o", o_addr);
    dk.ptr("lse", lse_addr).ptr("partial_o", po).ptr("partial_lse", pl);
    dk.ptr("q_scale", t.q_scale).ptr("kv_scale", t.kv_scale).f32("sm_scale", t.sm_scale).f32("logit_cap", t.logit_cap);
    dk.u32("kv_slots", t.kv_slots).u32("reserved", 0);
    DecodeOp op;
    op.kind = DecodeOp::Launch;
    op.kernel = &kernel;
    op.grid = grid;
    op.block = {unsigned(kernel.launch.workgroup_size), 1, 1};
    op.kernarg = dk.finish();
    op.what = what;
    ops.push_back(std::move(op));
  };
  attention(k.decode, wa.decode_header, grids.decode, "decode");
  if (k.prefix && grids.prefix.x) attention(*k.prefix, wa.prefix_header, grids.prefix, "prefix");
  if (grids.reduce.x) {  // else the decode launch merges (WorkspaceLayout::merge_in_launch)
    KernargPacker rk(k.reduce);
    rk.ptr("reduce_map", wa.reduce_header).ptr("partial_o", po).ptr("partial_lse", pl).ptr("o", o_addr).ptr("lse", lse_addr);
    DecodeOp op;
    op.kind = DecodeOp::Launch;
    op.kernel = &k.reduce;
    op.grid = grids.reduce;
    op.block = {unsigned(k.reduce.workgroup_size), 1, 1};
    op.kernarg = rk.finish();
    op.what = "reduce";
    ops.push_back(std::move(op));
  }
  if (pad) {
    copy_rows(t.o, wa.o_pad, kVDim * 2, false, "copy o out of padded o");
    if (k.return_lse) copy_rows(t.lse, wa.lse_pad, 4, false, "copy lse out of padded lse");
  }
  return ops;
}

DecodeOp merge_op(const CatalogKernel& kernel, const MergeTensors& t) {
  KernargPacker mk(kernel);
  mk.ptr("output", t.output).ptr("prefix_output", t.prefix_output).ptr("prefix_lse", t.prefix_lse);
  mk.ptr("suffix_output", t.suffix_output).ptr("suffix_lse", t.suffix_lse).ptr("output_lse", t.output_lse);
  mk.u32("rows", t.rows);
  DecodeOp op;
  op.kind = DecodeOp::Launch;
  op.kernel = &kernel;
  op.grid = {t.rows, 1, 1};
  op.block = {unsigned(kernel.workgroup_size), 1, 1};
  op.kernarg = mk.finish();
  op.what = "merge_attn_states";
  return op;
}
}  // namespace mla::rt
