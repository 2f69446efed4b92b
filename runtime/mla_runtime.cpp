// The C API of mla_runtime.h over the C++ runtime (catalog, planner, backends).
#include "runtime/mla_runtime.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include "runtime/backend.h"
#include "runtime/catalog.h"
#include "runtime/mla_runtime_internal.h"
#include "runtime/planner.h"
#include "runtime/problem.h"

using namespace mla::rt;

struct mla_device {
  std::unique_ptr<Backend> be;
};

struct mla_context {
  mla_device* dev = nullptr;
  Catalog cat;
  bool validate = false, record = false;
  int num_cus = 0, wpc = 0;  // wpc 0: the decode kernel's resident workgroups per CU
  CascadePolicy cascade = CascadePolicy::cost_model;
  bool merge_in_launch = false;  // MLA_OPTION_MERGE 1
  int planned_cus() const { return num_cus > 0 ? num_cus : dev->be->num_cus(); }
};

struct mla_plan {
  SelectedKernels k;
  int max_batch = 0;
  int64_t max_tokens = 0;
  int num_cus = 0, wpc = 0;
  WorkspaceLayout ws;
  Plan plan, next;     // the batch's plan; the next update's, swapped in when it succeeds
  PlanScratch scratch;  // the planner's working storage, kept across updates
  PlanInputs inputs;    // the kernels' and the device's side, computed once (plan_inputs_for)
  std::vector<PrefixGroup> groups;  // the update's caller-given or detected groups
  int batch = 0;
  int32_t bt_stride = 0;
  std::vector<int> kv_lens, next_lens;  // the batch's; the next update's while it is checked
  int64_t table_entries = 0;  // page-table entries the plan reads: [0, table_entries)
  std::string json;           // mla_plan_describe_json's text of the current plan (lazily)
  // The step tables as the next upload copies them (pack_step_tables), in memory the plan owns:
  // page-locked on HIP. Written by each update; the upload writes its two scales into it.
  Backend* be = nullptr;
  uint8_t* tables = nullptr;
  size_t tables_used = 0;
  uint64_t updates = 0;           // mla_plan_update calls that succeeded
  // The last upload: which update it copied, into which workspace, with which host scales.
  uint64_t uploaded_update = 0;   // 0: none yet
  uint64_t uploaded_ws = 0;
  float uploaded_q_scale = 0, uploaded_kv_scale = 0;
  uint64_t zeroed_ws = 0;         // padded selections: the workspace whose padding rows are zeroed
  uint64_t counters_ws = 0;       // in-launch merge: the workspace whose counters are zeroed
  bool merge_in_launch = false;   // MLA_OPTION_MERGE at creation
  std::vector<DecodeOp> upload_ops;  // mla_plan_upload's operations (storage kept across steps)
  ~mla_plan() {
    if (tables) be->host_free(tables);
  }
};

static_assert(sizeof(mla_work_unit) == sizeof(WorkUnit), "mla_work_unit mirrors WorkUnit");
static_assert(sizeof(mla_reduce_entry) == sizeof(ReduceEntry) &&
                  offsetof(mla_reduce_entry, bf16_splits) == offsetof(ReduceEntry, bf16_splits),
              "mla_reduce_entry mirrors ReduceEntry");
static_assert(sizeof(mla_prefix_unit) == sizeof(mla::abi::PrefixUnit) && offsetof(mla_prefix_unit, rows) == offsetof(mla::abi::PrefixUnit, rows) &&
                  offsetof(mla_prefix_unit, first_request) == offsetof(mla::abi::PrefixUnit, first_request),
              "mla_prefix_unit mirrors mla::abi::PrefixUnit");

