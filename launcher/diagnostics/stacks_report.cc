#include "launcher/diagnostics/stacks_report.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "launcher/diagnostics/stacks_svg.h"

namespace ftrun::launcher {
namespace {

Status WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    out.close();
    if (!out) return Error{"cannot write " + tmp + ": " + std::strerror(errno)};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);  // readers never see half a report
  if (ec) return Error{"cannot write " + path + ": " + ec.message()};
  return {};
}

}  // namespace

StacksReport MakeStacksReport(const std::vector<RankDump>& dumps, const std::string& title,
                              const std::string& native_note) {
  StacksReport r;
  r.merged = MergeStacks(dumps);
  r.text = RenderStacksText(r.merged, title, native_note);
  return r;
}

std::string StacksReportBase(const std::string& kind, uint64_t round) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &utc);
  return fmt::format("{}-{}-{}", kind, round, when);
}

Status WriteStacksReport(const std::string& dir, const std::string& base, StacksReport& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{"cannot create " + dir + ": " + ec.message()};
  const std::string text = dir + "/" + base + ".txt";
  const std::string svg = dir + "/" + base + ".svg";
  // The flame graph first: whoever sees the text report (a test, `ftrun report`) finds the pair.
  const std::string title = r.text.substr(0, r.text.find('\n'));
  if (auto s = WriteFile(svg, RenderStacksSvg(r.merged, title)); !s) return s;
  if (auto s = WriteFile(text, r.text); !s) return s;
  r.text_path = text;
  r.svg_path = svg;
  return {};
}

}  // namespace ftrun::launcher
