#include "launcher/config/option_values.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <csignal>
#include <random>
#include <regex>

#include "common/signals.h"

namespace ftrun::launcher {

std::optional<int> ToInt(std::string_view s) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

namespace {

// The white space int() and float() strip (Python's Py_ISSPACE; not str.isspace's \x1c..\x1f).
bool PySpace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

std::string_view Strip(std::string_view s) {
  while (!s.empty() && PySpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && PySpace(s.back())) s.remove_suffix(1);
  return s;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Digits with single underscores between them ("1_000"), appended to `out` without them;
// returns where the digits end (`at` when there are none).
size_t TakeDigits(std::string_view s, size_t at, std::string& out) {
  size_t i = at;
  while (i < s.size() && IsDigit(s[i])) {
    out += s[i++];
    if (i + 1 < s.size() && s[i] == '_' && IsDigit(s[i + 1])) ++i;
  }
  return i;
}

// An optional sign, kept only when it is '-'.
size_t TakeSign(std::string_view s, std::string& out) {
  if (s.empty() || (s[0] != '+' && s[0] != '-')) return 0;
  if (s[0] == '-') out += '-';
  return 1;
}

}  // namespace

std::optional<std::string> PythonIntText(std::string_view text) {
  const std::string_view s = Strip(text);
  std::string out;
  const size_t start = TakeSign(s, out);
  const size_t end = TakeDigits(s, start, out);
  if (end == start || end != s.size()) return std::nullopt;
  return out;
}

std::optional<std::string> PythonFloatText(std::string_view text) {
  const std::string_view s = Strip(text);
  std::string out;
  const size_t start = TakeSign(s, out);
  std::string word(s.substr(start));
  std::transform(word.begin(), word.end(), word.begin(), ::tolower);
  if (word == "inf" || word == "infinity" || word == "nan") return out + word;
  size_t i = TakeDigits(s, start, out);
  bool digits = i > start;
  if (i < s.size() && s[i] == '.') {
    out += '.';
    const size_t fraction = i + 1;
    i = TakeDigits(s, fraction, out);
    digits = digits || i > fraction;
  }
  if (!digits) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    out += 'e';
    const size_t sign = i + 1;
    const size_t exponent = sign + TakeSign(s.substr(sign), out);
    i = TakeDigits(s, exponent, out);
    if (i == exponent) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  return out;
}

std::optional<int> PythonInt(std::string_view text) {
  auto clean = PythonIntText(text);
  return clean ? ToInt(*clean) : std::nullopt;
}

Result<std::pair<int, int>> ParseNnodes(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Error{"--nnodes: '" + text + "' " + why +
                 " (expected N or MIN:MAX with 0 < MIN <= MAX)"};
  };
  int lo = 0, hi = 0;
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    auto n = PythonInt(text);
    if (!n) return bad("is not a number");
    lo = hi = *n;
  } else {
    if (text.find(':', colon + 1) != std::string::npos) return bad("has more than one ':'");
    auto l = PythonInt(text.substr(0, colon));
    auto h = PythonInt(text.substr(colon + 1));
    if (!l || !h) return bad("is not of the form MIN:MAX");
    lo = *l;
    hi = *h;
  }
  if (lo <= 0) return bad("needs at least one node");
  if (lo > hi) return bad("has MIN > MAX");
  return std::pair{lo, hi};
}

std::vector<std::string> SplitCommaList(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ',') {
      if (i + 1 < text.size() && text[i + 1] == ',') {
        cur += ',';
        ++i;
      } else {
        out.push_back(cur);
        cur.clear();
      }
    } else {
      cur += text[i];
    }
  }
  out.push_back(cur);
  return out;
}

Result<std::vector<int>> ParseSignalList(const std::string& text) {
  std::vector<int> out;
  for (std::string item : SplitCommaList(text)) {
    item.erase(std::remove_if(item.begin(), item.end(), ::isspace), item.end());
    if (item.empty()) continue;
    std::string upper = item;
    std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
    if (upper.rfind("SIG", 0) != 0) upper = "SIG" + upper;
    std::optional<int> sig = ToInt(item);
    if (auto named = SignalNumber(upper)) sig = named;
    if (!sig || *sig <= 0 || *sig >= NSIG) {
      return Error{"--signals-to-handle: unknown signal '" + item + "'"};
    }
    if (*sig == SIGKILL || *sig == SIGSTOP || *sig == SIGCHLD) {
      return Error{"--signals-to-handle: " + SignalName(*sig) + " cannot be handled"};
    }
    if (std::find(out.begin(), out.end(), *sig) == out.end()) out.push_back(*sig);
  }
  return out;
}

Result<std::vector<int>> ParseStdSpec(const std::string& option, const std::string& spec,
                                      int nproc) {
  static const std::regex kValue("^[0-3]$");
  static const std::regex kMapping("^(\\d:[0-3],)*(\\d:[0-3])$");
  if (std::regex_match(spec, kValue)) return std::vector<int>(nproc, spec[0] - '0');
  if (std::regex_match(spec, kMapping)) {
    std::vector<int> out(nproc, kStdNone);
    for (size_t i = 0; i < spec.size(); i += 4) {
      int rank = spec[i] - '0';
      if (rank < nproc) out[rank] = spec[i + 2] - '0';
    }
    return out;
  }
  return Error{option + ": '" + spec +
               "' is not 0-3 or a local_rank:value list such as 0:3,1:1 (ranks are one digit)"};
}

std::string RandomUuid4() {
  std::random_device rd;
  unsigned char b[16];
  for (auto& x : b) x = static_cast<unsigned char>(rd());
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  std::string out;
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += hex[b[i] >> 4];
    out += hex[b[i] & 15];
  }
  return out;
}

Result<uint64_t> ParseByteSize(const std::string& name, const std::string& text) {
  const Error bad{name + ": '" + text + "' is not a size such as 64MiB, 1G or 1048576"};
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [rest, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || rest == text.data()) return bad;
  int shift = 0;
  if (rest != end) {
    std::string unit(rest, end);
    if (unit.size() == 2 && (unit[1] == 'B' || unit[1] == 'b')) unit.pop_back();
    if (unit.size() == 3 && unit.substr(1) == "iB") unit.resize(1);
    if (unit.size() != 1) return bad;
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : u == 'T' ? 40 : -1;
    if (shift < 0) return bad;
  }
  if (value == 0) return Error{name + ": '" + text + "' must be at least 1 byte"};
  if (shift > 0 && value > (~uint64_t{0} >> shift))
    return Error{name + ": '" + text + "' is too large"};
  return value << shift;
}

}  // namespace ftrun::launcher
