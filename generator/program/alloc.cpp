#include "program/alloc.h"

#include <fmt/format.h>

#include <algorithm>

namespace mla::gen {

RegAllocator::RegAllocator(const Target& t)
    : files_{{"s", t.max_sgprs, std::vector<std::string>(t.max_sgprs), 0},
             {"v", t.max_vgprs, std::vector<std::string>(t.max_vgprs), 0},
             {"a", t.max_agprs, std::vector<std::string>(t.max_agprs), 0}} {}

std::string RegAllocator::holders(const File& f) const {
  // Summarise contiguous runs by tag: "kernarg[0:1] q_tile[4:11] ..."
  std::string out;
  int i = 0;
  while (i < f.limit) {
    if (f.owner[i].empty()) { ++i; continue; }
    int j = i;
    while (j + 1 < f.limit && f.owner[j + 1] == f.owner[i]) ++j;
    out += fmt::format(" {}{}[{}:{}]", f.owner[i], "", i, j);
    i = j + 1;
  }
  return out.empty() ? " (none)" : out;
}

int RegAllocator::take(File& f, int count, int align, const std::string& tag) {
  if (count <= 0) throw RegAllocError(fmt::format("register request '{}' asks for {} registers", tag, count));
  if (align <= 0) align = std::min(count, f.prefix[0] == 's' ? 4 : 2);
  if (count == 1) align = 1;
  for (int first = 0; first + count <= f.limit; first += align) {
    bool free = std::all_of(f.owner.begin() + first, f.owner.begin() + first + count,
                            [](const std::string& o) { return o.empty(); });
    if (!free) continue;
    std::fill(f.owner.begin() + first, f.owner.begin() + first + count, tag);
    f.high = std::max(f.high, first + count);
    return first;
  }
  int used = int(std::count_if(f.owner.begin(), f.owner.end(), [](const std::string& o) { return !o.empty(); }));
  throw RegAllocError(fmt::format(
      "out of {}GPRs allocating '{}' ({} registers, alignment {}): {} of {} in use by:{}",
      char(std::toupper(f.prefix[0])), tag, count, align, used, f.limit, holders(f)));
}

void RegAllocator::give(File& f, int first, int count) {
  for (int i = first; i < first + count; ++i) f.owner[i].clear();
}

SReg RegAllocator::reserve_sgpr(int first, int count, const std::string& tag) {
  for (int i = first; i < first + count; ++i) {
    if (!files_[0].owner[i].empty())
      throw RegAllocError(fmt::format("s{} reserved for '{}' is already held by '{}'", i, tag, files_[0].owner[i]));
    files_[0].owner[i] = tag;
  }
  files_[0].high = std::max(files_[0].high, first + count);
  return SReg(uint16_t(first), uint16_t(count));
}

VReg RegAllocator::reserve_vgpr(int first, int count, const std::string& tag) {
  for (int i = first; i < first + count; ++i) {
    if (!files_[1].owner[i].empty())
      throw RegAllocError(fmt::format("v{} reserved for '{}' is already held by '{}'", i, tag, files_[1].owner[i]));
    files_[1].owner[i] = tag;
  }
  files_[1].high = std::max(files_[1].high, first + count);
  return VReg(uint16_t(first), uint16_t(count));
}

SReg RegAllocator::sgpr(int count, const std::string& tag, int align) {
  return SReg(uint16_t(take(files_[0], count, align, tag)), uint16_t(count));
}
VReg RegAllocator::vgpr(int count, const std::string& tag, int align) {
  return VReg(uint16_t(take(files_[1], count, align, tag)), uint16_t(count));
}
AReg RegAllocator::agpr(int count, const std::string& tag, int align) {
  return AReg(uint16_t(take(files_[2], count, align, tag)), uint16_t(count));
}

void RegAllocator::release(SReg r) { give(files_[0], r.first, r.count); }
void RegAllocator::release(VReg r) { give(files_[1], r.first, r.count); }
void RegAllocator::release(AReg r) { give(files_[2], r.first, r.count); }

}  // namespace mla::gen
