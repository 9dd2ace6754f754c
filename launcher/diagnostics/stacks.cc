#include "launcher/diagnostics/stacks.h"

#include <algorithm>
#include <charconv>

namespace ftrun::launcher {
namespace {

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    out.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

int ToInt(std::string_view s) {
  int v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

// `  File "path", line N in func`: false when the line is not a frame.
bool ParsePythonFrame(std::string_view line, StackFrame& f) {
  line = Trim(line);
  if (!StartsWith(line, "File \"")) return false;
  line.remove_prefix(6);
  // The path may itself hold quotes; the frame's tail is `", line N in func`.
  const auto tail = line.rfind("\", line ");
  if (tail == std::string_view::npos) return false;
  f.file = std::string(line.substr(0, tail));
  std::string_view rest = line.substr(tail + 8);
  const auto in = rest.find(" in ");
  f.line = ToInt(rest.substr(0, in));
  f.func = in == std::string_view::npos ? "??" : std::string(rest.substr(in + 4));
  return true;
}

}  // namespace

std::string StackFrame::Short() const {
  if (line == 0) return file.empty() ? func : func + " (" + file.substr(file.rfind('/') + 1) + ")";
  return file.substr(file.rfind('/') + 1) + ":" + std::to_string(line) + " in " + func;
}

std::vector<ThreadStack> ParsePythonStacks(std::string_view text, size_t max_threads,
                                           size_t max_frames) {
  std::vector<ThreadStack> threads;
  bool in_thread = false;
  for (std::string_view raw : Lines(text)) {
    std::string_view line = Trim(raw);
    if (line.find("(most recent call first):") != std::string_view::npos) {
      in_thread = threads.size() < max_threads;
      if (!in_thread) continue;
      ThreadStack t;
      t.current = StartsWith(line, "Current thread");
      // "Thread 0x00007f... (most recent call first):" ("Stack (most recent ...)": no id).
      if (auto x = line.find("0x"); x != std::string_view::npos) {
        t.id = std::string(line.substr(x, line.find(' ', x) - x));
      }
      threads.push_back(std::move(t));
      continue;
    }
    StackFrame f;
    if (in_thread && ParsePythonFrame(line, f) && threads.back().frames.size() < max_frames) {
      threads.back().frames.push_back(std::move(f));
    }
  }
  return threads;
}

std::vector<ThreadStack> ParseNativeStacks(std::string_view text, size_t max_threads,
                                           size_t max_frames) {
  std::vector<ThreadStack> threads;
  bool in_thread = false;
  for (std::string_view raw : Lines(text)) {
    std::string_view line = Trim(raw);
    if (StartsWith(line, "TID ")) {
      in_thread = threads.size() < max_threads;
      if (!in_thread) continue;
      ThreadStack t;
      t.id = std::string(line.substr(4, line.find(':') - 4));
      threads.push_back(std::move(t));
      continue;
    }
    if (!in_thread || !StartsWith(line, "#") || threads.back().frames.size() >= max_frames) {
      continue;
    }
    // "#3  0x00007f0000001234 func - /lib/module.so" (function and module optional).
    auto addr = line.find("0x");
    if (addr == std::string_view::npos) continue;
    auto end = line.find(' ', addr);
    std::string_view rest = end == std::string_view::npos ? "" : Trim(line.substr(end));
    StackFrame f;
    if (auto dash = rest.find(" - "); dash != std::string_view::npos) {
      f.file = std::string(Trim(rest.substr(dash + 3)));
      rest = Trim(rest.substr(0, dash));
    }
    f.func = rest.empty() ? "??" : std::string(rest);
    threads.back().frames.push_back(std::move(f));
  }
  return threads;
}

std::string FoldRanks(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace ftrun::launcher