namespace {

thread_local std::string g_error;

mla_status fail(mla_status s, const std::string& msg) {
  g_error = msg;
  return s;
}

template <class F>
mla_status guard(F&& f) {
  try {
    f();
    return MLA_SUCCESS;
  } catch (const RtError& e) {
    return fail(e.status, e.what());
  } catch (const CatalogError& e) {
    return fail(MLA_ERROR_CATALOG, e.what());
  } catch (const ProblemError& e) {
    return fail(MLA_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::invalid_argument& e) {
    return fail(MLA_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(MLA_ERROR_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return fail(MLA_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(MLA_ERROR_INTERNAL, "unknown exception");
  }
}

[[noreturn]] void bad(const std::string& msg) { throw RtError(MLA_ERROR_INVALID_ARGUMENT, msg); }

template <class T>
void need(const T* p, const char* what) {
  if (!p) bad(fmt::format("{} is NULL", what));
}

// The int a caller stored in an enum argument or field, read as its bits. A C enum may hold any
// int, negative ones too, and loading a value outside the enumerators' range (0..0x7fffffff here)
// through the C++ enum type is undefined behaviour (fuzz finding, issue #15): every caller enum is
// read with this before it is compared.
template <class E>
int32_t enum_bits(const E& e) {
  static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int32_t));
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

DType dtype_of(const mla_dtype& d, const char* field) {
  const int32_t v = enum_bits(d);
  if (v == MLA_DTYPE_FP8) return DType::fp8;
  if (v == MLA_DTYPE_BF16) return DType::bf16;
  bad(fmt::format("{} = {} is not a dtype (allowed: MLA_DTYPE_FP8, MLA_DTYPE_BF16)", field, v));
}

void copy_str(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}

Target device_target(const mla_context* ctx) {
  std::string t = ctx->dev->be->target();
  if (t == "gfx942") return Target::gfx942;
  if (t == "gfx950") return Target::gfx950;
  throw RtError(MLA_ERROR_NO_KERNEL,
                fmt::format("the device is {}; kernels exist for gfx942 and gfx950 only", t));
}

DecodeShape to_shape(const mla_context* ctx, const mla_shape& s) {
  DecodeShape d;
  d.q_dtype = dtype_of(s.q_dtype, "shape.q_dtype");
  d.kv_dtype = dtype_of(s.kv_dtype, "shape.kv_dtype");
  if (s.heads < 1 || s.heads > 1024) bad(fmt::format("shape.heads = {} (allowed: 1..1024)", s.heads));
  if (s.qseqlen < 1 || s.qseqlen > 64) bad(fmt::format("shape.qseqlen = {} (allowed: 1..64)", s.qseqlen));
  if (s.page_size < 1 || s.page_size > 256 || (s.page_size & (s.page_size - 1)))
    bad(fmt::format("shape.page_size = {} (allowed: 1 or a power of two up to 256)", s.page_size));
  if (s.return_lse != 0 && s.return_lse != 1) bad(fmt::format("shape.return_lse = {} (allowed: 0, 1)", s.return_lse));
  if (s.logit_cap != 0 && s.logit_cap != 1) bad(fmt::format("shape.logit_cap = {} (allowed: 0, 1)", s.logit_cap));
  d.heads = s.heads;
  d.qseqlen = s.qseqlen;
  d.page_size = s.page_size;
  d.return_lse = s.return_lse;
  d.logit_cap = s.logit_cap;
  d.target = device_target(ctx);
  return d;
}

const CatalogKernel& find_kernel(const mla_context* ctx, const char (&name)[128], const char* kind,
                                 const std::string& target) {
  // A name field that fills its array without a terminator is not a name (and strlen would run on).
  if (!std::memchr(name, 0, sizeof name)) bad(fmt::format("selection's {} kernel name is not NUL-terminated within 128 bytes", kind));
  for (const auto& k : ctx->cat.kernels())
    if (k.name == name && k.kind == kind && k.target == target) return k;
  bad(fmt::format("selection names {} kernel '{}', which the catalog {} does not hold for {}", kind, name,
                  ctx->cat.dir(), target));
}

// A selection is only names: a stale or forged one could name kernels of another shape, which
// would read and write out of bounds on the device. Each field of the named kernels is checked
// against the caller's shape: exact, or (a padded selection) heads and qseqlen at least the
// caller's; the reduce kernel must be the decode kernel's.
void check_selection(const Selection& ks, const DecodeShape& s, const mla_selection& sel) {
  const auto& d = ks.decode.shape;
  auto mismatch = [&](const char* field, const std::string& kernel_has, const std::string& shape_has) {
    bad(fmt::format("selection: decode kernel {} has {} = {}, the shape {} (allowed: the kernel mla_select names for "
                    "this shape)",
                    ks.decode.name, field, kernel_has, shape_has));
  };
  if (d.value("q_dtype", "") != name(s.q_dtype)) mismatch("q_dtype", d.value("q_dtype", ""), std::string(name(s.q_dtype)));
  if (d.value("kv_dtype", "") != name(s.kv_dtype))
    mismatch("kv_dtype", d.value("kv_dtype", ""), std::string(name(s.kv_dtype)));
  if (d.value("page_size", 0) != s.page_size)
    mismatch("page_size", std::to_string(d.value("page_size", 0)), std::to_string(s.page_size));
  if (d.value("return_lse", false) != s.return_lse)
    mismatch("return_lse", d.value("return_lse", false) ? "1" : "0", s.return_lse ? "1" : "0");
  if (d.value("logit_cap", false) != s.logit_cap)
    mismatch("logit_cap", d.value("logit_cap", false) ? "1" : "0", s.logit_cap ? "1" : "0");
  const int kh = d.value("heads", 0), kq = d.value("qseqlen", 0);
  const bool padded = sel.fallback == MLA_FALLBACK_PADDED;
  if (padded ? (kh < s.heads || kq < s.qseqlen) : (kh != s.heads || kq != s.qseqlen))
    bad(fmt::format("selection: decode kernel {} (heads {}, qseqlen {}) cannot run heads {} qseqlen {} ({})", ks.decode.name,
                    kh, kq, s.heads, s.qseqlen, padded ? "a padded kernel needs at least the shape's" : "fallback NONE: exact"));
  const auto& r = ks.reduce.shape;
  if (r.value("heads", 0) != kh || r.value("qseqlen", 0) != kq || r.value("return_lse", false) != s.return_lse)
    bad(fmt::format("selection: reduce kernel {} is not the reduce kernel of {} (heads {}, qseqlen {}, lse {})",
                    ks.reduce.name, ks.decode.name, kh, kq, s.return_lse ? 1 : 0));
}

// Best padded candidate: same target, dtypes, page size, lse and cap; heads' >= heads and
// qseqlen' >= qseqlen; fewest padded rows, then fewest heads. Needs its reduce kernel too.
const CatalogKernel* padded_candidate(const mla_context* ctx, const DecodeShape& s, Selection* out) {
  const CatalogKernel* best = nullptr;
  for (const auto& k : ctx->cat.kernels()) {
    if (k.kind != "mla_decode" || k.target != name(s.target)) continue;
    const auto& sh = k.shape;
    if (sh.value("q_dtype", "") != name(s.q_dtype) || sh.value("kv_dtype", "") != name(s.kv_dtype) ||
        sh.value("page_size", 0) != s.page_size || sh.value("return_lse", false) != s.return_lse ||
        sh.value("logit_cap", false) != s.logit_cap)
      continue;
    int h = sh.value("heads", 0), q = sh.value("qseqlen", 0);
    if (h < s.heads || q < s.qseqlen) continue;
    DecodeShape ks = s;
    ks.heads = h;
    ks.qseqlen = q;
    Selection sel;
    try {
      sel = ctx->cat.select(ks);
    } catch (const CatalogError&) {
      continue;  // no reduce kernel for it
    }
    auto rows = [](const CatalogKernel& x) {
      return std::pair(x.shape.value("heads", 0) * x.shape.value("qseqlen", 0), x.shape.value("heads", 0));
    };
    if (!best || rows(k) < rows(*best)) {
      best = &k;
      *out = sel;
    }
  }
  return best;
}

}  // namespace

namespace mla::rt {

Backend& backend_of(mla_device* dev) { return *dev->be; }
const Plan& plan_of(const mla_plan* plan) { return plan->plan; }

}  // namespace mla::rt

extern "C" {

const char* mla_status_name(mla_status s) {
  switch (s) {
    case MLA_SUCCESS: return "MLA_SUCCESS";
    case MLA_ERROR_INVALID_ARGUMENT: return "MLA_ERROR_INVALID_ARGUMENT";
    case MLA_ERROR_CATALOG: return "MLA_ERROR_CATALOG";
    case MLA_ERROR_NO_KERNEL: return "MLA_ERROR_NO_KERNEL";
    case MLA_ERROR_CODE_OBJECT: return "MLA_ERROR_CODE_OBJECT";
    case MLA_ERROR_TARGET_MISMATCH: return "MLA_ERROR_TARGET_MISMATCH";
    case MLA_ERROR_KERNARG_MISMATCH: return "MLA_ERROR_KERNARG_MISMATCH";
    case MLA_ERROR_NO_DEVICE: return "MLA_ERROR_NO_DEVICE";
    case MLA_ERROR_BACKEND: return "MLA_ERROR_BACKEND";
    case MLA_ERROR_CAPACITY: return "MLA_ERROR_CAPACITY";
    case MLA_ERROR_OUT_OF_RANGE: return "MLA_ERROR_OUT_OF_RANGE";
    case MLA_ERROR_INTERNAL: return "MLA_ERROR_INTERNAL";
    case MLA_STATUS_MAX_ENUM: break;
  }
  return "MLA_ERROR_(unknown)";
}

const char* mla_last_error(void) { return g_error.c_str(); }

// ---- Device ------------------------------------------------------------------------------------

mla_status mla_device_open(mla_backend backend, int ordinal, const char* emulator_target, mla_device** out) {
  return guard([&] {
    need(out, "out (mla_device**)");
    *out = nullptr;
    auto d = std::make_unique<mla_device>();
    const int32_t backend_bits = enum_bits(backend);
    if (backend_bits == MLA_BACKEND_HIP) {
      d->be = make_hip_backend(ordinal);
    } else if (backend_bits == MLA_BACKEND_EMULATOR) {
      const char* t = emulator_target;
      if (!t || !*t) t = std::getenv("MLA_EMULATOR_TARGET");
      if (!t || !*t) t = "gfx942";
      if (std::strcmp(t, "gfx942") != 0 && std::strcmp(t, "gfx950") != 0)
        bad(fmt::format("emulator target '{}' (allowed: gfx942, gfx950)", t));
      d->be = make_emulator_backend(t);
    } else {
      bad(fmt::format("backend = {} (allowed: MLA_BACKEND_HIP, MLA_BACKEND_EMULATOR)", backend_bits));
    }
    *out = d.release();
  });
}

void mla_device_close(mla_device* dev) { delete dev; }

mla_status mla_device_get_info(const mla_device* dev, mla_device_info* out) {
  return guard([&] {
    need(dev, "dev");
    need(out, "out");
    out->backend = dev->be->kind();
    copy_str(out->target, sizeof out->target, dev->be->target());
    copy_str(out->name, sizeof out->name, dev->be->device_name());
    out->num_cus = dev->be->num_cus();
  });
}

mla_status mla_malloc(mla_device* dev, size_t bytes, uint64_t* out_ptr) {
  return guard([&] {
    need(dev, "dev");
    need(out_ptr, "out_ptr");
    *out_ptr = 0;
    if (bytes == 0) bad("mla_malloc of 0 bytes");
    *out_ptr = dev->be->alloc(bytes);
  });
}

mla_status mla_free(mla_device* dev, uint64_t ptr) {
  return guard([&] {
    need(dev, "dev");
    if (ptr) dev->be->free(ptr);
  });
}

mla_status mla_memcpy_h2d(mla_device* dev, uint64_t dst, const void* src, size_t bytes) {
  return guard([&] {
    need(dev, "dev");
    if (bytes == 0) return;
    need(src, "src");
    if (!dst) bad("dst is a null device pointer");
    dev->be->h2d(dst, src, bytes);
  });
}

mla_status mla_memcpy_d2h(mla_device* dev, void* dst, uint64_t src, size_t bytes) {
  return guard([&] {
    need(dev, "dev");
    if (bytes == 0) return;
    need(dst, "dst");
    if (!src) bad("src is a null device pointer");
    dev->be->d2h(dst, src, bytes);
  });
}

mla_status mla_memset(mla_device* dev, uint64_t dst, int value, size_t bytes) {
  return guard([&] {
    need(dev, "dev");
    if (bytes == 0) return;
    if (!dst) bad("dst is a null device pointer");
    dev->be->memset(dst, value, bytes);
  });
}

mla_status mla_stream_synchronize(mla_device* dev, void* stream) {
  return guard([&] {
    need(dev, "dev");
    dev->be->synchronize(stream);
  });
}

// ---- Context -----------------------------------------------------------------------------------

mla_status mla_context_create(mla_device* dev, const char* catalog_dir, mla_context** out) {
  return guard([&] {
    need(dev, "dev");
    need(out, "out (mla_context**)");
    *out = nullptr;
    auto c = std::make_unique<mla_context>();
    c->dev = dev;
    try {
      c->cat = (catalog_dir && *catalog_dir) ? Catalog::open(catalog_dir) : Catalog::open_from_env();
    } catch (const CatalogError&) {
      throw;
    } catch (const std::exception& e) {  // malformed catalog.json fields, filesystem errors
      throw CatalogError(fmt::format("{}: unreadable catalog: {}",
                                     catalog_dir && *catalog_dir ? catalog_dir : "$MLA_CATALOG_DIR", e.what()));
    }
    *out = c.release();
  });
}

void mla_context_destroy(mla_context* ctx) { delete ctx; }

mla_status mla_context_set_option(mla_context* ctx, mla_option opt, int64_t v) {
  return guard([&] {
    need(ctx, "ctx");
    const int32_t opt_bits = enum_bits(opt);
    switch (opt_bits) {
      case MLA_OPTION_VALIDATE: ctx->validate = v != 0; break;
      case MLA_OPTION_NUM_CUS:
        if (v < 0 || v > 65536) bad(fmt::format("MLA_OPTION_NUM_CUS = {} (allowed: 0..65536, 0 = the device's)", v));
        ctx->num_cus = int(v);
        break;
      case MLA_OPTION_WORKGROUPS_PER_CU:
        if (v < 0 || v > 64)
          bad(fmt::format("MLA_OPTION_WORKGROUPS_PER_CU = {} (allowed: 0..64, 0 = the kernel's occupancy)", v));
        ctx->wpc = int(v);
        break;
      case MLA_OPTION_CASCADE:
        if (v < 0 || v > 2) bad(fmt::format("MLA_OPTION_CASCADE = {} (allowed: 0 cost model, 1 always, 2 never)", v));
        ctx->cascade = v == 0 ? CascadePolicy::cost_model : v == 1 ? CascadePolicy::always : CascadePolicy::never;
        break;
      case MLA_OPTION_MERGE:
        if (v < 0 || v > 1) bad(fmt::format("MLA_OPTION_MERGE = {} (allowed: 0 the reduce launch, 1 in the decode launch)", v));
        ctx->merge_in_launch = v == 1;
        break;
      case MLA_OPTION_RECORD_LAUNCHES: {
        ctx->record = v != 0;
        ctx->dev->be->set_recording(ctx->record);
        break;
      }
      default: bad(fmt::format("option {} is not an mla_option", opt_bits));
    }
  });
}

mla_status mla_kernel_count(const mla_context* ctx, size_t* out) {
  return guard([&] {
    need(ctx, "ctx");
    need(out, "out_count");
    *out = ctx->cat.kernels().size();
  });
}

mla_status mla_kernel_get(const mla_context* ctx, size_t i, mla_kernel_info* out) {
  return guard([&] {
    need(ctx, "ctx");
    need(out, "out");
    const auto& ks = ctx->cat.kernels();
    if (i >= ks.size()) bad(fmt::format("kernel index {} (allowed: 0..{})", i, ks.size() - 1));
    const CatalogKernel& k = ks[i];
    *out = mla_kernel_info{};
    out->name = k.name.c_str();
    out->kind = k.kind.c_str();
    out->target = k.target.c_str();
    out->co_path = k.co_path.c_str();
    out->heads = k.shape.value("heads", 0);
    out->qseqlen = k.shape.value("qseqlen", 0);
    out->page_size = k.shape.value("page_size", 0);
    out->q_dtype = k.shape.value("q_dtype", "fp8") == std::string("bf16") ? MLA_DTYPE_BF16 : MLA_DTYPE_FP8;
    out->kv_dtype = k.shape.value("kv_dtype", "fp8") == std::string("bf16") ? MLA_DTYPE_BF16 : MLA_DTYPE_FP8;
    out->return_lse = k.shape.value("return_lse", false);
    out->logit_cap = k.shape.value("logit_cap", false);
    out->kernarg_size = k.kernarg_size;
  });
}

// ---- Selection ---------------------------------------------------------------------------------

mla_status mla_select(mla_context* ctx, const mla_shape* shape, unsigned flags, mla_selection* out) {
  return guard([&] {
    need(ctx, "ctx");
    need(shape, "shape");
    need(out, "out");
    if (flags & ~MLA_SELECT_ALLOW_PADDING) bad(fmt::format("flags = 0x{:x} (allowed: MLA_SELECT_ALLOW_PADDING)", flags));
    DecodeShape s = to_shape(ctx, *shape);
    Selection sel;
    bool padded = false;
    try {
      sel = ctx->cat.select(s);
    } catch (const CatalogError& e) {
      Selection psel;
      const CatalogKernel* p = padded_candidate(ctx, s, &psel);
      if (!p) throw RtError(MLA_ERROR_NO_KERNEL, e.what());
      if (!(flags & MLA_SELECT_ALLOW_PADDING))
        throw RtError(MLA_ERROR_NO_KERNEL,
                      fmt::format("{}\n(padding would run it on {}: pass MLA_SELECT_ALLOW_PADDING to allow that)",
                                  e.what(), p->name));
      sel = psel;
      padded = true;
    }
    *out = mla_selection{};
    out->shape = *shape;
    copy_str(out->decode_kernel, sizeof out->decode_kernel, sel.decode.name);
    copy_str(out->reduce_kernel, sizeof out->reduce_kernel, sel.reduce.name);
    copy_str(out->prefix_kernel, sizeof out->prefix_kernel, sel.prefix ? sel.prefix->name : "");
    out->kernel_heads = sel.decode.shape.value("heads", s.heads);
    out->kernel_qseqlen = sel.decode.shape.value("qseqlen", s.qseqlen);
    out->fallback = padded ? MLA_FALLBACK_PADDED : MLA_FALLBACK_NONE;
    std::string note =
        padded ? fmt::format("PADDED: no kernel for {}; running it on {} (heads {} -> {}, qseqlen {} -> {}): q is "
                             "copied into a padded workspace and o/lse copied back",
                             s.describe(), sel.decode.name, s.heads, out->kernel_heads, s.qseqlen, out->kernel_qseqlen)
               : fmt::format("exact: {} + {}", sel.decode.name, sel.reduce.name);
    copy_str(out->note, sizeof out->note, note);
  });
}

// ---- Plan --------------------------------------------------------------------------------------

mla_status mla_plan_create(mla_context* ctx, const mla_selection* sel, int max_batch, int64_t max_total_tokens,
                           mla_plan** out) {
  return guard([&] {
    need(ctx, "ctx");
    need(sel, "sel");
    need(out, "out (mla_plan**)");
    *out = nullptr;
    if (max_batch < 1 || max_batch > (1 << 20)) bad(fmt::format("max_batch = {} (allowed: 1..{})", max_batch, 1 << 20));
    if (max_total_tokens < 0 || max_total_tokens > (int64_t(1) << 40))
      bad(fmt::format("max_total_tokens = {} (allowed: 0..2^40, 0 = unbounded)", max_total_tokens));
    DecodeShape s = to_shape(ctx, sel->shape);
    std::string t = name(s.target);
    Selection ks{find_kernel(ctx, sel->decode_kernel, "mla_decode", t), find_kernel(ctx, sel->reduce_kernel, "mla_reduce", t),
                 std::nullopt};
    if (!std::memchr(sel->prefix_kernel, 0, sizeof sel->prefix_kernel) || sel->prefix_kernel[0]) {
      ks.prefix = find_kernel(ctx, sel->prefix_kernel, "mla_prefix", t);
      // The default prefix kernel (mla_select's), or the shape's wide one named by the caller.
      if (!prefix_matches(*ks.prefix, ks.decode, ks.prefix->shape.value("prefix_rows", 0)))
        bad(fmt::format("selection: prefix kernel {} is not the prefix kernel of decode kernel {} (allowed: \"\" or the "
                        "one mla_select names)",
                        ks.prefix->name, ks.decode.name));
    }
    const int32_t fallback_bits = enum_bits(sel->fallback);
    if (fallback_bits != MLA_FALLBACK_NONE && fallback_bits != MLA_FALLBACK_PADDED)
      bad(fmt::format("selection: fallback = {} (allowed: MLA_FALLBACK_NONE, MLA_FALLBACK_PADDED)", fallback_bits));
    check_selection(ks, s, *sel);
    auto p = std::make_unique<mla_plan>();
    p->k = selected_kernels(ks, s);
    // A plan made with cascades off never has prefix units: it launches no prefix kernel (the
    // launches of a plan are fixed at creation, for graph capture).
    if (ctx->cascade == CascadePolicy::never) p->k.prefix.reset();
    if (ctx->merge_in_launch && ctx->cascade != CascadePolicy::never)
      bad("MLA_OPTION_MERGE = 1 with MLA_OPTION_CASCADE != 2 (allowed: cascades off, set MLA_OPTION_CASCADE 2 before "
          "mla_plan_create; a cascade's prefix partials are merged by the reduce launch)");
    p->merge_in_launch = ctx->merge_in_launch;
    // Load and check both code objects now (per-device cache): target, metadata vs catalog.
    ctx->dev->be->ensure_module(p->k.decode);
    ctx->dev->be->ensure_module(p->k.reduce);
    if (p->k.prefix) ctx->dev->be->ensure_module(*p->k.prefix);
    p->max_batch = max_batch;
    p->max_tokens = max_total_tokens;
    p->num_cus = ctx->planned_cus();
    p->wpc = ctx->wpc;
    p->ws = workspace_layout(p->k, max_batch, max_total_tokens, p->num_cus, PlanInputs{}.max_rounds, p->wpc,
                             p->merge_in_launch);
    if (p->ws.total > (size_t(1) << 46))
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("workspace of {} bytes for max_batch {} max_total_tokens {}: too "
                                                    "large (give a token bound)",
                                                    p->ws.total, max_batch, max_total_tokens));
    // The grids are 32-bit per dimension.
    if (p->ws.max_units > (size_t(1) << 31))
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("{} work units for max_batch {} max_total_tokens {}: too many for "
                                                    "one launch (give a token bound)",
                                                    p->ws.max_units, max_batch, max_total_tokens));
    p->be = ctx->dev->be.get();
    p->tables = static_cast<uint8_t*>(p->be->host_alloc(p->ws.tables_bytes));
    p->tables_used = pack_step_tables(Plan{}, 1.0f, 1.0f, p->ws, p->tables);
    p->kv_lens.reserve(size_t(max_batch));
    p->next_lens.reserve(size_t(max_batch));
    p->groups.reserve(size_t(max_batch / 2 + 1));
    p->inputs = plan_inputs_for(p->k, {}, p->num_cus, p->wpc);
    p->inputs.max_units = int64_t(p->ws.max_units);
    p->inputs.max_partials = int64_t(p->ws.max_partials);
    p->inputs.merge_in_launch = p->merge_in_launch;
    *out = p.release();
  });
}

void mla_plan_destroy(mla_plan* plan) { delete plan; }

mla_status mla_plan_workspace_size(const mla_plan* plan, size_t* out) {
  return guard([&] {
    need(plan, "plan");
    need(out, "out_bytes");
    *out = plan->ws.total;
  });
}

namespace {

// The host-side planning of mla_plan_update(_shared). `groups` (caller-given, or nullptr) wins
// over `host_pages` (a host page table to detect groups in, or nullptr).
void update_plan(mla_context* ctx, mla_plan* plan, const int32_t* kv_lens, int batch, int32_t stride,
                 const int32_t* host_pages, const std::span<const PrefixGroup>* groups) {
  {
    need(ctx, "ctx");
    need(plan, "plan");
    if (batch > 0) need(kv_lens, "kv_lens");
    if (batch < 0 || batch > plan->max_batch) {
      if (batch > plan->max_batch)
        throw RtError(MLA_ERROR_CAPACITY, fmt::format("batch = {} exceeds the plan's max_batch = {}", batch, plan->max_batch));
      bad(fmt::format("batch = {} (allowed: 0..max_batch = {})", batch, plan->max_batch));
    }
    if (stride < 0) bad(fmt::format("block_table_stride = {} (allowed: 0 = packed, or > 0)", stride));
    const SelectedKernels& k = plan->k;
    int64_t tokens = 0, entries = 0;
    std::vector<int>& lens = plan->next_lens;  // reserved for max_batch at creation: no allocation
    lens.clear();
    for (int b = 0; b < batch; ++b) {
      int64_t v = kv_lens[b];
      // 0: a request with no KV (a padded graph batch, a context-parallel rank without its
      // tokens): o = 0 and lse = -inf.
      if (v < 0 || (v > 0 && v < k.qseqlen))
        bad(fmt::format("kv_lens[{}] = {} (allowed: 0 for a request with no KV, or >= qseqlen = {}; a request holds "
                        "its own query rows)",
                        b, v, k.qseqlen));
      if (v > 0 && v < k.kqseqlen)
        bad(fmt::format("kv_lens[{}] = {} < {} = the padded kernel's qseqlen (kernel {}): too short to pad", b, v,
                        k.kqseqlen, k.decode.name));
      if (v > (int64_t(1) << 30))
        bad(fmt::format("kv_lens[{}] = {} (allowed: qseqlen..2^30 tokens: the kernels count tokens in 32 bits)", b, v));
      int64_t pages = (v + k.page_size - 1) / k.page_size;
      if (stride > 0 && pages > stride)
        bad(fmt::format("kv_lens[{}] = {} needs {} pages > block_table_stride = {}", b, v, pages, stride));
      tokens += v;
      entries = stride > 0 ? (pages ? int64_t(b) * stride + pages : entries) : entries + pages;
      lens.push_back(int(v));
    }
    // The kernel addresses the page table with 32-bit byte offsets: entries * 4 < 2^32.
    if (entries >= (int64_t(1) << 30))
      bad(fmt::format("the batch's page table has {} entries (allowed: < 2^30; total tokens {})", entries, tokens));
    if (plan->max_tokens > 0 && tokens > plan->max_tokens)
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("the batch holds {} kv tokens, more than the plan's max_total_tokens "
                                                    "= {}",
                                                    tokens, plan->max_tokens));
    PlanInputs& in = plan->inputs;
    in.kv_lens = std::span<const int>(lens);
    in.prefix_groups = {};
    if (groups) {
      in.prefix_groups = *groups;
    } else if (host_pages) {
      detect_prefix_groups(lens, k.page_size, k.qseqlen, in.tile_tokens, PageTableView{host_pages, stride}, plan->groups);
      in.prefix_groups = std::span<const PrefixGroup>(plan->groups);
    }
    // A merging plan stays without cascades whatever the option says now (its launches are fixed).
    in.cascade = plan->merge_in_launch ? CascadePolicy::never : ctx->cascade;
    Plan& p = plan->next;
    plan_decode(in, p, plan->scratch);
    in.kv_lens = {};  // no view outlives the call
    in.prefix_groups = {};
    if (stride > 0) {
      for (auto& u : p.units) u.page_base = u.batch * stride;
      for (auto& u : p.prefix_units) u.page_base = u.first_request * stride;
    }
    if (p.units.size() + p.prefix_units.size() > plan->ws.max_units || size_t(p.num_partials) > plan->ws.max_partials ||
        p.reduces.size() > plan->ws.max_reduces)
      throw RtError(MLA_ERROR_INTERNAL,
                    fmt::format("plan ({} units, {} partials) exceeds the workspace capacity ({} units, {} partials)",
                                p.units.size(), p.num_partials, plan->ws.max_units, plan->ws.max_partials));
    std::swap(plan->plan, plan->next);
    plan->batch = batch;
    plan->bt_stride = stride;
    plan->kv_lens.swap(lens);
    plan->table_entries = entries;
    plan->json.clear();
    plan->tables_used = pack_step_tables(plan->plan, 1.0f, 1.0f, plan->ws, plan->tables);
    ++plan->updates;
  }
}

}  // namespace

mla_status mla_plan_update(mla_context* ctx, mla_plan* plan, const int32_t* kv_lens, int batch, int32_t stride) {
  return guard([&] { update_plan(ctx, plan, kv_lens, batch, stride, nullptr, nullptr); });
}

mla_status mla_plan_update_shared(mla_context* ctx, mla_plan* plan, const int32_t* kv_lens, int batch, int32_t stride,
                                  const int32_t* host_kv_indices, const mla_prefix_group* groups, int num_groups) {
  return guard([&] {
    if (num_groups < 0 || (num_groups > 0 && !groups))
      bad(fmt::format("num_groups = {} with groups {} (allowed: groups NULL and 0, or num_groups >= 0 entries)", num_groups,
                      groups ? "set" : "NULL"));
    if (groups) {
      need(plan, "plan");
      // Into the plan's reserved vector: no allocation at a steady group count.
      plan->groups.clear();
      for (int i = 0; i < num_groups; ++i) plan->groups.push_back({groups[i].first, groups[i].count, groups[i].shared_tokens});
      const std::span<const PrefixGroup> g(plan->groups);
      update_plan(ctx, plan, kv_lens, batch, stride, nullptr, &g);
    } else {
      update_plan(ctx, plan, kv_lens, batch, stride, host_kv_indices, nullptr);
    }
  });
}

const char* mla_plan_describe_json(const mla_plan* plan) {
  const char* out = nullptr;
  mla_status st = guard([&] {
    need(plan, "plan");
    auto* p = const_cast<mla_plan*>(plan);
    if (p->json.empty()) p->json = p->plan.to_json().dump();
    out = p->json.c_str();
  });
  return st == MLA_SUCCESS ? out : nullptr;
}

mla_status mla_plan_get_info(const mla_plan* plan, mla_plan_info* out) {
  return guard([&] {
    need(plan, "plan");
    need(out, "out");
    *out = mla_plan_info{};
    out->batch = plan->batch;
    out->max_batch = plan->max_batch;
    out->max_total_tokens = plan->max_tokens;
    out->num_units = int(plan->plan.units.size());
    out->num_prefix_units = int(plan->plan.prefix_units.size());
    out->num_reduce_entries = int(plan->plan.reduces.size());
    out->num_partials = plan->plan.num_partials;
    out->num_cus = plan->num_cus;
    out->balance = plan->plan.balance;
    out->workspace_bytes = plan->ws.total;
    const LaunchGrids g = launch_grids(plan->k, plan->ws);
    out->num_launches = g.launches;
    auto put = [](unsigned (&dst)[3], const Dim3& d) { dst[0] = d.x, dst[1] = d.y, dst[2] = d.z; };
    put(out->decode_grid, g.decode);
    put(out->prefix_grid, g.prefix);
    put(out->reduce_grid, g.reduce);
    out->upload_bytes = plan->tables_used;
  });
}

mla_status mla_plan_get_tables(const mla_plan* plan, const mla_work_unit** units, size_t* num_units,
                               const mla_reduce_entry** reduces, size_t* num_reduces, const int32_t** splits) {
  return guard([&] {
    need(plan, "plan");
    const Plan& p = plan->plan;
    if (units) *units = reinterpret_cast<const mla_work_unit*>(p.units.data());
    if (num_units) *num_units = p.units.size();
    if (reduces) *reduces = reinterpret_cast<const mla_reduce_entry*>(p.reduces.data());
    if (num_reduces) *num_reduces = p.reduces.size();
    if (splits) *splits = reinterpret_cast<const int32_t*>(p.splits.data());
  });
}

mla_status mla_plan_get_prefix_units(const mla_plan* plan, const mla_prefix_unit** units, size_t* num_units) {
  return guard([&] {
    need(plan, "plan");
    const Plan& p = plan->plan;
    if (units) *units = reinterpret_cast<const mla_prefix_unit*>(p.prefix_units.data());
    if (num_units) *num_units = p.prefix_units.size();
  });
}

mla_status mla_plan_upload(mla_context* ctx, mla_plan* plan, uint64_t workspace, size_t workspace_bytes,
                           float q_scale, float kv_scale, void* stream) {
  return guard([&] {
    need(ctx, "ctx");
    need(plan, "plan");
    if (plan->updates == 0) bad("the plan has no batch yet: call mla_plan_update first");
    if (!workspace) bad("workspace is a null device pointer");
    if (workspace_bytes < plan->ws.total)
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("workspace_bytes = {} < {} (mla_plan_workspace_size)",
                                                    workspace_bytes, plan->ws.total));
    for (auto [v, field] : {std::pair{q_scale, "q_scale"}, {kv_scale, "kv_scale"}})
      if (!std::isfinite(v) || !(v > 0))
        bad(fmt::format("{} = {} (allowed: finite, > 0; the host value the kernels read when mla_decode_args gives "
                        "no device pointer)",
                        field, v));
    std::memcpy(plan->tables + step_tables::scales, &q_scale, 4);
    std::memcpy(plan->tables + step_tables::scales + 4, &kv_scale, 4);
    // Into the plan's reused operations (assigned in place: nothing is allocated after the
    // first upload into a workspace).
    std::vector<DecodeOp>& ops = plan->upload_ops;
    const bool zero = plan->k.padded() && plan->zeroed_ws != workspace;
    const bool zero_counters = plan->ws.merge_in_launch && plan->counters_ws != workspace;
    ops.resize(1 + (zero ? 1 : 0) + (zero_counters ? 1 : 0));
    if (zero_counters) {
      // The in-launch merge's arrival counters start at 0; every merge resets its own, so one
      // zeroing per workspace serves every later launch (stream-ordered, before the first).
      DecodeOp& z = ops[zero ? 1 : 0];
      z.kind = DecodeOp::Memset;
      z.dst = workspace + plan->ws.counters;
      z.bytes = plan->ws.counters_bytes;
      z.value = 0;
      z.what = "zero the merge counters (once per workspace)";
    }
    if (zero) {
      // The padding rows and heads of q are never written by mla_decode's copies: zero them once
      // per workspace (stream-ordered, before the first decode that reads them).
      DecodeOp& z = ops[0];
      z.kind = DecodeOp::Memset;
      z.dst = workspace + plan->ws.q_pad;
      z.bytes = plan->ws.q_pad_bytes;
      z.value = 0;
      z.what = "zero padded q (once per workspace)";
    }
    DecodeOp& up = ops.back();
    up.kind = DecodeOp::H2D;
    up.dst = workspace + plan->ws.tables;
    up.host = plan->tables;
    up.bytes = plan->tables_used;
    up.what = "upload the step tables";
    ctx->dev->be->run(ops, stream);
    if (plan->k.padded()) plan->zeroed_ws = workspace;
    if (plan->ws.merge_in_launch) plan->counters_ws = workspace;
    plan->uploaded_update = plan->updates;
    plan->uploaded_ws = workspace;
    plan->uploaded_q_scale = q_scale;
    plan->uploaded_kv_scale = kv_scale;
  });
}

}  // extern "C"

