// Small helpers shared by the generator tests.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mla/build_paths.h"

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mlagen-test-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    auto p = path / name;
    std::ofstream(p) << text;
    return p.string();
  }
  std::string str() const { return path.string(); }
};
