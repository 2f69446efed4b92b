// mlarun: run one MLA decode problem end to end on the emulator, or write a random problem.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <sstream>

#include "runtime/catalog.h"
#include "runtime/emulator_backend.h"
#include "runtime/problem.h"

using namespace mla::rt;

namespace {

std::vector<int> parse_lens(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string tok; std::getline(ss, tok, ',');) {
    try {
      size_t used = 0;
      long v = std::stol(tok, &used);
      if (used != tok.size() || v < 1 || v > (1l << 30)) throw std::invalid_argument("range");
      out.push_back(int(v));
    } catch (const std::exception&) {
      throw std::invalid_argument(fmt::format("--kv-lens: '{}' is not a positive token count", tok));
    }
  }
  if (out.empty()) throw std::invalid_argument("--kv-lens: give at least one length, e.g. 4099,17");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlarun: run MLA decode problems on the emulator (decode + reduce), or make random problems"};
  std::string catalog_dir, problem_dir;
  int num_cus = 0;
  uint64_t wave_seed = 0;
  app.add_option("--catalog", catalog_dir, "Catalog directory (the --out of mlagen build); default $MLA_CATALOG_DIR");
  app.add_option("--problem", problem_dir, "Problem directory (problem.json + .npy); outputs are written there");
  app.add_option("--cus", num_cus,
                 fmt::format("CUs the planner targets (default: the target's, {} {} / {} {})",
                             mla::abi::facts(Target::gfx942).num_cus, mla::abi::facts(Target::gfx942).product,
                             mla::abi::facts(Target::gfx950).num_cus, mla::abi::facts(Target::gfx950).product));
  app.add_option("--wave-seed", wave_seed, "Randomise wave interleaving with this seed (0: round robin)");
  std::string cascade = "cost_model";
  int prefix_rows = 0;
  app.add_option("--prefix-rows", prefix_rows,
                 "Prefix kernel: 0 the shape's default (48 or 96 rows per workgroup), 192 the wide one (gfx950 fp8/fp8, "
                 "pages of 16 or more: a group of up to 192 rows reads its prefix once)")
      ->check(CLI::IsMember({0, 192}))
      ->capture_default_str();
  app.add_option("--cascade", cascade,
                 "Shared prefixes: cost_model (cascade a group when the planner models it cheaper), always (every "
                 "group the kernels can cascade), never")
      ->check(CLI::IsMember({"cost_model", "always", "never"}))
      ->capture_default_str();

