// Tagged register allocator. Every allocation carries a tag (what the registers are for);
// running out names the tag, the request and what is already held, so that a kernel that
// does not fit a target fails at generation time with a readable message.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "program/reg.h"
#include "target/target.h"

namespace mla::gen {

class RegAllocError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RegAllocator {
 public:
  explicit RegAllocator(const Target& t);

  // Registers fixed by the ABI before the kernel starts (kernarg pointer, workgroup IDs, v0).
  SReg reserve_sgpr(int first, int count, const std::string& tag);
  VReg reserve_vgpr(int first, int count, const std::string& tag);

  // `count` consecutive registers; tuples are aligned to min(count, align) as the ISA asks
  // (64-bit SGPR pairs even, x4 resources at multiples of 4; gfx90a+ VGPR/AGPR tuples even).
  SReg sgpr(int count, const std::string& tag, int align = 0);
  VReg vgpr(int count, const std::string& tag, int align = 0);
  AReg agpr(int count, const std::string& tag, int align = 0);

  void release(SReg r);
  void release(VReg r);
  void release(AReg r);

  int sgpr_high_water() const { return files_[0].high; }
  int vgpr_high_water() const { return files_[1].high; }
  int agpr_high_water() const { return files_[2].high; }

 private:
  struct File {
    const char* prefix;
    int limit;
    std::vector<std::string> owner;  // tag per register, empty when free
    int high = 0;
  };
  int take(File& f, int count, int align, const std::string& tag);
  void give(File& f, int first, int count);
  std::string holders(const File& f) const;
  File files_[3];
};

}  // namespace mla::gen
