// Code object loader: ELF via LLVM Object, metadata via LLVM MsgPackDocument.
#include "emulator/code_object.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include <llvm/BinaryFormat/ELF.h>
#include <llvm/BinaryFormat/MsgPackDocument.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>

namespace mla::emu {

unsigned KernelDescriptor::vgpr_alloc() const { return ((rsrc1 & 0x3f) + 1) * 8; }
unsigned KernelDescriptor::sgpr_alloc() const { return (((rsrc1 >> 6) & 0xf) + 1) * 16; }
unsigned KernelDescriptor::accum_offset() const { return ((rsrc3 & 0x3f) + 1) * 4; }
unsigned KernelDescriptor::user_sgpr_count() const { return (rsrc2 >> 1) & 0x1f; }

namespace {

// LLVM's msgpack reader trusts its input (a map key that is itself a map or array crashed it
// in DocNode::toString: issue #15), so the note is checked first: every object complete within
// the blob, map keys scalars (integers, strings, booleans, nil), nesting at most 64 deep.
bool msgpack_object(const uint8_t* p, size_t n, size_t& at, int depth, bool as_key, std::string& why) {
  auto need = [&](size_t k) {
    if (n - at < k) return why = fmt::format("object at byte {} runs past the note's {} bytes", at, n), false;
    return true;
  };
  auto be = [&](size_t k) {
    uint64_t v = 0;
    for (size_t i = 0; i < k; ++i) v = v << 8 | p[at + i];
    at += k;
    return v;
  };
  if (depth > 64) return why = "nesting deeper than 64", false;
  if (!need(1)) return false;
  const uint8_t t = p[at++];
  uint64_t len = 0;
  bool container = false, map = false;
  if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) return true;  // fixint, nil, bool
  if (t >= 0xa0 && t <= 0xbf) len = t & 0x1f;                                      // fixstr
  else if (t >= 0x80 && t <= 0x8f) container = map = true, len = t & 0x0f;         // fixmap
  else if (t >= 0x90 && t <= 0x9f) container = true, len = t & 0x0f;               // fixarray
  else if (t == 0xca || t == 0xcb) return need(t == 0xca ? 4 : 8) && (at += t == 0xca ? 4 : 8, true);
  else if (t >= 0xcc && t <= 0xcf) return need(size_t(1) << (t - 0xcc)) && (at += size_t(1) << (t - 0xcc), true);
  else if (t >= 0xd0 && t <= 0xd3) return need(size_t(1) << (t - 0xd0)) && (at += size_t(1) << (t - 0xd0), true);
  else if (t == 0xd9 || t == 0xc4) { if (!need(1)) return false; len = be(1); }      // str8, bin8
  else if (t == 0xda || t == 0xc5) { if (!need(2)) return false; len = be(2); }      // str16, bin16
  else if (t == 0xdb || t == 0xc6) { if (!need(4)) return false; len = be(4); }      // str32, bin32
  else if (t == 0xdc || t == 0xde) { if (!need(2)) return false; container = true, map = t == 0xde, len = be(2); }
  else if (t == 0xdd || t == 0xdf) { if (!need(4)) return false; container = true, map = t == 0xdf, len = be(4); }
  else return why = fmt::format("msgpack type 0x{:02x} at byte {} (extension types are not metadata)", t, at - 1), false;
  if (container && as_key) return why = fmt::format("a {} as a map key at byte {}", map ? "map" : "array", at - 1), false;
  if (!container) return need(len) && (at += len, true);
  if (len > n - at) return why = fmt::format("{} entries at byte {} cannot fit the note", len, at), false;
  for (uint64_t i = 0; i < len; ++i) {
    if (map && !msgpack_object(p, n, at, depth + 1, true, why)) return false;
    if (!msgpack_object(p, n, at, depth + 1, false, why)) return false;
  }
  return true;
}

bool msgpack_well_formed(const uint8_t* p, size_t n, std::string& why) {
  size_t at = 0;
  return msgpack_object(p, n, at, 0, false, why);
}


[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw Error("loader", fmt::format("code object {}: {}", file, what));
}

template <class T>
T rd(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string node_str(llvm::msgpack::DocNode n) {
  if (n.getKind() == llvm::msgpack::Type::String) return n.getString().str();
  return {};
}
uint64_t node_uint(llvm::msgpack::DocNode n) {
  switch (n.getKind()) {
    case llvm::msgpack::Type::UInt: return n.getUInt();
    case llvm::msgpack::Type::Int: return static_cast<uint64_t>(n.getInt());
    default: return 0;
  }
}

}  // namespace

std::shared_ptr<const CodeObject> CodeObject::load_file(const std::string& path,
                                                        std::optional<Gfx> expect) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return load_bytes(std::move(bytes), path, expect);
}

