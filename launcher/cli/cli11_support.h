// CLI11 helpers shared by ftrun's command-line parsers: help formatting, option spellings,
// argparse's prefix matching, and the one parse skeleton every command goes through. Included
// only by the parsers' headers and command_line.cc, the one translation unit that compiles
// CLI11 (it is slow to compile).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "common/version.h"
#include "launcher/cli/parsed.h"

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

// Every command's help: its description, usage line, footer and -h/--help.
inline void Describe(CLI::App& app, const std::string& description, const std::string& usage,
                     const std::string& footer = "") {
  app.description(description);
  app.formatter(std::make_shared<HelpFormatter>(usage));
  app.get_formatter()->column_width(34);
  if (!footer.empty()) app.footer(footer);
  app.set_help_flag("-h,--help", "Show this help and exit");
}

template <class T>
inline constexpr bool kIsOptional = false;
template <class T>
inline constexpr bool kIsOptional<std::optional<T>> = true;

// An option as argparse has it: when repeated the last value wins (scripts rely on it); the
// default is shown unless the variable is optional (it has none). `env`, when not empty, is
// read when the option is absent.
template <class T>
CLI::Option* AddOption(CLI::App& app, const std::string& names, T& var, const std::string& desc,
                       const std::string& group, const std::string& type,
                       const std::string& env = "") {
  CLI::Option* opt = app.add_option(names, var, desc)
                         ->group(group)
                         ->type_name(type)
                         ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  if (!env.empty()) opt->envname(env);
  if constexpr (!kIsOptional<T>) opt->capture_default_str();
  return opt;
}

// What the parse skeleton needs to know of a command besides its CLI11 app.
struct CommandShape {
  // argparse's abbreviations (ExpandPrefixes) with its short options taking a value and its
  // preferred names; off: CLI11's exact names.
  bool abbreviations = false;
  std::set<std::string> short_with_value;
  std::set<std::string> preferred;
  const bool* version = nullptr;  // the --version flag's variable; null: no --version
  std::string version_text;       // what --version prints
  // A command ending in a script: the error when the script is missing, and the program that
  // "see <program> --help" names. Empty script_missing: options only.
  std::string script_missing;
  std::string program;
};

// A launcher's command line (torchrun's, msrun's): argparse's abbreviations, --version
// (printing "ftrun <version><version_suffix>"), and a script at the end.
inline CommandShape LauncherShape(const std::string& program, const bool* version,
                                  const std::string& version_suffix,
                                  const std::string& script_missing) {
  CommandShape shape;
  shape.abbreviations = true;
  shape.version = version;
  shape.version_text = std::string("ftrun ") + kVersion + version_suffix + "\n";
  shape.script_missing = script_missing;
  shape.program = program;
  return shape;
}

// The one parse skeleton: expand prefixes, parse (CLI11 consumes from the back), print --help
// or --version to stdout, turn any error into a usage error, and put the words after the
// options in args.*script (the first) and args.*script_args (the others). `args` is the struct
// the app's options write into. Never throws.
template <class Args>
Parsed<Args> ParseCommand(CLI::App& app, std::vector<std::string> argv, const Args& args,
                          const CommandShape& shape = {}, std::string Args::*script = nullptr,
                          std::vector<std::string> Args::*script_args = nullptr) {
  using Action = typename Parsed<Args>::Action;
  Parsed<Args> out;
  auto usage_error = [&out](std::string error) {
    out.action = Action::kUsageError;
    out.error = std::move(error);
    return out;
  };
  try {
    if (shape.abbreviations) ExpandPrefixes(app, argv, shape.short_with_value, shape.preferred);
    std::reverse(argv.begin(), argv.end());
    app.parse(argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    out.action = Action::kPrintedHelp;
    return out;
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  if (shape.version != nullptr && *shape.version) {
    std::cout << shape.version_text;
    out.action = Action::kPrintedVersion;
    return out;
  }
  out.args = args;
  if (shape.script_missing.empty()) return out;
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  if (rest.empty()) return usage_error(shape.script_missing);
  if (rest.front().size() > 1 && rest.front()[0] == '-') {
    return usage_error("unrecognized option '" + rest.front() + "' (see " + shape.program +
                       " --help)");
  }
  out.args.*script = rest.front();
  (out.args.*script_args).assign(rest.begin() + 1, rest.end());
  return out;
}

}  // namespace ftrun::launcher::cli11
