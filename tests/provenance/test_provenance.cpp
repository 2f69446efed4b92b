// Provenance per instruction form (DESIGN.md, "Semantics must be anchored to hardware"): every
// form (emulator/inst_form.h) that a catalog kernel contains has a row in
// docs/emulator-provenance.md naming its evidence, for each target it is used on. The table is
// the one source of truth; a missing table, row, target or evidence kind is a failure.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "catalog/catalog.h"
#include "config/config.h"
#include "emulator/code_object.h"
#include "emulator/inst_form.h"
#include "emulator/program.h"
#include "generator/test_util.h"
#include "mla/build_paths.h"

namespace fs = std::filesystem;

namespace {

// Evidence kinds, strongest first (docs/emulator-provenance.md, "Evidence kinds").
const std::set<std::string> kKinds = {"aiter", "hw-test", "isa-text", "emulator-only"};
const std::set<std::string> kTargets = {"gfx942", "gfx950"};

struct Row {
  std::set<std::string> targets;
  std::vector<std::string> kinds;
  std::string sources;
  int line = 0;
};

struct Table {
  std::map<std::string, Row> rows;  // by form
  std::vector<std::string> errors;  // "line N: what is wrong"
};

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!trim(cur).empty()) out.push_back(trim(cur));
  return out;
}

// Parses the tables of the "## Forms" section: `| `form` | targets | evidence | sources | pins |`.
// Header rows (first cell "form") and separator rows are skipped; every other table row must be
// a well-formed row.
Table parse_table(const std::string& markdown) {
  Table t;
  std::istringstream in(markdown);
  bool in_forms = false;
  int n = 0;
  static const std::regex separator(R"(^\|[\s:|-]+\|$)");
  for (std::string line; std::getline(in, line);) {
    ++n;
    line = trim(line);
    if (line.rfind("## ", 0) == 0) in_forms = line == "## Forms";
    if (!in_forms || line.empty() || line[0] != '|' || std::regex_match(line, separator)) continue;
    std::vector<std::string> cells;
    {
      std::string body = line.substr(1, line.size() - (line.back() == '|' ? 2 : 1));
      std::string cell;
      std::istringstream cs(body);
      while (std::getline(cs, cell, '|')) cells.push_back(trim(cell));
    }
    if (!cells.empty() && cells[0] == "form") continue;
    auto err = [&](const std::string& what) { t.errors.push_back("line " + std::to_string(n) + ": " + what); };
    if (cells.size() != 5) {
      err(fmt::format("{} cells, want 5 (form | targets | evidence | sources | pins)", cells.size()));
      continue;
    }
    const std::string& f = cells[0];
    if (f.size() < 3 || f.front() != '`' || f.back() != '`') {
      err("form '" + f + "' is not written as `form`");
      continue;
    }
    std::string form = f.substr(1, f.size() - 2);
    Row r;
    r.line = n;
    for (const auto& tg : split(cells[1], ','))
      if (kTargets.count(tg)) r.targets.insert(tg);
      else err("form `" + form + "`: unknown target '" + tg + "'");
    if (r.targets.empty()) err("form `" + form + "`: no target");
    for (const auto& k : split(cells[2], ','))
      if (kKinds.count(k)) r.kinds.push_back(k);
      else err("form `" + form + "`: unknown evidence kind '" + k + "' (aiter, hw-test, isa-text, emulator-only)");
    if (r.kinds.empty()) err("form `" + form + "`: no evidence");
    r.sources = cells[3];
    if (r.sources.empty()) err("form `" + form + "`: no source");
    if (!t.rows.emplace(form, r).second) err("form `" + form + "`: a second row");
  }
  if (t.rows.empty()) t.errors.push_back("no rows in a \"## Forms\" section");
  return t;
}

std::string provenance_path() { return std::string(mla::build::kSourceDir) + "/docs/emulator-provenance.md"; }

// The table, parsed; a missing file or a parse error fails the calling test.
Table load_table() {
  std::ifstream in(provenance_path());
  REQUIRE(in.good());  // a missing table is a failure, never a skip
  std::stringstream ss;
  ss << in.rdbuf();
  Table t = parse_table(ss.str());
  for (const auto& e : t.errors) FAIL_CHECK(provenance_path() << " " << e);
  REQUIRE(t.errors.empty());
  return t;
}

}  // namespace

TEST_CASE("provenance: the table parser rejects rows without evidence, with an unknown kind or target") {
  const std::string good =
      "# x\n## Forms\n| form | targets | evidence | sources | pins |\n|---|---|---|---|---|\n"
      "| `s_nop` | gfx942, gfx950 | isa-text | CDNA3 ISA, SOPP | wait states |\n"
      "| `v_perm_b32` | gfx942 | hw-test, emulator-only | CK type_convert | byte select |\n## Other\n| a | b |\n";
  Table t = parse_table(good);
  CHECK(t.errors.empty());
  REQUIRE(t.rows.size() == 2);
  CHECK(t.rows.at("v_perm_b32").kinds == std::vector<std::string>{"hw-test", "emulator-only"});
  CHECK(t.rows.at("s_nop").targets == std::set<std::string>{"gfx942", "gfx950"});

  auto first_error = [](const std::string& row) {
    Table b = parse_table("## Forms\n| form | targets | evidence | sources | pins |\n" + row + "\n");
    return b.errors.empty() ? std::string() : b.errors[0];
  };
  CHECK_THAT(first_error("| `s_nop` | gfx942 |  | CDNA3 ISA | x |"), Catch::Contains("`s_nop`: no evidence"));
  CHECK_THAT(first_error("| `s_nop` | gfx942 | folklore | CDNA3 ISA | x |"), Catch::Contains("unknown evidence kind 'folklore'"));
  CHECK_THAT(first_error("| `s_nop` | gfx90a | isa-text | CDNA3 ISA | x |"), Catch::Contains("unknown target 'gfx90a'"));
  CHECK_THAT(first_error("| `s_nop` | gfx942 | isa-text |  | x |"), Catch::Contains("no source"));
  CHECK_THAT(first_error("| s_nop | gfx942 | isa-text | ISA | x |"), Catch::Contains("not written as `form`"));
  CHECK_THAT(first_error("| `s_nop` | gfx942 | isa-text |"), Catch::Contains("3 cells, want 5"));
  CHECK_THAT(parse_table("# no forms here\n").errors.at(0), Catch::Contains("no rows"));
}