std::shared_ptr<const CodeObject> CodeObject::load_bytes(std::vector<uint8_t> bytes,
                                                         std::string name,
                                                         std::optional<Gfx> expect) {
  using namespace llvm;
  auto co = std::make_shared<CodeObject>();
  co->name_ = name;
  if (bytes.size() < sizeof(ELF::Elf64_Ehdr) || std::memcmp(bytes.data(), ELF::ElfMagic, 4) != 0)
    fail(name, fmt::format("not an ELF file ({} bytes)", bytes.size()));
  StringRef data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  auto objOr = object::ELF64LEObjectFile::create(MemoryBufferRef(data, name));
  if (!objOr) fail(name, "malformed ELF: " + toString(objOr.takeError()));
  object::ELF64LEObjectFile& obj = *objOr;
  const auto& elf = obj.getELFFile();
  const auto& eh = elf.getHeader();
  if (eh.e_machine != ELF::EM_AMDGPU) fail(name, fmt::format("ELF machine {} is not AMDGPU", (unsigned)eh.e_machine));
  unsigned mach = eh.e_flags & ELF::EF_AMDGPU_MACH;
  if (mach == ELF::EF_AMDGPU_MACH_AMDGCN_GFX942) co->gfx_ = Gfx::gfx942;
  else if (mach == ELF::EF_AMDGPU_MACH_AMDGCN_GFX950) co->gfx_ = Gfx::gfx950;
  else fail(name, fmt::format("unsupported target (e_flags mach 0x{:x}); the emulator runs gfx942 and gfx950 only", mach));
  co->target_id_ = std::string("amdgcn-amd-amdhsa--") + std::string(gfx_name(co->gfx_));
  if (expect && *expect != co->gfx_)
    fail(name, fmt::format("built for {} but {} was requested", gfx_name(co->gfx_), gfx_name(*expect)));

  // Sections with contents that occupy memory.
  auto secs = elf.sections();
  if (!secs) fail(name, "malformed section table: " + toString(secs.takeError()));
  if (secs->size() > bytes.size() / sizeof(ELF::Elf64_Shdr) + 1) fail(name, "malformed section table");
  for (const auto& sh : *secs) {
    if (!(sh.sh_flags & ELF::SHF_ALLOC) || sh.sh_type == ELF::SHT_NOBITS) continue;
    auto contents = elf.getSectionContents(sh);
    if (!contents) fail(name, "truncated section: " + toString(contents.takeError()));
    Section s;
    auto nm = elf.getSectionName(sh);
    if (nm) s.name = nm->str(); else consumeError(nm.takeError());
    s.address = sh.sh_addr;
    s.file_offset = sh.sh_offset;
    s.bytes.assign(contents->begin(), contents->end());
    s.executable = sh.sh_flags & ELF::SHF_EXECINSTR;
    co->sections_.push_back(std::move(s));
  }

  // Kernels: NAME.kd symbols.
  struct FuncSym { uint64_t addr, size; };
  std::map<std::string, FuncSym> funcs;
  std::vector<std::pair<std::string, uint64_t>> kds;
  size_t max_syms = bytes.size() / sizeof(ELF::Elf64_Sym) + 1, nsyms = 0;
  for (const auto& sym : obj.symbols()) {
    if (++nsyms > max_syms) fail(name, "malformed symbol table (more entries than the file can hold)");
    auto nm = sym.getName();
    if (!nm) fail(name, "malformed symbol table: " + toString(nm.takeError()));
    auto addr = sym.getAddress();
    if (!addr) fail(name, "malformed symbol table: " + toString(addr.takeError()));
    std::string n = nm->str();
    if (n.size() > 3 && n.compare(n.size() - 3, 3, ".kd") == 0) kds.emplace_back(n.substr(0, n.size() - 3), *addr);
    else {
      object::ELFSymbolRef es(sym);
      funcs[n] = {*addr, es.getSize()};
    }
  }
  for (auto& [kname, kdaddr] : kds) {
    const uint8_t* p = co->at(kdaddr, 64);
    if (!p) fail(name, fmt::format("kernel descriptor {}.kd at 0x{:x} is outside the loaded sections (truncated?)", kname, kdaddr));
    Kernel k;
    k.name = kname;
    k.kd_address = kdaddr;
    k.kd.group_segment_fixed_size = rd<uint32_t>(p + 0);
    k.kd.private_segment_fixed_size = rd<uint32_t>(p + 4);
    k.kd.kernarg_size = rd<uint32_t>(p + 8);
    k.kd.entry_offset = rd<int64_t>(p + 16);
    k.kd.rsrc3 = rd<uint32_t>(p + 44);
    k.kd.rsrc1 = rd<uint32_t>(p + 48);
    k.kd.rsrc2 = rd<uint32_t>(p + 52);
    k.kd.code_properties = rd<uint16_t>(p + 56);
    k.kd.kernarg_preload = rd<uint16_t>(p + 58);
    k.entry_address = kdaddr + k.kd.entry_offset;
    if (!co->at(k.entry_address, 4)) fail(name, fmt::format("kernel {} entry 0x{:x} is outside the loaded sections", kname, k.entry_address));
    if (k.kd.code_properties & (1u << 10)) fail(name, fmt::format("kernel {} is wave32; gfx942/gfx950 run wave64 only", kname));
    {
      // User SGPRs the dispatch fills (segment buffer 4, dispatch ptr 2, queue ptr 2, kernarg
      // ptr 2, dispatch id 2, flat scratch 2, private segment size 1) plus preloaded kernarg
      // dwords: at most 16 on gfx9 (AMDGPUUsage, "Initial Kernel Execution State"). A larger
      // count would run the initial SGPR writes off the register file.
      static const unsigned kWidth[7] = {4, 2, 2, 2, 2, 2, 1};
      unsigned user = k.kd.preload_length();
      for (int bit = 0; bit < 7; ++bit) user += k.kd.user_sgpr(bit) ? kWidth[bit] : 0;
      if (user > 16 || k.kd.user_sgpr_count() > 16)
        fail(name, fmt::format("kernel {} asks for {} user SGPRs ({} preloaded kernarg dwords; USER_SGPR_COUNT {}): "
                               "at most 16 on gfx9",
                               kname, user, k.kd.preload_length(), k.kd.user_sgpr_count()));
    }
    if (auto it = funcs.find(kname); it != funcs.end()) k.code_size = it->second.size;
    co->kernels_.push_back(std::move(k));
  }

  // Metadata note (optional).
  auto phdrs = elf.program_headers();
  if (!phdrs) fail(name, "malformed program headers: " + toString(phdrs.takeError()));
  for (const auto& ph : *phdrs) {
    if (ph.p_type != ELF::PT_NOTE) continue;
    // LLVM's note iterator asserts on an alignment that is not 4 or 8 (ELF gABI: notes are
    // 4- or 8-byte aligned): refuse it here.
    if (ph.p_align != 4 && ph.p_align != 8)
      fail(name, fmt::format("note segment alignment {} (allowed: 4 or 8)", uint64_t(ph.p_align)));
    llvm::Error err = llvm::Error::success();
    for (const auto& note : elf.notes(ph, err)) {
      if (note.getName() != "AMDGPU" || note.getType() != ELF::NT_AMDGPU_METADATA) continue;
      auto desc = note.getDesc(ph.p_align);
      if (std::string why; !msgpack_well_formed(desc.data(), desc.size(), why))
        fail(name, "malformed msgpack metadata note: " + why);
      msgpack::Document doc;
      StringRef blob(reinterpret_cast<const char*>(desc.data()), desc.size());
      if (!doc.readFromBlob(blob, false)) fail(name, "unreadable msgpack metadata note");
      auto root = doc.getRoot();
      if (root.getKind() != msgpack::Type::Map) fail(name, "metadata root is not a map");
      auto& m = root.getMap();
      if (auto t = m.find(doc.getNode("amdhsa.target")); t != m.end()) {
        std::string tid = node_str(t->second);
        if (!tid.empty()) {
          auto pos = tid.find("gfx");
          auto g = pos == std::string::npos ? std::nullopt : parse_gfx(std::string_view(tid).substr(pos));
          if (!g || *g != co->gfx_) fail(name, "metadata target " + tid + " disagrees with the ELF header");
          co->target_id_ = tid;
        }
      }
      auto ks = m.find(doc.getNode("amdhsa.kernels"));
      if (ks == m.end() || ks->second.getKind() != msgpack::Type::Array) continue;
      for (auto& kn : ks->second.getArray()) {
        if (kn.getKind() != msgpack::Type::Map) continue;
        auto& km = kn.getMap();
        auto get = [&](const char* key) -> std::optional<msgpack::DocNode> {
          auto it = km.find(doc.getNode(key));
          if (it == km.end()) return std::nullopt;
          return it->second;
        };
        std::string kname = get(".name") ? node_str(*get(".name")) : "";
        for (auto& k : co->kernels_) {
          if (k.name != kname) continue;
          k.has_metadata = true;
          if (auto v = get(".kernarg_segment_size")) k.metadata_kernarg_size = node_uint(*v);
          if (auto v = get(".wavefront_size")) k.wavefront_size = node_uint(*v);
          if (auto a = get(".args"); a && a->getKind() == msgpack::Type::Array) {
            for (auto& an : a->getArray()) {
              if (an.getKind() != msgpack::Type::Map) continue;
              auto& am = an.getMap();
              KernelArg arg;
              auto aget = [&](const char* key) -> std::optional<msgpack::DocNode> {
                auto it = am.find(doc.getNode(key));
                if (it == am.end()) return std::nullopt;
                return it->second;
              };
              if (auto v = aget(".name")) arg.name = node_str(*v);
              if (auto v = aget(".value_kind")) arg.value_kind = node_str(*v);
              if (auto v = aget(".address_space")) arg.address_space = node_str(*v);
              if (auto v = aget(".type_name")) arg.type_name = node_str(*v);
              if (auto v = aget(".offset")) arg.offset = node_uint(*v);
              if (auto v = aget(".size")) arg.size = node_uint(*v);
              k.args.push_back(std::move(arg));
            }
          }
        }
      }
    }
    if (err) fail(name, "malformed note segment: " + toString(std::move(err)));
  }
  return co;
}

const Kernel& CodeObject::kernel(std::string_view kname) const {
  for (auto& k : kernels_)
    if (k.name == kname) return k;
  std::string avail;
  for (auto& k : kernels_) avail += (avail.empty() ? "" : ", ") + k.name;
  throw Error("loader", fmt::format("code object {}: no kernel named '{}' (kernels: {})", name_, kname,
                                    avail.empty() ? "none" : avail));
}

const uint8_t* CodeObject::at(uint64_t address, size_t n) const {
  for (auto& s : sections_)
    if (address >= s.address && address + n <= s.address + s.bytes.size() && address + n >= address)
      return s.bytes.data() + (address - s.address);
  return nullptr;
}

}  // namespace mla::emu
