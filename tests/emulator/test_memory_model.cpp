// The memory model across XCDs (check_memory_model, docs/emulator.md "Memory model"): foreign
// code compiled by clang-22 from OpenCL C 2.0 with memory_scope_device atomics (LLVM places the
// agent-scope release `buffer_wbl2 sc1; s_waitcnt vmcnt(0)` and acquire `s_waitcnt vmcnt(0);
// buffer_inv sc1`, AMDGPUUsage "Memory Model GFX942") runs clean under every workgroup order;
// broken twins with one of those lines deleted from the assembly are flagged, naming the
// writer's and the reader's pc.
#include <catch2/catch.hpp>

#include <numeric>
#include <sstream>

#include "emu_test_util.h"
#include "emulator/program.h"

using namespace mla::emu;
using namespace emutest;

namespace {

// Each workgroup (two waves) writes its partial row; one lane counts the workgroup in with an
// acq_rel device-scope fetch_add; the workgroup that arrives last sums every partial.
const char* kLastArriving = R"(
__kernel void lastwg(__global float* part, __global atomic_uint* cnt, __global float* out, uint ngroups) {
  __local uint last;
  uint lid = __builtin_amdgcn_workitem_id_x();
  uint g = __builtin_amdgcn_workgroup_id_x();
  part[g * 128 + lid] = (float)(g * 128 + lid) * 0.5f + 1.0f;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  if (lid == 0) {
    uint old = __opencl_atomic_fetch_add(cnt, 1u, __ATOMIC_ACQ_REL, __OPENCL_MEMORY_SCOPE_DEVICE);
    last = old == ngroups - 1;
  }
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  if (last) {
    float s = 0;
    for (uint i = 0; i < ngroups; ++i) s += part[i * 128 + lid];
    out[lid] = s;
  }
}
)";

// Workgroup 0 writes data and publishes per-lane flags with a device-scope release store; the
// others load the flag with a device-scope acquire and read the data when it is set.
const char* kFlag = R"(
__kernel void flag(__global int* data, __global atomic_int* flags, __global int* out) {
  uint lid = __builtin_amdgcn_workitem_id_x();
  uint g = __builtin_amdgcn_workgroup_id_x();
  if (g == 0) {
    data[lid] = lid * 3 + 1;
    __opencl_atomic_store(&flags[lid], 1, __ATOMIC_RELEASE, __OPENCL_MEMORY_SCOPE_DEVICE);
  } else {
    int f = __opencl_atomic_load(&flags[lid], __ATOMIC_ACQUIRE, __OPENCL_MEMORY_SCOPE_DEVICE);
    out[g * 64 + lid] = f ? data[lid] : -1;
  }
}
)";

// Two launches without any fence: the kernel boundary is the release and the acquire.
const char* kTwoLaunches = R"(
__kernel void write_parts(__global float* part) {
  uint lid = __builtin_amdgcn_workitem_id_x();
  uint g = __builtin_amdgcn_workgroup_id_x();
  part[g * 64 + lid] = (float)(g + lid);
}
__kernel void sum_parts(__global const float* part, __global float* out, uint ngroups) {
  uint lid = __builtin_amdgcn_workitem_id_x();
  float s = 0;
  for (uint i = 0; i < ngroups; ++i) s += part[i * 64 + lid];
  out[lid] = s;
}
)";

std::string drop_lines(std::string s, const std::string& line) {
  size_t n = 0;
  for (size_t p; (p = s.find("\n" + line + "\n")) != std::string::npos; ++n) s.erase(p, line.size() + 1);
  if (n == 0) throw std::runtime_error("no line `" + line + "` to delete");
  return s;
}

struct Insn {
  uint64_t pc;
  std::string text;
};
// The kernel's instructions from its symbol on (clang's __clang_ocl_kern_imp_* copy may follow
// without a symbol the disassembler reports: callers take the first match).
std::vector<Insn> kernel_insts(const CodeObject& co, const std::string& kernel) {
  std::vector<Insn> v;
  bool in = false;
  for (auto& l : disassemble(co)) {
    if (!l.symbol.empty()) in = l.symbol == kernel;
    if (in && !l.text.empty()) v.push_back({l.address, l.text});
  }
  return v;
}
bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool has_sc1(const std::string& s) { return s.find(" sc1") != std::string::npos; }

