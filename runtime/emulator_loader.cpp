// libmla_runtime.so's emulator backend: loaded from the emulator plugin on first use, so that the
// runtime library carries neither the emulator nor LLVM (runtime/emulator_plugin.h).
#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "runtime/backend.h"
#include "runtime/emulator_plugin.h"

namespace mla::rt {

namespace {

constexpr const char* kPluginFile = "libmla_runtime_emulator.so";

// $MLA_EMULATOR_LIB if set (only it), else the plugin next to this library.
std::vector<std::string> plugin_candidates() {
  if (const char* env = std::getenv("MLA_EMULATOR_LIB"); env && *env) return {env};
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&plugin_candidates), &info) && info.dli_fname && *info.dli_fname)
    return {(std::filesystem::path(info.dli_fname).parent_path() / kPluginFile).string()};
  return {kPluginFile};  // not reached for a loaded library; the loader path then
}

// The factory, loaded once per process; the plugin stays loaded (its code runs every backend).
mla_emulator_backend_create_fn load_factory() {
  static std::mutex mu;
  static mla_emulator_backend_create_fn factory = nullptr;
  std::lock_guard lk(mu);
  if (factory) return factory;
  std::string tried;
  for (const std::string& path : plugin_candidates()) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* err = dlerror();
      tried += fmt::format("\n  {}: {}", path, err ? err : "cannot be loaded");
      continue;
    }
    if (auto* f = reinterpret_cast<mla_emulator_backend_create_fn>(dlsym(h, MLA_EMULATOR_PLUGIN_FACTORY))) {
      factory = f;
      return factory;
    }
    tried += fmt::format("\n  {}: no {} (not the emulator plugin)", path, MLA_EMULATOR_PLUGIN_FACTORY);
    dlclose(h);
  }
  throw RtError(MLA_ERROR_NO_DEVICE,
                fmt::format("the emulator backend is a plugin of libmla_runtime.so and it could not be loaded "
                            "(install {} next to libmla_runtime.so, or point MLA_EMULATOR_LIB at it); tried:{}",
                            kPluginFile, tried));
}

}  // namespace

std::unique_ptr<Backend> make_emulator_backend(const std::string& target) {
  mla_emulator_backend_create_fn create = load_factory();
  Backend* be = nullptr;
  char error[1024] = "";
  int st = create(MLA_EMULATOR_PLUGIN_INTERFACE, MLA_RUNTIME_VERSION, target.c_str(), &be, error, sizeof error);
  if (st != 0 || !be) throw RtError(st ? mla_status(st) : MLA_ERROR_INTERNAL, fmt::format("emulator plugin: {}", error));
  return std::unique_ptr<Backend>(be);
}

}  // namespace mla::rt
