// One kernel through the whole pipeline up to assembly text:
// spec -> builder -> scheduler -> waitcnt pass -> hazard pass -> printer.
#pragma once
#include <string>

#include "asm/printer.h"
#include "passes/hazards.h"
#include "passes/schedule.h"
#include "passes/waitcnt.h"
#include "program/program.h"
#include "spec/kernel_spec.h"

namespace mla::gen {

struct CompiledKernel {
  KernelSpec spec;
  Program program;  // after the passes
  std::string asm_text;
  std::string asm_sha256;
  KernelResources resources;
  ScheduleStats schedule;
  WaitcntStats waitcnt;
  HazardStats hazards;
};

CompiledKernel compile_kernel(const KernelSpec& spec, int code_object_version = 5);
// Runs the passes on a program built by hand (tests) and prints it; `schedule` runs the
// region scheduler first (compile_kernel does).
CompiledKernel compile_program(Program program, const PrintOptions& opts, bool schedule = false);

std::string sha256_hex(const std::string& bytes);
std::string sha256_file(const std::string& path);

}  // namespace mla::gen