// An order of the linear workgroup ids that ends with `last`.
std::vector<uint32_t> order_ending_with(unsigned n, unsigned last) {
  std::vector<uint32_t> o;
  for (unsigned i = 0; i < n; ++i)
    if (i != last) o.push_back(i);
  o.push_back(last);
  return o;
}

constexpr unsigned kGroups = 12;  // 8 XCDs: workgroups 0-3 share an XCD with 8-11

struct LastRun {
  std::vector<float> out;
  uint32_t cnt;
  Counters c;
};
LastRun run_last(std::shared_ptr<const CodeObject> co, Gfx g, const DispatchOptions& opt) {
  Device dev(g);
  uint64_t part = dev.alloc(kGroups * 128 * 4, 256, "part", 0xff), cnt = dev.alloc(4, 256, "cnt", 0), out = dev.alloc(128 * 4, 256, "out", 0xff);
  KernargBuilder kb;
  kb.put<uint64_t>(0, part).put<uint64_t>(8, cnt).put<uint64_t>(16, out).put<uint32_t>(24, kGroups);
  LastRun r;
  r.c = dev.dispatch(co, "lastwg", {kGroups, 1, 1}, {128, 1, 1}, kb.bytes, opt);
  r.out = dev.read_vector<float>(out, 128);
  r.cnt = dev.read_vector<uint32_t>(cnt, 1)[0];
  return r;
}

}  // namespace

TEST_CASE("memory model: last-arriving workgroup (clang-22 acq_rel fetch_add) is clean whichever workgroup arrives last", "[memory_model]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    std::string s = compile_cl_asm(kLastArriving, g, std::string("mm_last_") + gfx_name(g).data());
    // LLVM's agent-scope acq_rel atomicrmw sequence is present (AMDGPUUsage, GFX942 table).
    REQUIRE(s.find("\tbuffer_wbl2 sc1\n") != std::string::npos);
    REQUIRE(s.find("\tbuffer_inv sc1\n") != std::string::npos);
    auto co = assemble(s, g, std::string("mm_last_") + gfx_name(g).data());
    for (unsigned last = 0; last < kGroups; ++last) {
      DispatchOptions opt;
      opt.workgroup_order = order_ending_with(kGroups, last);
      LastRun r = run_last(co, g, opt);
      CHECK(r.cnt == kGroups);
      for (unsigned l = 0; l < 128; ++l) {
        double e = 0;
        for (unsigned i = 0; i < kGroups; ++i) e += (i * 128 + l) * 0.5 + 1.0;
        REQUIRE(r.out[l] == float(e));
      }
    }
    DispatchOptions opt;
    opt.workgroup_order_seed = 12345;
    CHECK_NOTHROW(run_last(co, g, opt));
  }
}

TEST_CASE("memory model: last-arriving workgroup without buffer_wbl2 (no release) is flagged naming writer and reader pcs", "[memory_model]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    std::string name = std::string("mm_last_nowb_") + gfx_name(g).data();
    auto co = assemble(drop_lines(compile_cl_asm(kLastArriving, g, name), "\tbuffer_wbl2 sc1"), g, name);
    auto ins = kernel_insts(*co, "lastwg");
    uint64_t store_pc = 0, load_pc = 0;
    for (auto& i : ins) {
      if (!store_pc && starts(i.text, "global_store_dword")) store_pc = i.pc;  // the partial
      if (!load_pc && starts(i.text, "global_load_dword")) load_pc = i.pc;  // the first: the kernel's own code
    }
    REQUIRE(store_pc);
    REQUIRE(load_pc);
    for (unsigned last = 0; last < kGroups; ++last) {
      DispatchOptions opt;
      opt.workgroup_order = order_ending_with(kGroups, last);
      try {
        run_last(co, g, opt);
        FAIL("no memory_model error with workgroup " << last << " last");
      } catch (const Error& e) {
        std::string m = e.what();
        INFO(m);
        REQUIRE(e.rule == "memory_model");
        CHECK(m.find(fmt::format("workgroup ({},0,0)", last)) != std::string::npos);
        CHECK(m.find(fmt::format("pc 0x{:x} ", load_pc)) != std::string::npos);
        CHECK(m.find(fmt::format("at pc 0x{:x} ", store_pc)) != std::string::npos);
        CHECK(m.find("did not release") != std::string::npos);
      }
    }
  }
}

