#include "passes/cfg.h"

#include <fmt/format.h>

#include <stdexcept>

namespace mla::gen {

Cfg build_cfg(const Program& p) {
  Cfg cfg;
  const int n = int(p.insts.size());
  std::vector<int> label_block(p.label_names.size(), -1);
  // Split into blocks.
  int begin = 0;
  auto close = [&](int end) {
    if (end > begin || (end == begin && end == n && cfg.blocks.empty())) cfg.blocks.push_back({begin, end, {}, {}});
    begin = end;
  };
  for (int i = 0; i < n; ++i) {
    const Inst& inst = p.insts[i];
    if (inst.cls() == OpClass::Label && i > begin) close(i);
    if (inst.cls() == OpClass::Label) label_block[inst.target] = int(cfg.blocks.size());
    OpClass c = inst.cls();
    if (c == OpClass::Branch || c == OpClass::CondBranch || c == OpClass::EndPgm) close(i + 1);
  }
  if (begin < n) close(n);
  // Edges.
  for (int b = 0; b < int(cfg.blocks.size()); ++b) {
    auto& blk = cfg.blocks[b];
    if (blk.end == blk.begin) continue;
    const Inst& last = p.insts[blk.end - 1];
    auto target_block = [&](int label) {
      if (label < 0 || label >= int(label_block.size()) || label_block[label] < 0)
        throw std::logic_error(fmt::format("kernel {}: branch to label {} that is never bound", p.name,
                                           label >= 0 && label < int(p.label_names.size()) ? p.label_names[label] : "?"));
      return label_block[label];
    };
    bool falls_through = true;
    if (last.cls() == OpClass::Branch) {
      blk.succ.push_back(target_block(last.target));
      falls_through = false;
    } else if (last.cls() == OpClass::CondBranch) {
      blk.succ.push_back(target_block(last.target));
    } else if (last.cls() == OpClass::EndPgm) {
      falls_through = false;
    }
    if (falls_through && b + 1 < int(cfg.blocks.size())) blk.succ.push_back(b + 1);
  }
  for (int b = 0; b < int(cfg.blocks.size()); ++b)
    for (int s : cfg.blocks[b].succ) cfg.blocks[s].pred.push_back(b);
  return cfg;
}

}  // namespace mla::gen