  auto* mk = app.add_subcommand("make-problem", "Write a random problem directory");
  std::string mk_dir, target = "gfx942", dtype = "fp8/fp8", lens;
  int heads = 16, qseqlen = 1, page = 1;
  uint64_t seed = 1;
  bool lse = false;
  double cap = 0;
  mk->add_option("dir", mk_dir, "Directory to write")->required();
  mk->add_option("--target", target, "gfx942 or gfx950")->capture_default_str();
  mk->add_option("--heads", heads, "Query heads")->capture_default_str();
  mk->add_option("--qseqlen", qseqlen, "Query rows per request")->capture_default_str();
  mk->add_option("--dtype", dtype, "q/kv dtype pair: fp8/fp8, bf16/fp8, bf16/bf16")->capture_default_str();
  mk->add_option("--page-size", page, "Tokens per page")->capture_default_str();
  mk->add_option("--kv-lens", lens, "Comma-separated kv lengths, one per request")->required();
  mk->add_option("--seed", seed, "Random seed")->capture_default_str();
  mk->add_flag("--lse", lse, "Ask for lse output");
  std::vector<std::string> shares;
  mk->add_option("--share", shares,
                 "FIRST:COUNT:TOKENS: requests FIRST..FIRST+COUNT-1 share their first TOKENS tokens (whole pages; "
                 "repeatable)");
  mk->add_option("--logit-cap", cap, "Soft-cap value (0 = off)")->capture_default_str();
  int peak_tokens = 0;
  double peak_spread = 3.0;
  mk->add_option("--peak-tokens", peak_tokens,
                 "Peaked scores: tokens per (query row, head) whose key is that query scaled, scored ln(tokens) + "
                 "U(0, --peak-spread) (0 = flat N(0,1) scores; docs/accuracy.md)")
      ->capture_default_str();
  mk->add_option("--peak-spread", peak_spread, "Peaked scores: spread of the peak tokens' scores")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*mk) {
      ProblemParams p;
      p.target = parse_target(target, "--target");
      auto slash = dtype.find('/');
      if (slash == std::string::npos)
        throw std::invalid_argument(fmt::format("--dtype: '{}' (allowed: fp8/fp8, bf16/fp8, bf16/bf16)", dtype));
      p.q_dtype = parse_dtype(dtype.substr(0, slash), "--dtype q");
      p.kv_dtype = parse_dtype(dtype.substr(slash + 1), "--dtype kv");
      p.heads = heads;
      p.qseqlen = qseqlen;
      p.page_size = page;
      p.kv_lens = parse_lens(lens);
      p.seed = seed;
      p.return_lse = lse;
      p.logit_cap = cap;
      if (peak_tokens < 0) throw std::invalid_argument(fmt::format("--peak-tokens {} (allowed: >= 0)", peak_tokens));
      p.peak_tokens = peak_tokens;
      p.peak_spread = peak_spread;
      for (const std::string& s : shares) {
        ProblemParams::Shared sh;
        char c1 = 0, c2 = 0, rest = 0;
        std::istringstream in(s);
        if (!(in >> sh.first >> c1 >> sh.count >> c2 >> sh.tokens) || c1 != ':' || c2 != ':' || (in >> rest))
          throw std::invalid_argument(fmt::format("--share '{}' (allowed: FIRST:COUNT:TOKENS, e.g. 0:16:2048)", s));
        p.shared.push_back(sh);
      }
      Problem prob = make_random_problem(p);
      validate_problem(prob, "make-problem");
      save_problem(mk_dir, prob);
      std::cerr << fmt::format("mlarun: wrote {} ({} requests, {})\n", mk_dir, prob.batch(), shape_of(prob).describe());
      return 0;
    }
    if (problem_dir.empty()) throw std::invalid_argument("--problem DIR is required (or use make-problem)");
    Catalog cat = catalog_dir.empty() ? Catalog::open_from_env() : Catalog::open(catalog_dir);
    Problem prob = load_problem(problem_dir);
    DecodeShape shape = shape_of(prob);
    shape.prefix_rows = prefix_rows;
    Selection sel = cat.select(shape);
    EmulatorRunOptions opts;
    opts.num_cus = num_cus;
    opts.cascade = *mla::rt::parse_cascade_policy(cascade);
    opts.dispatch.random_seed = wave_seed;
    DecodeResult r = run_decode_on_emulator(prob, sel, opts);
    save_outputs(problem_dir, prob, r.o, prob.return_lse ? &r.lse : nullptr, r.stats());
    std::string prefix;
    if (r.ran_prefix)
      prefix = fmt::format(" + {} ({} prefix units; row groups of {} of {} splits on one XCD)", r.prefix_kernel,
                           r.plan.prefix_units.size(), r.plan.prefix_row_group_bundles_one_xcd,
                           r.plan.prefix_row_group_bundles);
    for (const auto& d : r.plan.prefix_groups)
      std::cerr << fmt::format("mlarun: prefix group {}..{} ({} shared tokens): {}: {}\n", d.group.first,
                               d.group.first + d.group.count - 1, d.group.shared_tokens,
                               d.cascade ? "cascade" : "per request", d.reason);
    std::cerr << fmt::format("mlarun: {} units, {} reduce entries; {}{} + {} -> {}\n", r.plan.units.size(),
                             r.plan.reduces.size(), r.ran_decode ? r.decode_kernel : "(no decode units)", prefix,
                             r.ran_reduce ? r.reduce_kernel : "(no reduce)", problem_dir);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "mlarun: error: " << e.what() << "\n";
    return 1;
  }
}
