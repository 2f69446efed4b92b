#include "runtime/emulator_backend.h"

#include <cstring>
#include <set>

#include <fmt/format.h>

#include "emulator/code_object.h"
#include "runtime/backend.h"

namespace mla::rt {

// ---- Emulator backend ----------------------------------------------------------------------

EmulatorBackend::EmulatorBackend(emu::Gfx gfx, emu::DispatchOptions opts) : gfx_(gfx), opts_(opts), dev_(gfx) {}

namespace {
template <class F>
auto emu_call(const char* what, F&& f) {
  try {
    return f();
  } catch (const emu::Error& e) {
    throw RtError(MLA_ERROR_BACKEND, fmt::format("emulator {}: {}", what, e.what()));
  }
}
}  // namespace

uint64_t EmulatorBackend::alloc(size_t bytes) { return alloc_named(bytes, "", 0); }

uint64_t EmulatorBackend::alloc_named(size_t bytes, const std::string& name, uint8_t fill) {
  std::lock_guard lk(mu_);
  if (bytes > (size_t(1) << 40))
    throw RtError(MLA_ERROR_INVALID_ARGUMENT, fmt::format("emulator alloc of {} bytes: too large", bytes));
  return emu_call("alloc", [&] { return dev_.alloc(std::max<size_t>(bytes, 4), 256, name, fill); });
}

void EmulatorBackend::free(uint64_t ptr) {
  std::lock_guard lk(mu_);
  const emu::Allocation* a = dev_.find(ptr, 1);
  if (!a || a->base != ptr)
    throw RtError(MLA_ERROR_INVALID_ARGUMENT, fmt::format("free: 0x{:x} is not an allocation of this device", ptr));
  emu_call("free", [&] { dev_.free(ptr); });
}

void EmulatorBackend::h2d(uint64_t dst, const void* src, size_t n) {
  std::lock_guard lk(mu_);
  if (!dev_.find(dst, n))
    throw RtError(MLA_ERROR_INVALID_ARGUMENT,
                  fmt::format("copy to device: [0x{:x}, +{}) is not inside one allocation", dst, n));
  emu_call("write", [&] { dev_.write(dst, src, n); });
}

void EmulatorBackend::d2h(void* dst, uint64_t src, size_t n) {
  std::lock_guard lk(mu_);
  if (!dev_.find(src, n))
    throw RtError(MLA_ERROR_INVALID_ARGUMENT,
                  fmt::format("copy from device: [0x{:x}, +{}) is not inside one allocation", src, n));
  emu_call("read", [&] { dev_.read(src, dst, n); });
}

void EmulatorBackend::memset(uint64_t dst, int value, size_t n) {
  std::lock_guard lk(mu_);
  emu::Allocation* a = dev_.find(dst, n);
  if (!a)
    throw RtError(MLA_ERROR_INVALID_ARGUMENT, fmt::format("memset: [0x{:x}, +{}) is not inside one allocation", dst, n));
  std::memset(a->data.data() + (dst - a->base), value, n);
}

void EmulatorBackend::ensure_module(const CatalogKernel& k) {
  std::lock_guard lk(mu_);
  if (modules_.count(k.co_path)) return;
  // The runtime's checks first (target, metadata vs catalog), then the emulator's own loader.
  CheckedCode c = load_checked_code(k, target());
  try {
    modules_[k.co_path] = emu::CodeObject::load_bytes(c.bytes, k.co_path);
  } catch (const std::exception& e) {
    throw RtError(MLA_ERROR_CODE_OBJECT, fmt::format("corrupt code object: {}", e.what()));
  }
}

void EmulatorBackend::run(const std::vector<DecodeOp>& ops, void*) {
  for (const auto& op : ops) {
    switch (op.kind) {
      case DecodeOp::H2D: h2d(op.dst, op.host, op.bytes); break;
      case DecodeOp::Memset: memset(op.dst, op.value, op.bytes); break;
      case DecodeOp::Copy2D: {
        std::vector<uint8_t> row(op.width);
        for (size_t i = 0; i < op.height; ++i) {
          d2h(row.data(), op.src + i * op.spitch, op.width);
          h2d(op.dst + i * op.dpitch, row.data(), op.width);
        }
        break;
      }
      case DecodeOp::Launch: {
        ensure_module(*op.kernel);
        std::lock_guard lk(mu_);
        auto co = modules_.at(op.kernel->co_path);
        const emu::Dim3 grid{op.grid.x, op.grid.y, op.grid.z}, block{op.block.x, op.block.y, op.block.z};
        auto dispatch = [&] { return dev_.dispatch(co, op.kernel->name, grid, block, op.kernarg, opts_); };
        emu::Counters c = wrap_ ? emu_call(op.what.c_str(), dispatch) : dispatch();
        if (record_) log_.push_back({op.kernel->name, grid, block, op.kernarg, std::move(c)});
        break;
      }
    }
  }
}

std::vector<EmulatorBackend::Dispatched> EmulatorBackend::take_log() {
  std::lock_guard lk(mu_);
  return std::exchange(log_, {});
}


uint64_t Traffic::needed() const {
  uint64_t n = 0;
  for (const auto& i : items) n += i.needed;
  return n;
}

uint64_t Traffic::read() const {
  uint64_t n = 0;
  for (const auto& i : items) n += i.read;
  return n;
}

nlohmann::json Traffic::to_json() const {
  nlohmann::json j;
  for (const auto& i : items) j[i.buffer] = {{"needed", i.needed}, {"read", i.read}, {"read_distinct", i.read_distinct}};
  j["total"] = {{"needed", needed()}, {"read", read()}, {"read_over_needed", ratio()}};
  return j;
}

nlohmann::json DecodeResult::stats() const {
  nlohmann::json j;
  j["global_read_bytes"] = traffic.to_json();
  uint64_t kv_read = 0;
  for (const auto& i : traffic.items)
    if (i.buffer == "kv") kv_read = i.read;
  j["kv_distinct_bytes"] = kv_distinct_bytes;
  j["kv_read_over_distinct"] = kv_distinct_bytes ? double(kv_read) / double(kv_distinct_bytes) : 0.0;
  j["kernels"] = {{"decode", ran_decode ? decode_kernel : ""},
                  {"prefix", ran_prefix ? prefix_kernel : ""},
                  {"reduce", ran_reduce ? reduce_kernel : ""}};
  j["plan"] = plan.to_json();
  if (ran_decode) j["decode"] = decode.to_json();
  if (ran_prefix) j["prefix"] = prefix.to_json();
  if (ran_reduce) j["reduce"] = reduce.to_json();
  return j;
}

namespace {

// Bytes each buffer must be read at least once by the plan: every unit's tokens (row groups
// each read them), their page ids, its rows of Q, its work unit; the reduce's partials and map;
// the launch headers' fields each launch reads (abi::LaunchHeader: every wave of every workgroup
// of the decode and prefix launches reads entries_offset and ranges_offset, then its workgroup's
// range: 16 bytes; the reduce reads count and entries_offset).
Traffic needed_traffic(const Problem& p, const Plan& plan, uint64_t walk_waves) {
  const uint64_t kvb = elem_bytes(p.kv_dtype), qb = elem_bytes(p.q_dtype);
  const int M = p.heads * p.qseqlen;
  Traffic t;
  uint64_t kv = 0, idx = 0, q = 0;
  auto add = [&](const auto& u, int rows) {
    uint64_t tokens = uint64_t(u.kv_end - u.kv_start);  // sparse: the unmasked ones only
    if (p.sparse)
      for (int t = u.kv_start; t < u.kv_end; ++t) tokens -= p.masked(u.qo_row, t);
    kv += tokens * uint64_t(p.kv_row_elems()) * kvb;
    idx += uint64_t((u.kv_end + p.page_size - 1) / p.page_size - u.kv_start / p.page_size) * 4;
    q += uint64_t(rows) * kQkDim * qb;
  };
  for (const auto& u : plan.units) add(u, std::min(plan.rows_per_group, M - u.row_group * plan.rows_per_group));
  for (const auto& u : plan.prefix_units)
    add(u, std::min(plan.prefix_rows_per_group, u.rows - u.row_group * plan.prefix_rows_per_group));
  // The reduce reads each entry's partial rows once: bf16 ones (the prefix kernel's) 1024 bytes,
  // f32 ones 2048.
  uint64_t partial_rows = 0, partial_o = 0;
  for (const ReduceEntry& e : plan.reduces) {
    partial_rows += uint64_t(e.num_splits) * M;
    partial_o += uint64_t(M) * (uint64_t(e.bf16_splits) * 512 * 2 + uint64_t(e.num_splits - e.bf16_splits) * 512 * 4);
  }
  t.items = {{"kv", kv}, {"kv_indices", idx}, {"q", q},
             {"work", (plan.units.size() + plan.prefix_units.size()) * sizeof(WorkUnit) + 16 * walk_waves},
             {"reduce_map", plan.reduces.size() * sizeof(ReduceEntry) + 8}, {"partial_o", partial_o},
             {"partial_lse", partial_rows * 4}};
  return t;
}

void add_measured(Traffic& t, const emu::Counters& c) {
  for (const auto& b : c.buffers)
    for (auto& i : t.items)
      if (i.buffer == b.name) {
        i.read += b.read;
        i.read_distinct += b.read_distinct;
      }
}

}  // namespace

// Runs through the runtime's emulator backend with the decode operations the C API and the HIP
// backend use (plan tables, kernarg packing by name, launch order): what runs here is what a GPU
// launch would send. Each table gets its own allocation so that the emulator's bounds checks see
// any read past its end.
DecodeResult run_decode_on_emulator(const Problem& p, const Selection& sel, const EmulatorRunOptions& opts) {
  validate_problem(p);
  const emu::Gfx gfx = p.target == Target::gfx942 ? emu::Gfx::gfx942 : emu::Gfx::gfx950;
  EmulatorBackend be(gfx, opts.dispatch);
  be.set_recording(true);
  be.set_wrap_errors(false);  // a kernel fault stays an emu::Error (rule, pc) for C++ callers
  // Loads both code objects and checks target and argument metadata against the catalog.
  be.ensure_module(sel.decode);
  be.ensure_module(sel.reduce);
  if (sel.prefix) be.ensure_module(*sel.prefix);
  const SelectedKernels k = selected_kernels(sel, shape_of(p));

  DecodeResult r;
  r.decode_kernel = sel.decode.name;
  r.prefix_kernel = sel.prefix ? sel.prefix->name : "";
  r.reduce_kernel = sel.reduce.name;
  PlanInputs in = plan_inputs_for(k, kv_lens_of(p), opts.num_cus ? opts.num_cus : be.num_cus(), opts.workgroups_per_cu);
  // Shared prefixes, from the problem's page table (docs/shared-prefix.md); none in sparse attention.
  if (!p.sparse)
    in.prefix_groups = detect_prefix_groups(in.kv_lens, p.page_size, p.qseqlen, in.tile_tokens,
                                          [&](int b, int i) { return p.kv_indices[size_t(p.kv_indptr[b] + i)]; });
  in.cascade = opts.cascade;
  in.merge_in_launch = opts.merge_in_launch;
  r.plan = plan_decode(in);
  const Plan& plan = r.plan;
  {
    std::set<std::pair<int32_t, int>> entries;  // (page id, token in page)
    for (int b = 0; b < p.batch(); ++b)
      for (int t = 0; t < p.kv_len(b); ++t)
        if (!p.masked(b, t))
          entries.emplace(p.kv_indices[size_t(p.kv_indptr[b] + t / p.page_size)], t % p.page_size);
    r.kv_distinct_bytes = entries.size() * uint64_t(p.kv_row_elems()) * elem_bytes(p.kv_dtype);
  }

  auto upload = [&](const void* data, size_t bytes, const char* name) {
    uint64_t a = be.alloc_named(std::max<size_t>(4, bytes), name, 0);
    if (bytes) be.h2d(a, data, bytes);
    return a;
  };
  DeviceTensors t;
  t.q = upload(p.q.bytes.data(), p.q.bytes.size(), "q");
  t.kv = upload(p.kv.bytes.data(), p.kv.bytes.size(), "kv");
  t.kv_indices = upload(p.kv_indices.data(), p.kv_indices.size() * 4, "kv_indices");
  const size_t o_bytes = size_t(p.rows()) * p.heads * 512 * 2;
  t.o = be.alloc_named(o_bytes, "o", 0xff);  // poison: unwritten elements stay 0xFFFF
  t.lse = p.return_lse ? be.alloc_named(size_t(p.rows()) * p.heads * 4, "lse", 0xff) : 0;
  t.sm_scale = float(p.sm_scale);
  t.logit_cap = float(p.logit_cap);
  t.kv_slots = uint32_t(p.num_pages() * p.page_size);
  WorkspaceLayout ws = workspace_layout_for(k, plan, p.batch());
  // The step tables (pack_step_tables' layout), split so that each table has an allocation of
  // its own: the scales, the decode and prefix headers with the units, the reduce header with
  // the reduce map.
  std::vector<uint8_t> tables(ws.tables_bytes);
  const size_t used = pack_step_tables(plan, float(p.q_scale), float(p.kv_scale), ws, tables.data());
  namespace S = step_tables;
  const size_t units_bytes = (plan.units.size() + plan.prefix_units.size()) * sizeof(WorkUnit);
  const size_t reduce_bytes = plan.reduces.size() * sizeof(ReduceEntry);
  if (used != S::entries + units_bytes + reduce_bytes + 4 * (size_t(ws.decode_grid) + ws.prefix_grid + 2))
    throw RtError(MLA_ERROR_INTERNAL, "step tables: size mismatch");
  if (opts.persistent_grid > 0) {
    ws.decode_grid = std::min(ws.decode_grid, unsigned(opts.persistent_grid));
    if (ws.prefix_grid) ws.prefix_grid = ws.decode_grid;
  }
  const size_t ranges_bytes = 4 * (size_t(ws.decode_grid) + ws.prefix_grid + 2);
  // In-launch merge: the merge entries and the (zeroed) counters follow the units in the same
  // allocation, since the kernel finds them by offsets from its header; the workgroup ranges last.
  const size_t counters_bytes = plan.merge_in_launch ? size_t(p.batch()) * merge_blocks_per_request(k) * 4 : 0;
  const size_t ranges_at = 64 + units_bytes + (plan.merge_in_launch ? reduce_bytes + counters_bytes : 0);
  std::vector<uint8_t> work(ranges_at + ranges_bytes), reduce(32 + reduce_bytes);
  const int64_t merge_at = plan.merge_in_launch ? int64_t(64 + units_bytes) : 0;
  write_launch_header(work.data(), plan.units.size(), 64, ws.decode_grid, merge_at,
                      plan.merge_in_launch ? merge_at + int64_t(reduce_bytes) : 0, ranges_at);
  write_launch_header(work.data() + 32, plan.prefix_units.size(), 32 + plan.units.size() * sizeof(WorkUnit),
                      std::max(1u, ws.prefix_grid), 0, 0, ranges_at + 4 * (size_t(ws.decode_grid) + 1) - 32);
  std::memcpy(work.data() + 64, tables.data() + S::entries, units_bytes);
  if (plan.merge_in_launch) std::memcpy(work.data() + merge_at, tables.data() + S::entries + units_bytes, reduce_bytes);
  // A narrower persistent grid (opts.persistent_grid) takes the planned workgroups' runs in
  // contiguous groups: workgroup x runs those of [x S / grid, (x + 1) S / grid).
  auto put_ranges = [&](const std::vector<int32_t>& r, unsigned grid, size_t at) {
    for (size_t x = 0; grid > 0 && x <= grid && !r.empty(); ++x) {
      const int32_t v = r[x * (r.size() - 1) / grid];
      std::memcpy(work.data() + at + 4 * x, &v, 4);
    }
  };
  put_ranges(plan.unit_ranges, ws.decode_grid, ranges_at);
  put_ranges(plan.prefix_unit_ranges, ws.prefix_grid, ranges_at + 4 * (size_t(ws.decode_grid) + 1));
  write_launch_header(reduce.data(), plan.reduces.size(), 32, ws.reduce_grid);
  std::memcpy(reduce.data() + 32, tables.data() + S::entries + units_bytes, reduce_bytes);
  const uint64_t work_at = upload(work.data(), work.size(), "work"), reduce_at = upload(reduce.data(), reduce.size(), "reduce_map");
  WorkspaceAddrs wa;
  wa.scales = upload(tables.data() + S::scales, 8, "scales");
  t.q_scale = wa.scales;
  t.kv_scale = wa.scales + 4;
  wa.decode_header = work_at;
  wa.prefix_header = work_at + 32;
  wa.reduce_header = reduce_at;
  if (plan.num_partials) {
    wa.partial_o = be.alloc_named(plan.partial_o_bytes(), "partial_o", 0xff);
    wa.partial_lse = be.alloc_named(plan.partial_lse_bytes(), "partial_lse", 0xff);
  }
  if (k.padded()) {
    wa.q_pad = be.alloc_named(ws.q_pad_bytes, "q_pad", 0);  // padding rows and heads stay 0
    wa.o_pad = be.alloc_named(ws.o_pad_bytes, "o_pad", 0xff);
    if (ws.lse_pad_bytes) wa.lse_pad = be.alloc_named(ws.lse_pad_bytes, "lse_pad", 0xff);
  }
  be.run(decode_ops(k, ws, p.batch(), t, wa), nullptr);
  // Every wave of each persistent launch's grid reads its header and range, whatever its work.
  const uint64_t walk_waves = uint64_t(ws.decode_grid) * ((sel.decode.workgroup_size + 63) / 64) +
                              (sel.prefix ? uint64_t(ws.prefix_grid) * ((sel.prefix->workgroup_size + 63) / 64) : 0);
  r.traffic = needed_traffic(p, plan, walk_waves);
  for (auto& d : be.take_log()) {
    add_measured(r.traffic, d.counters);
    if (d.kernel == sel.decode.name) r.decode = std::move(d.counters);
    else if (sel.prefix && d.kernel == sel.prefix->name) r.prefix = std::move(d.counters);
    else if (d.kernel == sel.reduce.name) r.reduce = std::move(d.counters);
  }
  // Every launch runs on its capacity grid; a launch "ran" when its step had work for it (the
  // others' workgroups only read their header and exit).
  r.ran_decode = !plan.units.empty();
  r.ran_prefix = !plan.prefix_units.empty();
  r.ran_reduce = !plan.reduces.empty() && !plan.merge_in_launch;
  r.o.resize(o_bytes / 2);
  be.d2h(r.o.data(), t.o, o_bytes);
  if (p.return_lse) {
    r.lse.resize(size_t(p.rows()) * p.heads);
    be.d2h(r.lse.data(), t.lse, r.lse.size() * 4);
  }
  return r;
}

}  // namespace mla::rt

namespace mla::rt {

// Linked in (tools, tests, the plugin itself): the backend directly.
std::unique_ptr<Backend> make_emulator_backend(const std::string& target) {
  auto g = emu::parse_gfx(target);
  if (!g) throw RtError(MLA_ERROR_INVALID_ARGUMENT, fmt::format("emulator target '{}' (allowed: gfx942, gfx950)", target));
  return std::make_unique<EmulatorBackend>(*g);
}

}  // namespace mla::rt
