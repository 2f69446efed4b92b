#include "runtime/code_object_info.h"

#include <gelf.h>
#include <libelf.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#include <fmt/format.h>
// Header-only use; Boost would only add optional adaptors.
#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>

#include "runtime/rt_error.h"

namespace mla::rt {

namespace {

constexpr uint32_t kNoteTypeAmdgpuMetadata = 32;  // NT_AMDGPU_METADATA (code object v3+)
constexpr unsigned kMachMask = 0xffu;              // EF_AMDGPU_MACH

const char* mach_name(unsigned mach) {
  switch (mach) {
    case 0x3f: return "gfx90a";
    case 0x40: return "gfx940";
    case 0x4b: return "gfx941";
    case 0x4c: return "gfx942";
    case 0x4f: return "gfx950";
    case 0x41: return "gfx1100";
    case 0x30: return "gfx908";
    case 0x2f: return "gfx906";
    default: return nullptr;
  }
}

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw RtError(MLA_ERROR_CODE_OBJECT, fmt::format("corrupt code object: {}: {}", path, what));
}

struct ElfCloser {
  void operator()(Elf* e) const { elf_end(e); }
};
using ElfHandle = std::unique_ptr<Elf, ElfCloser>;

// libelf over the caller's bytes (read-only: ELF_C_READ semantics; libelf never writes them).
ElfHandle open_elf(std::span<const uint8_t> b, const std::string& path) {
  static const bool version_ok = elf_version(EV_CURRENT) != EV_NONE;  // once, before any other call
  if (!version_ok) throw RtError(MLA_ERROR_INTERNAL, "libelf: elf_version(EV_CURRENT) failed");
  ElfHandle e(elf_memory(const_cast<char*>(reinterpret_cast<const char*>(b.data())), b.size()));
  if (!e || elf_kind(e.get()) != ELF_K_ELF) corrupt(path, fmt::format("libelf: {}", elf_errmsg(-1)));
  return e;
}

// ---- msgpack: the AMDGPU metadata map ("amdhsa.kernels": [{".name", ".args": [...]}, ...]) ----

const msgpack::object* member(const msgpack::object& map, std::string_view key) {
  if (map.type != msgpack::type::MAP) return nullptr;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key)
      return &kv.val;
  }
  return nullptr;
}

std::string str_member(const msgpack::object& map, std::string_view key, const std::string& path, bool required) {
  const msgpack::object* v = member(map, key);
  if (!v) {
    if (required) corrupt(path, fmt::format("metadata: '{}' is missing", key));
    return {};
  }
  if (v->type != msgpack::type::STR) corrupt(path, fmt::format("metadata: '{}' is not a string", key));
  return std::string(v->via.str.ptr, v->via.str.size);
}

uint32_t u32_member(const msgpack::object& map, std::string_view key, const std::string& path) {
  const msgpack::object* v = member(map, key);
  if (!v) corrupt(path, fmt::format("metadata: '{}' is missing", key));
  if (v->type != msgpack::type::POSITIVE_INTEGER || v->via.u64 > UINT32_MAX)
    corrupt(path, fmt::format("metadata: '{}' is not an unsigned 32-bit integer", key));
  return uint32_t(v->via.u64);
}

std::vector<CodeObjectKernel> parse_metadata(std::span<const uint8_t> desc, const std::string& path) {
  // Limits far above any real code object (a few kernels, tens of arguments) bound the memory a
  // hostile note can make the unpacker allocate.
  const msgpack::unpack_limit limit(/*array*/ 4096, /*map*/ 4096, /*str*/ 1 << 16, /*bin*/ 1 << 16, /*ext*/ 0,
                                    /*depth*/ 16);
  msgpack::object_handle oh;
  try {
    oh = msgpack::unpack(reinterpret_cast<const char*>(desc.data()), desc.size(), nullptr, nullptr, limit);
  } catch (const std::exception& e) {
    corrupt(path, fmt::format("malformed msgpack metadata note: {}", e.what()));
  }
  const msgpack::object& root = oh.get();
  if (root.type != msgpack::type::MAP) corrupt(path, "metadata root is not a map");
  const msgpack::object* ks = member(root, "amdhsa.kernels");
  if (!ks || ks->type != msgpack::type::ARRAY) corrupt(path, "metadata has no amdhsa.kernels array");
  std::vector<CodeObjectKernel> out;
  for (uint32_t i = 0; i < ks->via.array.size; ++i) {
    const msgpack::object& kn = ks->via.array.ptr[i];
    if (kn.type != msgpack::type::MAP) corrupt(path, fmt::format("metadata: amdhsa.kernels[{}] is not a map", i));
    CodeObjectKernel k;
    k.name = str_member(kn, ".name", path, true);
    k.kernarg_segment_size = u32_member(kn, ".kernarg_segment_size", path);
    if (const msgpack::object* as = member(kn, ".args")) {
      if (as->type != msgpack::type::ARRAY) corrupt(path, fmt::format("metadata: kernel {}: .args is not an array", k.name));
      for (uint32_t j = 0; j < as->via.array.size; ++j) {
        const msgpack::object& an = as->via.array.ptr[j];
        if (an.type != msgpack::type::MAP) corrupt(path, fmt::format("metadata: kernel {}: .args[{}] is not a map", k.name, j));
        CodeObjectArg a;
        a.name = str_member(an, ".name", path, false);
        a.value_kind = str_member(an, ".value_kind", path, false);
        a.offset = u32_member(an, ".offset", path);
        a.size = u32_member(an, ".size", path);
        k.args.push_back(std::move(a));
      }
    }
    out.push_back(std::move(k));
  }
  return out;
}