// ---- Decode ------------------------------------------------------------------------------------

namespace {

void check_stride(int64_t given, int64_t want, const char* field, const char* meaning) {
  if (given != 0 && given != want)
    bad(fmt::format("args.{} = {} (allowed: 0 or {} = {}; the kernels read contiguous tensors: make it contiguous "
                    "first)",
                    field, given, want, meaning));
}

void check_scale(float v, const char* field, bool positive) {
  if (!std::isfinite(v) || (positive ? !(v > 0) : v < 0))
    bad(fmt::format("args.{} = {} (allowed: finite, {})", field, v, positive ? "> 0" : ">= 0"));
}

// Checks the arguments; returns the tensors the kernels get.
DeviceTensors check_args(const mla_plan* plan, const mla_decode_args* a) {
  const SelectedKernels& k = plan->k;
  if (plan->updates == 0) bad("the plan has no batch yet: call mla_plan_update first");
  if (!a->q) bad("args.q is a null device pointer");
  if (!a->kv) bad("args.kv is a null device pointer");
  if (!a->kv_indices) bad("args.kv_indices is a null device pointer");
  if (!a->o) bad("args.o is a null device pointer");
  if (k.return_lse && !a->lse) bad("args.lse is a null device pointer but the shape asks for lse (return_lse = 1)");
  const int64_t H = k.heads, P = k.page_size;
  check_stride(a->q_stride_row, H * kQkDim, "q_stride_row", "heads*576");
  check_stride(a->q_stride_head, kQkDim, "q_stride_head", "576");
  check_stride(a->kv_stride_page, P * kQkDim, "kv_stride_page", "page_size*576");
  check_stride(a->kv_stride_token, kQkDim, "kv_stride_token", "576");
  check_stride(a->o_stride_row, H * kVDim, "o_stride_row", "heads*512");
  check_stride(a->o_stride_head, kVDim, "o_stride_head", "512");
  if (a->num_pages < 1) bad(fmt::format("args.num_pages = {} (allowed: >= 1, the pages in kv)", a->num_pages));
  if (a->num_pages > (int64_t(1) << 32) / P)  // not num_pages * P: that overflows for num_pages near 2^63
    bad(fmt::format("args.num_pages = {} x page_size {} tokens (allowed: < 2^32 tokens: 32-bit token rows)",
                    a->num_pages, P));
  check_scale(a->sm_scale, "sm_scale", true);
  if (k.logit_cap) check_scale(a->logit_cap, "logit_cap", true);
  DeviceTensors t;
  t.q = a->q;
  t.kv = a->kv;
  t.kv_indices = a->kv_indices;
  t.o = a->o;
  t.lse = k.return_lse ? a->lse : 0;
  t.q_scale = a->q_scale_ptr;
  t.kv_scale = a->kv_scale_ptr;
  t.sm_scale = a->sm_scale;
  t.logit_cap = k.logit_cap ? a->logit_cap : 0.0f;
  return t;
}

// The step's tables must be in the workspace before the kernels read them: uploaded by
// mla_plan_upload after the plan's last update, into this workspace. A scale without a device
// pointer is read from the workspace, where the upload wrote its host value: the two must agree.
void check_uploaded(const mla_plan* plan, const mla_decode_args* a, uint64_t workspace) {
  if (plan->uploaded_update != plan->updates)
    bad(plan->uploaded_update == 0
            ? "the plan's tables were never uploaded: call mla_plan_upload after mla_plan_update (once per step)"
            : "the plan was updated after its last mla_plan_upload: upload the new step's tables first");
  if (plan->uploaded_ws != workspace)
    bad(fmt::format("workspace 0x{:x} is not the one the step's tables were uploaded to (0x{:x}): pass the same "
                    "workspace to mla_plan_upload and mla_decode",
                    workspace, plan->uploaded_ws));
  auto host_scale = [&](uint64_t ptr, float v, float uploaded, const char* field, const char* ptr_field) {
    if (ptr) return;
    check_scale(v, field, true);
    if (v != uploaded)
      bad(fmt::format("args.{} = {} but the workspace holds {} from mla_plan_upload (args.{} is 0, so the kernels read "
                      "the uploaded value): upload this value, or give a device pointer",
                      field, v, uploaded, ptr_field));
  };
  host_scale(a->q_scale_ptr, a->q_scale, plan->uploaded_q_scale, "q_scale", "q_scale_ptr");
  host_scale(a->kv_scale_ptr, a->kv_scale, plan->uploaded_kv_scale, "kv_scale", "kv_scale_ptr");
}

// The scales the kernels read: the caller's device pointers, else the workspace's uploaded values.
void scales_of(DeviceTensors& t, uint64_t workspace, const WorkspaceLayout& ws) {
  const uint64_t at = workspace + ws.tables + step_tables::scales;
  if (!t.q_scale) t.q_scale = at;
  if (!t.kv_scale) t.kv_scale = at + 4;
}

// Validation mode: every page id the plan will read must be in 0..num_pages-1. Only those ids
// are read back: a packed table whole (every entry is used), a block table row by row (the
// used pages of each request, not the stride's worth).
void validate_indices(mla_context* ctx, const mla_plan* plan, const mla_decode_args* a) {
  const int P = plan->k.page_size;
  std::vector<int32_t> idx;
  int64_t base = 0;
  for (int b = 0; b < plan->batch; ++b) {
    const int64_t pages = (plan->kv_lens[size_t(b)] + P - 1) / P;
    if (pages == 0) continue;  // a request with no KV reads no page id
    if (plan->bt_stride > 0) base = int64_t(b) * plan->bt_stride;
    idx.resize(size_t(pages));
    ctx->dev->be->d2h(idx.data(), a->kv_indices + uint64_t(base) * sizeof(int32_t), idx.size() * sizeof(int32_t));
    for (int64_t j = 0; j < pages; ++j) {
      int32_t v = idx[size_t(j)];
      if (v < 0 || v >= a->num_pages)
        throw RtError(MLA_ERROR_OUT_OF_RANGE,
                      fmt::format("kv_indices[{}] = {} is not a page id (allowed: 0..{}, num_pages = {}); request {}, "
                                  "page {} of {} (tokens {}..{})",
                                  base + j, v, a->num_pages - 1, a->num_pages, b, j, pages, j * P,
                                  std::min<int64_t>((j + 1) * P, plan->kv_lens[size_t(b)]) - 1));
    }
    if (plan->bt_stride == 0) base += pages;
  }
}

}  // namespace

