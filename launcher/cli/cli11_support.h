// CLI11 helpers shared by ftrun's command-line parsers: help formatting, option spellings,
// and argparse's prefix matching. Included only by command_line.cc, the one translation unit
// that compiles CLI11 (it is slow to compile).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ftrun::launcher::cli11 {

// Shows "--a-b" (not every alias) and the default in the description, so --help stays readable.
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(std::string usage) : usage_(std::move(usage)) {}
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    if (is_positional) return opt->get_name(true, false);
    std::string out;
    for (const auto& s : opt->get_snames()) out += "-" + s + ", ";
    if (!opt->get_lnames().empty()) out += "--" + opt->get_lnames().front();
    return out;
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return "";
    return " " + opt->get_type_name();
  }
  std::string make_usage(const CLI::App*, std::string) const override {
    return "\nusage: " + usage_ + "\n";
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string desc = opt->get_description();
    if (!opt->get_default_str().empty()) desc += " [default: " + opt->get_default_str() + "]";
    return desc;
  }

 private:
  std::string usage_;
};

// "nproc-per-node" -> {"--nproc-per-node", "--nproc_per_node"}, env PET_NPROC_PER_NODE.
inline std::string Names(const std::string& dashed, const std::string& short_name = "") {
  std::string names = short_name.empty() ? "" : "-" + short_name + ",";
  names += "--" + dashed;
  std::string underscored = dashed;
  std::replace(underscored.begin(), underscored.end(), '-', '_');
  if (underscored != dashed) names += ",--" + underscored;
  return names;
}

inline std::string PetName(const std::string& dashed) {
  std::string env = "PET_";
  for (char c : dashed) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return env;
}

// argparse accepts any unambiguous prefix of a long option; CLI11 does not, so expand them in
// argv, up to the first positional argument (the script). `short_with_value` are the short
// options that take a separate value (-r 3). When a prefix matches several options and exactly
// one of them is in `preferred`, that one wins (a personality's own options over ftrun's
// extensions, so that adding an extension never breaks a prefix that used to work).
// Throws CLI::ParseError for an ambiguous prefix; leaves unknown options for the caller.
inline void ExpandPrefixes(const CLI::App& app, std::vector<std::string>& argv,
                           const std::set<std::string>& short_with_value,
                           const std::set<std::string>& preferred = {}) {
  std::map<std::string, const CLI::Option*> by_name;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) by_name["--" + l] = opt;
  }
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string& arg = argv[i];
    if (arg == "--" || arg.rfind("-", 0) != 0) return;  // the script starts here
    if (arg.rfind("--", 0) != 0) {                      // short option: -r 3, -r3, -m
      if (short_with_value.count(arg) != 0) ++i;
      continue;
    }
    size_t eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    const CLI::Option* opt = nullptr;
    if (auto it = by_name.find(name); it != by_name.end()) {
      opt = it->second;
    } else {
      std::set<const CLI::Option*> matches, preferred_matches;
      for (const auto& [n, o] : by_name) {
        if (n.rfind(name, 0) != 0) continue;
        matches.insert(o);
        if (preferred.count(n) != 0) preferred_matches.insert(o);
      }
      if (matches.size() > 1 && preferred_matches.size() == 1) matches = preferred_matches;
      if (matches.size() > 1) {
        std::string all;
        for (const auto* o : matches) all += (all.empty() ? "" : ", ") + o->get_name();
        throw CLI::ParseError("ambiguous option '" + name + "' could match " + all,
                              CLI::ExitCodes::ArgumentMismatch);
      }
      if (matches.empty()) return;  // unknown: reported by the caller
      opt = *matches.begin();
      arg = "--" + opt->get_lnames().front() + (eq == std::string::npos ? "" : arg.substr(eq));
    }
    if (eq == std::string::npos && opt->get_type_size() != 0) {
      ++i;  // skip its value
      // An option taking several values (nargs='+') takes every following non-option.
      while (opt->get_expected_max() > 1 && i + 1 < argv.size() && argv[i + 1].rfind("-", 0) != 0) {
        ++i;
      }
    }
  }
}

}  // namespace ftrun::launcher::cli11
