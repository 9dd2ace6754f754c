#include "rendezvous/topology.h"

#include <fstream>
#include <sstream>

#include "rendezvous/credentials.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {
namespace {

std::vector<std::string> Split(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string_view::npos) end = text.size();
    out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

Status CheckSwitchPath(std::string_view path) {
  if (path.empty()) return {};
  if (path.size() > kMaxSwitchPathBytes) {
    return Error{"switch path longer than " + std::to_string(kMaxSwitchPathBytes) + " bytes"};
  }
  if (!IsPrintable(path) || path.find(' ') != std::string_view::npos) {
    return Error{"switch path '" + std::string(path) +
                 "' holds spaces or bytes that are not printable ASCII"};
  }
  const auto levels = Split(path, '/');
  if (levels.size() > kMaxSwitchLevels) {
    return Error{"switch path '" + std::string(path) + "' has more than " +
                 std::to_string(kMaxSwitchLevels) + " levels"};
  }
  for (const auto& level : levels) {
    if (level.empty()) {
      return Error{"switch path '" + std::string(path) + "' has an empty switch name"};
    }
  }
  return {};
}

Result<TopologyMap> ParseTopology(std::string_view text, const std::string& name) {
  TopologyMap map;
  int line_no = 0;
  for (const std::string& raw : Split(text, '\n')) {
    ++line_no;
    const std::string line = raw.substr(0, raw.find('#'));
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    if (fields.empty()) continue;
    const std::string where = name + " line " + std::to_string(line_no);
    if (fields.size() < 2) {
      return Error{where + ": '" + Printable(line, 200) +
                   "' needs at least one switch and the node's address (e.g. 'asw-0 psw-0 "
                   "10.0.0.1')"};
    }
    const std::string address = fields.back();
    fields.pop_back();
    std::string path;
    for (const auto& f : fields) path += (path.empty() ? "" : "/") + f;
    if (auto ok = CheckSwitchPath(path); !ok) return Error{where + ": " + ok.error().message};
    auto [it, inserted] = map.emplace(address, path);
    if (!inserted && it->second != path) {
      return Error{where + ": " + address + " is listed twice, under " + it->second +
                   " and under " + path};
    }
  }
  return map;
}

Result<TopologyMap> ReadTopologyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read the topology file " + path};
  std::ostringstream text;
  constexpr std::streamsize kMaxBytes = 64 << 20;  // 1,000,000 nodes' lines fit easily
  text << in.rdbuf();
  if (text.tellp() > kMaxBytes) return Error{"the topology file " + path + " is over 64 MiB"};
  return ParseTopology(text.str(), path);
}

std::string SwitchPathOf(const TopologyMap& map, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (auto it = map.find(n); !n.empty() && it != map.end()) return it->second;
  }
  return "";
}

std::vector<std::string> TopologyKey(std::string_view path) {
  if (path.empty()) return {};
  std::vector<std::string> levels = Split(path, '/');
  return {levels.rbegin(), levels.rend()};
}

}  // namespace ftrun::rendezvous