TEST_CASE("memory model: last-arriving workgroup without buffer_inv (no acquire) is flagged naming writer and reader pcs", "[memory_model]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    std::string name = std::string("mm_last_noinv_") + gfx_name(g).data();
    auto co = assemble(drop_lines(compile_cl_asm(kLastArriving, g, name), "\tbuffer_inv sc1"), g, name);
    auto ins = kernel_insts(*co, "lastwg");
    uint64_t store_pc = 0, load_pc = 0;
    for (auto& i : ins) {
      if (!store_pc && starts(i.text, "global_store_dword")) store_pc = i.pc;
      if (!load_pc && starts(i.text, "global_load_dword")) load_pc = i.pc;  // the first: the kernel's own code
    }
    for (unsigned last : {0u, 5u, 11u}) {
      DispatchOptions opt;
      opt.workgroup_order = order_ending_with(kGroups, last);
      try {
        run_last(co, g, opt);
        FAIL("no memory_model error with workgroup " << last << " last");
      } catch (const Error& e) {
        std::string m = e.what();
        INFO(m);
        REQUIRE(e.rule == "memory_model");
        CHECK(m.find(fmt::format("pc 0x{:x} ", load_pc)) != std::string::npos);
        CHECK(m.find(fmt::format("at pc 0x{:x} ", store_pc)) != std::string::npos);
        CHECK(m.find("did not acquire") != std::string::npos);
      }
    }
    // Random orders: the last one to arrive always reads another XCD's partial.
    for (uint64_t seed : {1, 2, 3}) {
      DispatchOptions opt;
      opt.workgroup_order_seed = seed;
      CHECK_THROWS_WITH(run_last(co, g, opt), Catch::Contains("memory_model"));
    }
  }
}

TEST_CASE("memory model: one XCD is coherent, the switch turns the rule off, relaxed mode records it", "[memory_model]") {
  const Gfx g = Gfx::gfx942;
  std::string name = "mm_last_noinv_relaxed";
  auto co = assemble(drop_lines(compile_cl_asm(kLastArriving, g, name), "\tbuffer_inv sc1"), g, name);
  double e0 = 0;
  for (unsigned i = 0; i < kGroups; ++i) e0 += i * 128 * 0.5 + 1.0;
  {
    DispatchOptions opt;
    opt.num_xcds = 1;  // every workgroup on one L2
    LastRun r = run_last(co, g, opt);
    CHECK(r.out[0] == float(e0));
    CHECK(r.c.findings.empty());
  }
  {
    DispatchOptions opt;
    opt.check_memory_model = false;
    CHECK_NOTHROW(run_last(co, g, opt));
  }
  {
    DispatchOptions opt;
    opt.relaxed = true;
    std::ostringstream warn;
    opt.warnings = &warn;
    LastRun r = run_last(co, g, opt);
    REQUIRE(r.c.findings.size() == 1);
    CHECK(r.c.findings[0].rule == "memory_model");
    CHECK(r.c.findings[0].count >= 1);
    CHECK(warn.str().find("[memory_model]") != std::string::npos);
    CHECK(r.out[0] == float(e0));  // the emulator's one memory: the written values
  }
}