// Whether the symbol tables hold `<kernel>.kd`, the kernel descriptor hipModuleGetFunction finds.
bool has_symbol(Elf* e, const std::string& name) {
  for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(e, scn));) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) || !sh.sh_entsize) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (!d) continue;
    const size_t n = d->d_size / sh.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym s;
      if (!gelf_getsym(d, int(i), &s)) break;
      const char* nm = elf_strptr(e, sh.sh_link, s.st_name);  // bounds-checked by libelf
      if (nm && name == nm) return true;
    }
  }
  return false;
}

}  // namespace

const CodeObjectKernel* CodeObjectInfo::kernel(const std::string& name) const {
  for (const auto& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

std::string elf_gfx_target(std::span<const uint8_t> b, const std::string& path) {
  // Checked by hand first only to say what the file is instead of libelf's generic message.
  if (b.size() < sizeof(Elf64_Ehdr) || std::memcmp(b.data(), ELFMAG, SELFMAG) != 0)
    throw RtError(MLA_ERROR_CODE_OBJECT, fmt::format("{}: not a code object (no ELF header; {} bytes)", path, b.size()));
  ElfHandle e = open_elf(b, path);
  GElf_Ehdr eh;
  if (gelf_getclass(e.get()) != ELFCLASS64 || !gelf_getehdr(e.get(), &eh) || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    throw RtError(MLA_ERROR_CODE_OBJECT, fmt::format("{}: not a little-endian ELF64 code object", path));
  if (eh.e_machine != EM_AMDGPU)
    throw RtError(MLA_ERROR_CODE_OBJECT, fmt::format("{}: ELF machine {} is not AMDGPU ({}): not a GPU code object",
                                                     path, eh.e_machine, EM_AMDGPU));
  const unsigned mach = eh.e_flags & kMachMask;
  const char* n = mach_name(mach);
  return n ? n : fmt::format("unknown-mach-0x{:x}", mach);
}

CodeObjectInfo read_code_object_info(std::span<const uint8_t> b, const std::string& path) {
  CodeObjectInfo info;
  info.target = elf_gfx_target(b, path);
  ElfHandle e = open_elf(b, path);
  size_t nph = 0;
  if (elf_getphdrnum(e.get(), &nph) != 0) corrupt(path, fmt::format("program headers: {}", elf_errmsg(-1)));
  bool found = false;
  for (size_t i = 0; i < nph; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(e.get(), int(i), &ph)) corrupt(path, fmt::format("program header {}: {}", i, elf_errmsg(-1)));
    if (ph.p_type != PT_NOTE) continue;
    // ELF gABI: notes are 4- or 8-byte aligned; the note layout (padding) depends on which.
    if (ph.p_align != 4 && ph.p_align != 8)
      corrupt(path, fmt::format("note segment alignment {} (allowed: 4 or 8)", uint64_t(ph.p_align)));
    if (ph.p_offset > b.size() || ph.p_filesz > b.size() - ph.p_offset)
      corrupt(path, fmt::format("note segment [{}, +{}) lies outside the {}-byte file", uint64_t(ph.p_offset),
                                uint64_t(ph.p_filesz), b.size()));
    Elf_Data* d = elf_getdata_rawchunk(e.get(), int64_t(ph.p_offset), ph.p_filesz,
                                       ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
    if (!d) corrupt(path, fmt::format("note segment: {}", elf_errmsg(-1)));
    // gelf_getnote checks each note's name and descriptor against the chunk (0: malformed).
    size_t at = 0;
    GElf_Nhdr nh;
    size_t name_at = 0, desc_at = 0;
    while (at < d->d_size) {
      size_t next = gelf_getnote(d, at, &nh, &name_at, &desc_at);
      if (next == 0) corrupt(path, fmt::format("malformed note at byte {} of the note segment", at));
      const char* base = static_cast<const char*>(d->d_buf);
      const bool amdgpu = nh.n_namesz == 7 && std::memcmp(base + name_at, "AMDGPU", 7) == 0;
      if (amdgpu && nh.n_type == kNoteTypeAmdgpuMetadata) {
        if (found) corrupt(path, "more than one AMDGPU metadata note");
        found = true;
        info.kernels = parse_metadata({reinterpret_cast<const uint8_t*>(base + desc_at), nh.n_descsz}, path);
      }
      at = next;
    }
  }
  if (!found) corrupt(path, "no AMDGPU metadata note (NT_AMDGPU_METADATA)");
  std::erase_if(info.kernels, [&](const CodeObjectKernel& k) { return !has_symbol(e.get(), k.name + ".kd"); });
  return info;
}

}  // namespace mla::rt