TEST_CASE("provenance: docs/emulator-provenance.md parses, every row has known evidence") {
  CHECK_FALSE(load_table().rows.empty());
}

TEST_CASE("provenance: every form of every catalog kernel (configs/*.json, both targets) has a row for its target") {
  Table t = load_table();

  std::vector<std::string> configs;
  for (const auto& e : fs::directory_iterator(std::string(mla::build::kSourceDir) + "/configs"))
    if (e.path().extension() == ".json") configs.push_back(e.path().string());
  std::sort(configs.begin(), configs.end());
  REQUIRE(!configs.empty());

  TempDir dir;
  mla::gen::BuildOptions opts;
  opts.out_dir = dir.str();
  opts.jobs = 2;
  mla::gen::build_catalog(mla::gen::load_configs(configs), opts);

  // form -> target -> first kernel using it
  std::map<std::string, std::map<std::string, std::string>> used;
  int kernels = 0;
  for (const std::string target : {"gfx942", "gfx950"}) {
    fs::path mla_dir = dir.path / "hsa" / target / "mla";
    REQUIRE(fs::is_directory(mla_dir));
    std::vector<fs::path> cos;
    for (const auto& e : fs::directory_iterator(mla_dir))
      if (e.path().extension() == ".co") cos.push_back(e.path());
    std::sort(cos.begin(), cos.end());
    REQUIRE(!cos.empty());
    for (const auto& co_path : cos) {
      auto co = mla::emu::CodeObject::load_file(co_path.string());
      for (const auto& k : co->kernels()) {
        ++kernels;
        for (const auto& [form, count] : mla::emu::forms_of(*mla::emu::build_program(co, k)))
          used[form].emplace(target, k.name + " (" + co_path.filename().string() + ")");
      }
    }
  }
  REQUIRE(kernels > 0);

  std::map<std::string, int> per_kind;
  int missing = 0;
  for (const auto& [form, targets] : used) {
    auto it = t.rows.find(form);
    for (const auto& [target, kernel] : targets) {
      if (it == t.rows.end()) {
        ++missing;
        FAIL_CHECK(target << " kernel " << kernel << ": form `" << form << "` has no row in " << provenance_path());
      } else if (!it->second.targets.count(target)) {
        ++missing;
        FAIL_CHECK(target << " kernel " << kernel << ": form `" << form << "` (line " << it->second.line
                          << ") does not list target " << target);
      }
    }
    if (it != t.rows.end())
      for (const auto& k : it->second.kinds) ++per_kind[k];
  }
  CHECK(missing == 0);
  std::string summary = fmt::format("{} kernels, {} forms;", kernels, used.size());
  for (const auto& [k, n] : per_kind) summary += fmt::format(" {} {}", k, n);
  WARN(summary);
}

// An `aiter` claim (sources: "aiter: gfx950 <kernel> (+N more), gfx942 <kernel>; ...") must be
// backed by docs/aiter-oracle-forms.json: a passing run of the named kernel on that target
// executed the form. The file is measured data (mlaoracle --forms-out), committed beside the table.
TEST_CASE("provenance: every aiter claim names a passing aiter run that executed the form") {
  Table t = load_table();
  std::ifstream jf(std::string(mla::build::kSourceDir) + "/docs/aiter-oracle-forms.json");
  REQUIRE(jf.good());
  nlohmann::json j;
  jf >> j;
  // (target, kernel) -> forms executed by its passing runs
  std::map<std::pair<std::string, std::string>, std::set<std::string>> executed;
  for (const auto& r : j.at("runs")) {
    REQUIRE(r.at("pass").get<bool>());
    auto& s = executed[{r.at("target").get<std::string>(), r.at("kernel").get<std::string>()}];
    for (const auto& [form, count] : r.at("forms").items()) s.insert(form);
  }
  int claims = 0;
  static const std::regex claim(R"((gfx94[2]|gfx950) ([A-Za-z0-9_]+))");
  for (const auto& [form, row] : t.rows) {
    const bool kind = std::find(row.kinds.begin(), row.kinds.end(), "aiter") != row.kinds.end();
    const auto at = row.sources.find("aiter:");
    CHECK(kind == (at != std::string::npos));  // the kind and its source come together
    if (!kind || at == std::string::npos) continue;
    const std::string list = row.sources.substr(at + 6, row.sources.find(';', at) - at - 6);
    int named = 0;
    for (std::sregex_iterator m(list.begin(), list.end(), claim), end; m != end; ++m) {
      ++named, ++claims;
      const std::string target = (*m)[1], kernel = (*m)[2];
      INFO("line " << row.line << ": `" << form << "` claims " << target << " " << kernel);
      CHECK(row.targets.count(target));
      auto e = executed.find({target, kernel});
      REQUIRE(e != executed.end());
      CHECK(e->second.count(form));
    }
    CHECK(named > 0);
  }
  CHECK(claims >= 70);
}
