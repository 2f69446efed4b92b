// The C API of mla_runtime.h over the C++ runtime (catalog, planner, backends): status and errors,
// devices, contexts, the kernel list, selection, and the argument checks the C API shares. Plans
// and their workspace are in mla_plan.cpp, mla_decode and mla_merge_attn_states in mla_launch.cpp.
#include "runtime/mla_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "runtime/catalog.h"
#include "runtime/mla_capi_internal.h"
#include "runtime/mla_runtime_internal.h"
#include "runtime/problem.h"

namespace {

thread_local std::string g_error;

DType dtype_of(const mla_dtype& d, const char* field) {
  const int32_t v = enum_bits(d);
  if (v == MLA_DTYPE_FP8) return DType::fp8;
  if (v == MLA_DTYPE_BF16) return DType::bf16;
  bad(fmt::format("{} = {} is not a dtype (allowed: MLA_DTYPE_FP8, MLA_DTYPE_BF16; kv_dtype also MLA_DTYPE_FP8_DS_MLA)",
                  field, v));
}

void copy_str(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}

}  // namespace

namespace mla::rt::capi {

mla_status fail(mla_status s, const std::string& msg) {
  g_error = msg;
  return s;
}

[[noreturn]] void bad(const std::string& msg) { throw RtError(MLA_ERROR_INVALID_ARGUMENT, msg); }

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
  d.kv_ds_mla = enum_bits(s.kv_dtype) == MLA_DTYPE_FP8_DS_MLA;
  d.kv_dtype = d.kv_ds_mla ? DType::fp8 : dtype_of(s.kv_dtype, "shape.kv_dtype");
  if (d.kv_ds_mla && (!s.sparse || d.q_dtype != DType::bf16))
    bad("shape.kv_dtype = MLA_DTYPE_FP8_DS_MLA needs shape.sparse = 1 and shape.q_dtype = MLA_DTYPE_BF16 (FlashMLA's "
        "sparse cache)");
  if (s.heads < 1 || s.heads > 1024) bad(fmt::format("shape.heads = {} (allowed: 1..1024)", s.heads));
  if (s.qseqlen < 1 || s.qseqlen > 64) bad(fmt::format("shape.qseqlen = {} (allowed: 1..64)", s.qseqlen));
  if (s.page_size < 1 || s.page_size > 256 || (s.page_size & (s.page_size - 1)))
    bad(fmt::format("shape.page_size = {} (allowed: 1 or a power of two up to 256)", s.page_size));
  if (s.return_lse != 0 && s.return_lse != 1) bad(fmt::format("shape.return_lse = {} (allowed: 0, 1)", s.return_lse));
  if (s.logit_cap != 0 && s.logit_cap != 1) bad(fmt::format("shape.logit_cap = {} (allowed: 0, 1)", s.logit_cap));
  if (s.sparse != 0 && s.sparse != 1) bad(fmt::format("shape.sparse = {} (allowed: 0, 1)", s.sparse));
  if (s.sparse && s.qseqlen != 1)
    bad(fmt::format("shape.qseqlen = {} with shape.sparse (allowed: 1: each query row has its own index row, so MTP "
                    "rows are rows of the batch)", s.qseqlen));
  if (s.sparse && s.page_size != 1)
    bad(fmt::format("shape.page_size = {} with shape.sparse (allowed: 1: sparse indices are cache slots, block * "
                    "page_block_size + offset, and kv is viewed as [slots, 1, 576])", s.page_size));
  if (s.sparse && s.logit_cap) bad("shape.logit_cap = 1 with shape.sparse (allowed: 0)");
  d.heads = s.heads;
  d.qseqlen = s.qseqlen;
  d.page_size = s.page_size;
  d.return_lse = s.return_lse;
  d.logit_cap = s.logit_cap;
  d.sparse = s.sparse;
  d.target = device_target(ctx);
  return d;
}

}  // namespace mla::rt::capi

namespace {

// Best padded candidate: same target, dtypes, page size, lse and cap; heads' >= heads and
// qseqlen' >= qseqlen; fewest padded rows, then fewest heads. Needs its reduce kernel too.
const CatalogKernel* padded_candidate(const mla_context* ctx, const DecodeShape& s, Selection* out) {
  const CatalogKernel* best = nullptr;
  for (const auto& k : ctx->cat.kernels()) {
    if (k.kind != "mla_decode" || k.target != name(s.target)) continue;
    const auto& sh = k.shape;
    if (sh.value("q_dtype", "") != name(s.q_dtype) || sh.value("kv_dtype", "") != s.kv_name() ||
        sh.value("page_size", 0) != s.page_size || sh.value("return_lse", false) != s.return_lse ||
        sh.value("logit_cap", false) != s.logit_cap || sh.value("attention", "dense") != (s.sparse ? "sparse" : "dense"))
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

}  // extern "C"
