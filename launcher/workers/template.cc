#include "launcher/workers/template.h"

#include <cctype>

namespace ftrun::launcher {
namespace {

bool IdStart(char c) { return c == '_' || std::isalpha(static_cast<unsigned char>(c)); }
bool IdChar(char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); }

}  // namespace

std::string SafeSubstitute(const std::string& text,
                           const std::map<std::string, std::string>& vars) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '$') {
      out += text[i++];
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '$') {
      out += '$';
      i += 2;
      continue;
    }
    bool braced = i + 1 < text.size() && text[i + 1] == '{';
    size_t start = i + (braced ? 2 : 1);
    size_t end = start;
    if (end < text.size() && IdStart(text[end])) {
      while (end < text.size() && IdChar(text[end])) ++end;
    }
    bool valid = end > start && (!braced || (end < text.size() && text[end] == '}'));
    if (valid) {
      auto it = vars.find(text.substr(start, end - start));
      size_t next = braced ? end + 1 : end;
      if (it != vars.end()) {
        out += it->second;
      } else {
        out += text.substr(i, next - i);
      }
      i = next;
    } else {
      out += '$';
      ++i;
    }
  }
  return out;
}

}  // namespace ftrun::launcher