TEST_CASE("memory model: release store / acquire load of a flag (clang-22) and their broken twins", "[memory_model]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    std::string src = compile_cl_asm(kFlag, g, std::string("mm_flag_") + gfx_name(g).data());
    auto run = [&](std::shared_ptr<const CodeObject> co, bool writer_first) {
      Device dev(g);
      uint64_t data = dev.alloc(256, 256, "data", 0xee), flags = dev.alloc(256, 256, "flags", 0), out = dev.alloc(10 * 256, 256, "out", 0xee);
      KernargBuilder kb;
      kb.put<uint64_t>(0, data).put<uint64_t>(8, flags).put<uint64_t>(16, out);
      DispatchOptions opt;
      opt.workgroup_order.resize(10);
      std::iota(opt.workgroup_order.begin(), opt.workgroup_order.end(), 0u);
      if (!writer_first) std::reverse(opt.workgroup_order.begin(), opt.workgroup_order.end());
      dev.dispatch(co, "flag", {10, 1, 1}, {64, 1, 1}, kb.bytes, opt);
      return dev.read_vector<int32_t>(out, 10 * 64);
    };
    auto co = assemble(src, g, std::string("mm_flag_") + gfx_name(g).data());
    auto o = run(co, true);
    for (unsigned wg = 1; wg < 10; ++wg)
      for (unsigned l = 0; l < 64; ++l) REQUIRE(o[wg * 64 + l] == int32_t(l * 3 + 1));
    o = run(co, false);  // the readers ran first: no flag, no data read
    for (unsigned wg = 1; wg < 10; ++wg) REQUIRE(o[wg * 64 + 5] == -1);

    auto ins = kernel_insts(*co, "flag");
    uint64_t data_store = 0, data_load = 0;
    for (auto& i : ins) {
      if (starts(i.text, "global_store_dword") && !has_sc1(i.text) && !data_store) {
        // the data store is the plain store that the flag's sc1 store follows
        bool before_flag = false;
        for (auto& j : ins)
          if (j.pc > i.pc && j.pc <= i.pc + 24 && starts(j.text, "global_store_dword") && has_sc1(j.text)) before_flag = true;
        if (before_flag) data_store = i.pc;
      }
      if (!data_load && starts(i.text, "global_load_dword") && !has_sc1(i.text)) data_load = i.pc;
    }
    REQUIRE(data_store);
    REQUIRE(data_load);
    for (const char* line : {"\tbuffer_wbl2 sc1", "\tbuffer_inv sc1"}) {
      std::string name = std::string("mm_flag_broken_") + (line[8] == 'w' ? "wb_" : "inv_") + gfx_name(g).data();
      auto bad = assemble(drop_lines(src, line), g, name);
      auto bins = kernel_insts(*bad, "flag");
      // Deleting a line before them moves the pcs: recompute from the broken code object.
      uint64_t bstore = 0, bload = 0;
      for (auto& i : bins) {
        if (!bstore && starts(i.text, "global_store_dword") && !has_sc1(i.text))
          for (auto& j : bins)
            if (j.pc > i.pc && j.pc <= i.pc + 24 && starts(j.text, "global_store_dword") && has_sc1(j.text)) bstore = i.pc;
        if (!bload && starts(i.text, "global_load_dword") && !has_sc1(i.text)) bload = i.pc;
      }
      try {
        run(bad, true);
        FAIL("broken twin without `" << line << "` ran clean");
      } catch (const Error& e) {
        std::string m = e.what();
        INFO(m);
        REQUIRE(e.rule == "memory_model");
        CHECK(m.find(fmt::format("pc 0x{:x} ", bload)) != std::string::npos);
        CHECK(m.find(fmt::format("at pc 0x{:x} ", bstore)) != std::string::npos);
        CHECK(m.find(line[8] == 'w' ? "did not release" : "did not acquire") != std::string::npos);
      }
      // The rule judges the reads that happen: readers first read no data.
      CHECK_NOTHROW(run(bad, false));
    }
  }
}

TEST_CASE("memory model: a kernel boundary releases and acquires (data of an earlier launch is never flagged)", "[memory_model]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    auto co = CodeObject::load_file(compile_cl(kTwoLaunches, g, std::string("mm_two_") + gfx_name(g).data()));
    Device dev(g);
    uint64_t part = dev.alloc(kGroups * 64 * 4, 256, "part", 0xff), out = dev.alloc(256, 256, "out", 0xff);
    KernargBuilder k1, k2;
    k1.put<uint64_t>(0, part);
    k2.put<uint64_t>(0, part).put<uint64_t>(8, out).put<uint32_t>(16, kGroups);
    dev.dispatch(co, "write_parts", {kGroups, 1, 1}, {64, 1, 1}, k1.bytes);
    DispatchOptions opt;
    opt.workgroup_order_seed = 7;
    dev.dispatch(co, "sum_parts", {1, 1, 1}, {64, 1, 1}, k2.bytes, opt);
    auto o = dev.read_vector<float>(out, 64);
    for (unsigned l = 0; l < 64; ++l) {
      float e = 0;
      for (unsigned i = 0; i < kGroups; ++i) e += float(i + l);
      REQUIRE(o[l] == e);
    }
  }
}

TEST_CASE("memory model: workgroup_order must be a permutation of the linear workgroup ids", "[memory_model]") {
  auto co = CodeObject::load_file(compile_cl(kTwoLaunches, Gfx::gfx942, "mm_order"));
  Device dev(Gfx::gfx942);
  uint64_t part = dev.alloc(4 * 64 * 4);
  KernargBuilder kb;
  kb.put<uint64_t>(0, part);
  for (std::vector<uint32_t> bad : {std::vector<uint32_t>{0, 1, 2}, {0, 1, 1, 3}, {0, 1, 2, 4}}) {
    DispatchOptions opt;
    opt.workgroup_order = bad;
    CHECK_THROWS_WITH(dev.dispatch(co, "write_parts", {4, 1, 1}, {64, 1, 1}, kb.bytes, opt), Catch::Contains("workgroup_order"));
  }
  DispatchOptions opt;
  opt.workgroup_order = {3, 1, 0, 2};
  opt.per_workgroup = true;
  Counters c = dev.dispatch(co, "write_parts", {4, 1, 1}, {64, 1, 1}, kb.bytes, opt);
  REQUIRE(c.per_workgroup.size() == 4);
  CHECK(c.per_workgroup[0].id[0] == 3);  // in execution order
  CHECK(c.per_workgroup[3].id[0] == 2);
}

