// The merged-stacks report files: <dir>/<base>.txt (RenderStacksText) and <dir>/<base>.svg
// (RenderStacksSvg), written next to the job's logs — <log dir>/<run dir>/stacks/ — and
// read by `ftrun report`. `base` is "hang-<round>-<UTC time>" after --hang-timeout and
// "status-<round>-<UTC time>" for `ftrun status --stacks`.
//
// Thread: any (it writes files: small, bounded by the collectors). Errors: name the path.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/diagnostics/stacks_merge.h"

namespace ftrun::launcher {

struct StacksReport {
  MergedStacks merged;
  std::string text;       // the report itself
  std::string text_path;  // "" until written
  std::string svg_path;
};

// Merges `dumps` and renders the report (nothing is written).
StacksReport MakeStacksReport(const std::vector<RankDump>& dumps, const std::string& title,
                              const std::string& native_note);

// "hang-3-20261126T011500Z": `kind`, the round and the UTC time now.
std::string StacksReportBase(const std::string& kind, uint64_t round);

// Writes the SVG, then the text (a reader that sees the text finds both), into `dir` (created
// when missing); sets the paths.
Status WriteStacksReport(const std::string& dir, const std::string& base, StacksReport& report);

}  // namespace ftrun::launcher
