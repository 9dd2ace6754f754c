#include "launcher/report/report_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "launcher/report/render.h"
#include "launcher/report/report_inputs.h"
#include "launcher/report/timeline.h"

namespace ftrun::launcher::report {

Result<std::string> WriteReport(const std::string& log_dir, const std::string& out,
                                const std::string& event_log) {
  auto inputs = LoadReportInputs(log_dir, event_log);
  if (!inputs) return inputs.error();
  const Timeline timeline =
      BuildTimeline(inputs->events ? inputs->events->records : std::vector<EventRecord>{});
  const std::string html = RenderReportHtml(timeline, *inputs);
  const std::string path =
      out.empty() ? (std::filesystem::path(inputs->run_dir) / "report.html").string() : out;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
    if (!f) return Error{"cannot write " + tmp + ": " + std::strerror(errno)};
    f << html;
    if (!f.flush()) return Error{"cannot write " + tmp + ": " + std::strerror(errno)};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Error{"cannot write " + path + ": " + ec.message()};
  }
  const auto absolute = std::filesystem::absolute(path, ec);
  return Ok(ec ? path : absolute.string());
}

}  // namespace ftrun::launcher::report