namespace mla::rt {

std::vector<DecodeOp> decode_ops_of(mla_context*, const mla_plan* plan, const mla_decode_args* args,
                                    uint64_t workspace) {
  DeviceTensors t = check_args(plan, args);
  scales_of(t, workspace, plan->ws);
  return decode_ops(plan->k, plan->ws, plan->batch, t, workspace_addrs(workspace, plan->ws));
}

}  // namespace mla::rt

extern "C" mla_status mla_decode(mla_context* ctx, const mla_plan* plan, const mla_decode_args* args,
                                 uint64_t workspace, size_t workspace_bytes, void* stream) {
  return guard([&] {
    need(ctx, "ctx");
    need(plan, "plan");
    need(args, "args");
    DeviceTensors t = check_args(plan, args);
    if (!workspace) bad("workspace is a null device pointer");
    if (workspace_bytes < plan->ws.total)
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("workspace_bytes = {} < {} (mla_plan_workspace_size)",
                                                    workspace_bytes, plan->ws.total));
    check_uploaded(plan, args, workspace);
    if (plan->batch == 0) return;  // nothing to launch
    if (ctx->validate) validate_indices(ctx, plan, args);
    scales_of(t, workspace, plan->ws);
    ctx->dev->be->run(decode_ops(plan->k, plan->ws, plan->batch, t, workspace_addrs(workspace, plan->ws)), stream);
  });
}

