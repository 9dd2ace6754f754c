// CLI11 helpers shared by ftrun's command-line parsers: help formatting, option spellings,
// argparse's prefix matching, and the one parse skeleton every command goes through. Included
// only by the parsers' headers and command_line.cc, the one translation unit that compiles
// CLI11 (it is slow to compile).
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "common/version.h"
#include "launcher/cli/argparse_split.h"
#include "launcher/cli/parsed.h"
#include "launcher/config/option_values.h"

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

template <class T>
struct ValueOf {
  using type = T;
};
template <class T>
struct ValueOf<std::optional<T>> {
  using type = T;
};

// argparse's type=int / type=float: the text (from argv or a PET_* variable) as Python's
// int() or float() reads it (" 2\n", "+2", "1_000"; launcher/config/option_values.h), checked
// and cleaned before CLI11 converts it, so that no conversion error of CLI11's reaches the user
// and CLI11 accepts nothing Python would refuse ("0x10", "0x1p-2"). An empty text is checked
// too (int('') fails).
template <class T>
CLI::Validator NumberCheck() {
  using V = typename ValueOf<T>::type;
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if constexpr (std::is_integral_v<V>) {
          auto clean = PythonIntText(text);
          if (!clean) return "'" + text + "' is not an integer";
          errno = 0;
          const long long v = std::strtoll(clean->c_str(), nullptr, 10);
          if (errno != 0 || v < std::numeric_limits<V>::min() ||
              v > std::numeric_limits<V>::max()) {
            return "'" + text + "' is out of range";
          }
          text = *clean;
        } else {
          auto clean = PythonFloatText(text);
          if (!clean) return "'" + text + "' is not a number";
          text = *clean;
        }
        return "";
      },
      "", "number");
}

// An option as argparse has it: when repeated the last value wins (scripts rely on it); the
// default is shown unless the variable is optional (it has none); a number is checked as
// argparse's type= does. `env`, when not empty, is read when the option is absent.
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
  using V = typename ValueOf<T>::type;
  if constexpr (std::is_arithmetic_v<V> && !std::is_same_v<V, bool>)
    opt->transform(NumberCheck<T>());
  return opt;
}

// CLI11's error as one sentence for the user: its "Could not convert" wording replaced, and
// a value that came from a PET_* variable (the option was not on the command line) blamed on
// the variable.
inline std::string Explain(const CLI::Error& e, const CLI::App& app,
                           const std::set<const CLI::Option*>& given) {
  std::string msg = e.what();
  static const std::string kConvert = "Could not convert: ";
  if (msg.rfind(kConvert, 0) == 0) {
    const size_t sep = msg.find(" = ");
    if (sep != std::string::npos) {
      msg = msg.substr(kConvert.size(), sep - kConvert.size()) + ": '" + msg.substr(sep + 3) +
            "' is not a valid value";
    }
  }
  static const std::string kTrueFalse = "Should be true/false or a number";
  if (size_t at = msg.find(kTrueFalse); at != std::string::npos) {
    msg.replace(at, kTrueFalse.size(), "expected 0 or 1 (or true/false)");
  }
  const size_t colon = msg.find(": ");
  if (colon == std::string::npos) return msg;
  const CLI::Option* opt = app.get_option_no_throw(msg.substr(0, colon));
  if (opt == nullptr || given.count(opt) != 0 || opt->get_envname().empty()) return msg;
  if (std::getenv(opt->get_envname().c_str()) == nullptr) return msg;
  return opt->get_envname() + " (read for " + msg.substr(0, colon) + ")" + msg.substr(colon);
}

// torchrun reads a PET_* variable with os.environ.get, so one set to "" (an unset shell
// variable in `export PET_MASTER_ADDR=$HEAD`) gives its option the empty value, as --opt= on
// the command line does; CLI11 would skip it and use the default (a two-node job on
// 127.0.0.1). Adds such values to split.options (so they are checked like the command line's
// and an error names the variable). A flag's variable is read as torchrun's check_env does,
// bool(int(value)): "1", " 1\n", "-1" and "2" set it, "0" clears it, anything else (also "")
// is an error naming the variable; the flag goes to split.options as --flag=true or =false.
inline std::optional<std::string> ReadPetVariables(const CLI::App& app, SplitCommandLine& split) {
  for (const CLI::Option* opt : app.get_options()) {
    const std::string& variable = opt->get_envname();
    if (split.given.count(opt) != 0 || variable.rfind("PET_", 0) != 0) continue;
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr || opt->get_lnames().empty()) continue;
    const std::string name = "--" + opt->get_lnames().front();
    if (opt->get_expected_max() == 0) {
      auto number = PythonIntText(value);
      if (!number) {
        return variable + " (read for " + name + "): '" + value +
               "' is not a valid value (expected an integer: 0 is off, any other is on)";
      }
      const bool on = number->find_first_not_of("-0") != std::string::npos;
      split.options.push_back(name + (on ? "=true" : "=false"));
    } else if (*value == '\0') {
      split.options.push_back(name);
      split.options.push_back("");
    }
  }
  return std::nullopt;
}

// What the parse skeleton needs to know of a command besides its CLI11 app.
struct CommandShape {
  // argparse's reading (SplitAtScript: abbreviations, values, where the script starts) with
  // its preferred names; off: CLI11's exact names.
  bool abbreviations = false;
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

// The one parse skeleton: split as argparse does, parse the launcher's part (CLI11 consumes
// from the back), print --help or --version to stdout, turn any error into a usage error, and
// put the script's words in args.*script (the first) and args.*script_args (the others),
// untouched. `args` is the struct the app's options write into. Never throws.
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
  SplitCommandLine split;
  try {
    if (shape.abbreviations) {
      split = SplitAtScript(app, argv, shape.program, shape.preferred);
    } else {
      split.options = std::move(argv);
    }
    if (shape.abbreviations) {
      if (auto bad = ReadPetVariables(app, split)) return usage_error(*bad);
    }
    std::vector<std::string> options(split.options.rbegin(), split.options.rend());
    app.parse(options);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    out.action = Action::kPrintedHelp;
    return out;
  } catch (const CLI::ExtrasError&) {
    // argparse's words, not CLI11's ("The following arguments were not expected").
    std::string words;
    for (const auto& w : app.remaining()) words += (words.empty() ? "" : " ") + w;
    return usage_error("unrecognized arguments: " + words + " (see " + app.get_name() + " --help)");
  } catch (const CLI::Error& e) {
    return usage_error(Explain(e, app, split.given));
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  if (shape.version != nullptr && *shape.version) {
    std::cout << shape.version_text;
    out.action = Action::kPrintedVersion;
    return out;
  }
  out.args = args;
  for (const CLI::Option* opt : app.get_options()) {
    if (split.given.count(opt) != 0 || opt->get_envname().empty()) continue;
    if (const char* value = std::getenv(opt->get_envname().c_str())) {
      out.from_env[opt->get_name()] = {opt->get_envname(), value};
    }
  }
  if (shape.script_missing.empty()) return out;
  std::vector<std::string>& rest = split.script;
  if (!shape.abbreviations) {
    rest = app.remaining();
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  }
  if (rest.empty()) return usage_error(shape.script_missing);
  out.args.*script = rest.front();
  (out.args.*script_args).assign(rest.begin() + 1, rest.end());
  return out;
}

}  // namespace ftrun::launcher::cli11
