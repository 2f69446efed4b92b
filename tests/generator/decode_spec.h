// A decode KernelSpec for the generator's unit tests (page size 1, no lse, no soft cap).
#pragma once
#include "spec/kernel_spec.h"

namespace mla::gen::test {

inline KernelSpec decode_spec(Arch arch, DType q, DType kv, int heads, int qseqlen = 1) {
  KernelSpec s;
  s.kind = KernelKind::MlaDecode;
  s.arch = arch;
  s.q_dtype = q;
  s.kv_dtype = kv;
  s.heads = heads;
  s.qseqlen = qseqlen;
  s.page_size = 1;
  return s;
}

}  // namespace mla::gen::test