extern "C" mla_status mla_merge_attn_states(mla_context* ctx, const mla_merge_args* args, void* stream) {
  return guard([&] {
    need(ctx, "ctx");
    need(args, "args");
    for (auto [ptr, field] : {std::pair{args->output, "output"}, {args->prefix_output, "prefix_output"},
                              {args->prefix_lse, "prefix_lse"}, {args->suffix_output, "suffix_output"},
                              {args->suffix_lse, "suffix_lse"}})
      if (!ptr) bad(fmt::format("args.{} is a null device pointer", field));
    if (args->num_heads < 1 || args->num_heads > 1024)
      bad(fmt::format("args.num_heads = {} (allowed: 1..1024)", args->num_heads));
    // One workgroup per row: the grid's x is 32-bit.
    if (args->num_tokens < 1 || args->num_tokens > (int64_t(1) << 31) / args->num_heads)
      bad(fmt::format("args.num_tokens = {} (allowed: 1..2^31 / num_heads = {})", args->num_tokens,
                      (int64_t(1) << 31) / args->num_heads));
    const std::string t(name(device_target(ctx)));
    const CatalogKernel* k = nullptr;
    for (const auto& c : ctx->cat.kernels())
      if (c.kind == "mla_merge" && c.target == t) k = &c;
    if (!k)
      throw RtError(MLA_ERROR_NO_KERNEL, fmt::format("{}: no mla_merge_attn_states kernel for {} (it is built with "
                                                     "every decode shape: rebuild the catalog)",
                                                     ctx->cat.dir(), t));
    ctx->dev->be->ensure_module(*k);
    MergeTensors m{args->output, args->prefix_output, args->prefix_lse, args->suffix_output, args->suffix_lse,
                   args->output_lse, uint32_t(args->num_tokens * args->num_heads)};
    ctx->dev->be->run({merge_op(*k, m)}, stream);
  });
}
