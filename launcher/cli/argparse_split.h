// argparse's reading of a launcher's command line, before CLI11 sees it: where the script
// starts, which option each word names (an unambiguous prefix names its option), and which
// words are values. CLI11 then parses only the launcher's part, rewritten so that it cannot
// read it differently: every option by its first long name, every value as a word of its own
// (an empty value stays an empty word: `--rdzv_id= --nnodes=2` gives --rdzv-id "" and
// --nnodes 2, as argparse does). The script and its arguments are never looked at: they reach
// the script byte for byte.
// Included only by cli11_support.h (the one CLI11 translation unit).
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ftrun::launcher::cli11 {

struct SplitCommandLine {
  std::vector<std::string> options;    // the launcher's part, for CLI11
  std::vector<std::string> script;     // the script and its arguments, verbatim
  std::set<const CLI::Option*> given;  // the options the command line gave
};

namespace detail {

// argparse's _negative_number_matcher: "-1", "-.5", "-2.0" are values, not options.
inline bool LooksNegativeNumber(const std::string& s) {
  if (s.size() < 2 || s[0] != '-') return false;
  bool digit = false, dot = false;
  for (size_t i = 1; i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      digit = true;
    } else if (s[i] == '.' && !dot) {
      dot = true;
    } else {
      return false;
    }
  }
  return digit;
}

// A word argparse would read as an option (or "--"), so not as a value or the script.
inline bool LooksLikeOption(const std::string& s) {
  if (s.size() < 2 || s[0] != '-') return false;
  return !LooksNegativeNumber(s) && s.find(' ') == std::string::npos;
}

}  // namespace detail

// Splits argv (without argv[0]) as argparse does for `program [options] script [args ...]`.
// `preferred`: long names ("--a-b") that win a prefix shared with other options (a
// personality's own options over ftrun's extensions, so that adding an extension never breaks
// a prefix that used to work). Throws CLI::ParseError with argparse's sentence for an
// ambiguous prefix, a missing value or a value given to a flag, and "unrecognized option" for
// an option the command does not have.
inline SplitCommandLine SplitAtScript(const CLI::App& app, const std::vector<std::string>& argv,
                                      const std::string& program,
                                      const std::set<std::string>& preferred = {}) {
  std::vector<std::pair<std::string, const CLI::Option*>> longs;  // declaration order
  std::map<std::string, const CLI::Option*> shorts;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& l : opt->get_lnames()) longs.emplace_back("--" + l, opt);
    for (const auto& s : opt->get_snames()) shorts["-" + s] = opt;
  }
  auto usage = [](const std::string& message) {
    return CLI::ParseError(message, CLI::ExitCodes::ArgumentMismatch);
  };
  auto lookup_long = [&](const std::string& name) -> const CLI::Option* {
    for (const auto& [n, o] : longs) {
      if (n == name) return o;
    }
    std::vector<const CLI::Option*> matches, preferred_matches;
    for (const auto& [n, o] : longs) {
      if (n.rfind(name, 0) != 0) continue;
      if (std::find(matches.begin(), matches.end(), o) == matches.end()) matches.push_back(o);
      if (preferred.count(n) != 0 && std::find(preferred_matches.begin(), preferred_matches.end(),
                                               o) == preferred_matches.end()) {
        preferred_matches.push_back(o);
      }
    }
    if (matches.size() > 1 && preferred_matches.size() == 1) return preferred_matches.front();
    if (matches.size() > 1) {
      std::string all;
      for (const auto* o : matches) all += (all.empty() ? "" : ", ") + o->get_name();
      throw usage("ambiguous option: " + name + " could match " + all);
    }
    return matches.empty() ? nullptr : matches.front();
  };
  auto unknown = [&](const std::string& word) {
    return usage("unrecognized option '" + word + "' (see " + program + " --help)");
  };

  SplitCommandLine out;
  std::vector<std::string> words = argv;
  size_t i = 0;
  while (i < words.size()) {
    const std::string word = words[i];
    if (word == "--") {
      out.script.assign(words.begin() + static_cast<long>(i) + 1, words.end());
      return out;
    }
    if (!detail::LooksLikeOption(word)) {
      out.script.assign(words.begin() + static_cast<long>(i), words.end());
      return out;
    }
    const CLI::Option* opt = nullptr;
    std::string written;  // the option as the user wrote it, for messages
    std::optional<std::string> value;
    if (word.rfind("--", 0) == 0) {
      const size_t eq = word.find('=');
      written = word.substr(0, eq);
      if (eq != std::string::npos) value = word.substr(eq + 1);
      opt = lookup_long(written);
    } else {
      written = word.substr(0, 2);
      if (auto it = shorts.find(written); it != shorts.end()) opt = it->second;
      if (word.size() > 2) value = word.substr(word[2] == '=' ? 3 : 2);
      // -mr3: a short flag followed by more short options, as argparse reads it; -m3 is
      // argparse's "ignored explicit argument" (-3 is no option), not -m and a script "-3".
      if (opt != nullptr && opt->get_expected_max() == 0 && value && word[2] != '=') {
        if (shorts.count("-" + value->substr(0, 1)) == 0) {
          throw usage("argument " + written + ": ignored explicit argument '" + *value + "'");
        }
        words[i] = "-" + *value;
        out.options.push_back(opt->get_name());
        out.given.insert(opt);
        continue;
      }
    }
    if (opt == nullptr) throw unknown(word);
    out.given.insert(opt);
    const std::string name = opt->get_lnames().empty() ? written : "--" + opt->get_lnames().front();
    ++i;
    if (opt->get_expected_max() == 0) {
      if (value)
        throw usage("argument " + written + ": ignored explicit argument '" + *value + "'");
      out.options.push_back(name);
      continue;
    }
    out.options.push_back(name);
    if (value) {
      out.options.push_back(*value);
      continue;
    }
    int taken = 0;
    while (i < words.size() && taken < opt->get_expected_max() &&
           !detail::LooksLikeOption(words[i])) {
      out.options.push_back(words[i++]);
      ++taken;
    }
    if (taken == 0) {
      throw usage("argument " + written + ": expected " +
                  (opt->get_expected_max() > 1 ? "at least one argument" : "one argument"));
    }
  }
  return out;
}

}  // namespace ftrun::launcher::cli11