// The cache-control bits, one at a time (AMDGPUUsage "Memory Model GFX942", docs/emulator.md
// table): workgroup 0 (XCD 0) stores and maybe writes back, workgroup 1 (XCD 1) maybe
// invalidates and loads the same bytes.
TEST_CASE("memory model: sc0 / sc1 / nt of stores, loads, buffer_wbl2 and buffer_inv", "[memory_model]") {
  struct Case {
    const char *st, *wb, *inv, *ld;
    const char* flagged;  // nullptr = clean, else the phrase of the message
  };
  const Case cases[] = {
      {"", "", "", "", "did not release"},
      {"", "buffer_wbl2 sc1", "buffer_inv sc1", "", nullptr},            // LLVM's agent release / acquire
      {"", "buffer_wbl2 sc0 sc1", "buffer_inv sc0 sc1", "", nullptr},    // system scope
      {"", "buffer_wbl2 sc0", "buffer_inv sc1", "", "did not release"},  // workgroup scope: L1 only
      {"", "buffer_wbl2", "buffer_inv sc1", "", "did not release"},      // wave scope (the table's reading)
      {"", "buffer_wbl2 sc1", "buffer_inv sc0", "", "did not acquire"},
      {"", "buffer_wbl2 sc1", "", "", "did not acquire"},
      {"", "buffer_wbl2 sc1", "", " sc1", nullptr},                       // agent-scope load: coherent
      {"", "", "buffer_inv sc1", " sc1", "did not release"},              // a coherent load cannot fetch what was not written back
      {" sc1", "", "buffer_inv sc1", "", nullptr},                        // agent-scope store: in memory
      {" sc1", "", "", "", "did not acquire"},
      {" sc0 sc1", "", "", " sc0 sc1", nullptr},                          // volatile / system-scope pair
      {" nt", "", "buffer_inv sc1", "", "did not release"},               // nt is a streaming hint
      {" sc0", "", "buffer_inv sc1", "", "did not release"},
      {"", "buffer_wbl2 sc1", "buffer_inv sc1", " nt", nullptr},
  };
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    int k = 0;
    for (const Case& c : cases) {
      std::string body = fmt::format(R"(
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32_e32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  s_cmp_eq_u32 s2, 0
  s_cbranch_scc0 .Lreader
  global_store_dword v1, v0, s[4:5]{}
  {}
  s_waitcnt vmcnt(0)
  s_endpgm
.Lreader:
  {}
  global_load_dword v2, v1, s[4:5]{}
  s_waitcnt vmcnt(0)
  s_endpgm
)", c.st, c.wb, c.inv, c.ld);
      std::string name = fmt::format("mm_bits_{}_{}", k++, gfx_name(g));
      auto co = assemble(kernel_src(name, g, body), g, name);
      Device dev(g);
      uint64_t buf = dev.alloc(256, 256, "buf", 0xcd);
      KernargBuilder kb;
      kb.put<uint64_t>(0, buf);
      INFO(std::string(gfx_name(g)));
      INFO("store`" << c.st << "` `" << c.wb << "` `" << c.inv << "` load`" << c.ld << "`");
      if (!c.flagged) {
        CHECK_NOTHROW(dev.dispatch(co, name, {2, 1, 1}, {64, 1, 1}, kb.bytes));
      } else {
        CHECK_THROWS_WITH(dev.dispatch(co, name, {2, 1, 1}, {64, 1, 1}, kb.bytes), Catch::Contains(c.flagged));
        DispatchOptions reversed;  // the reader first: it reads the old bytes, nothing to flag
        reversed.workgroup_order = {1, 0};
        CHECK_NOTHROW(dev.dispatch(co, name, {2, 1, 1}, {64, 1, 1}, kb.bytes, reversed));
      }
    }
  }
}
