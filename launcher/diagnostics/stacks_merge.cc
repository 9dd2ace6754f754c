#include "launcher/diagnostics/stacks_merge.h"

#include <fmt/format.h>

#include <algorithm>

namespace ftrun::launcher {
namespace {

std::string Key(const ThreadStack& t) {
  std::string k;
  for (const auto& f : t.frames)
    k += f.file + "\x1f" + std::to_string(f.line) + "\x1f" + f.func + "\x1e";
  return k;
}

// Groups (rank, thread) pairs by their stack; largest group first, then lowest rank.
class Grouper {
 public:
  void Add(int rank, const ThreadStack& t) {
    auto [it, fresh] = index_.try_emplace(Key(t), groups_.size());
    if (fresh) groups_.push_back(StackGroup{{}, t, false, 0});
    StackGroup& g = groups_[it->second];
    if (g.ranks.empty() || g.ranks.back() != rank) g.ranks.push_back(rank);
    ++g.threads;
  }
  std::vector<StackGroup> Take() {
    for (auto& g : groups_) {
      std::sort(g.ranks.begin(), g.ranks.end());
      g.ranks.erase(std::unique(g.ranks.begin(), g.ranks.end()), g.ranks.end());
    }
    std::stable_sort(groups_.begin(), groups_.end(), [](const auto& a, const auto& b) {
      if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
      return a.ranks.front() < b.ranks.front();
    });
    return std::move(groups_);
  }

 private:
  std::map<std::string, size_t> index_;
  std::vector<StackGroup> groups_;
};

// The rank's main thread: the one running the script's module code, else the thread that
// dumped, else the first.
size_t MainIndex(const std::vector<ThreadStack>& threads) {
  for (size_t i = 0; i < threads.size(); ++i) {
    if (threads[i].IsMain()) return i;
  }
  for (size_t i = 0; i < threads.size(); ++i) {
    if (threads[i].current) return i;
  }
  return 0;
}

std::string Where(const StackGroup& g) {
  return g.stack.frames.empty() ? "<no Python frame>" : g.stack.frames.front().Short();
}

void RenderGroup(const StackGroup& g, int rank_count, const std::string& what, std::string& out) {
  out += fmt::format(
      "\n{} rank(s) {} ({} of {}){}{}:\n", what, FoldRanks(g.ranks), g.ranks.size(), rank_count,
      g.threads > static_cast<int>(g.ranks.size()) ? fmt::format(", {} threads", g.threads) : "",
      g.differs ? "  <-- differs from the majority" : "");
  if (g.stack.frames.empty()) out += "  <no frame>\n";
  for (const auto& f : g.stack.frames) {
    if (f.line > 0) {
      out += fmt::format("  File \"{}\", line {} in {}\n", f.file, f.line, f.func);
    } else {
      out += fmt::format("  {}{}\n", f.func, f.file.empty() ? "" : " - " + f.file);
    }
  }
}

}  // namespace

std::vector<int> MergedStacks::DifferingRanks() const {
  std::vector<int> out;
  for (const auto& g : main) {
    if (g.differs) out.insert(out.end(), g.ranks.begin(), g.ranks.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string MergedStacks::Summary() const {
  if (main.empty()) {
    return fmt::format("no Python stack from any of the {} rank(s)", rank_count);
  }
  std::string no =
      no_stack.empty() ? "" : fmt::format("; no stack from rank(s) {}", FoldRanks(no_stack));
  if (main.size() == 1) {
    return fmt::format("all {} rank(s) with a stack ({}) at {}{}", main.front().ranks.size(),
                       FoldRanks(main.front().ranks), Where(main.front()), no);
  }
  std::string where;
  for (const auto& g : main) {
    if (!g.differs) continue;
    where += (where.empty() ? "" : "; ") +
             (g.ranks.size() == DifferingRanks().size() ? "" : FoldRanks(g.ranks) + " at ") +
             Where(g);
  }
  return fmt::format("rank(s) {} stuck where the others are not ({} at {}): {}{}",
                     FoldRanks(DifferingRanks()), FoldRanks(main.front().ranks),
                     Where(main.front()), where, no);
}

MergedStacks MergeStacks(const std::vector<RankDump>& dumps) {
  MergedStacks m;
  m.rank_count = static_cast<int>(dumps.size());
  Grouper main, other, native;
  for (const auto& d : dumps) {
    if (!d.note.empty()) m.notes[d.rank] = d.note;
    auto threads = ParsePythonStacks(d.python);
    if (threads.empty()) {
      m.no_stack.push_back(d.rank);
    } else {
      const size_t mi = MainIndex(threads);
      for (size_t i = 0; i < threads.size(); ++i) {
        (i == mi ? main : other).Add(d.rank, threads[i]);
      }
    }
    for (const auto& t : ParseNativeStacks(d.native)) native.Add(d.rank, t);
  }
  m.main = main.Take();
  m.other = other.Take();
  m.native = native.Take();
  std::sort(m.no_stack.begin(), m.no_stack.end());
  // The largest group is where a collective's waiting ranks are; the others differ.
  for (size_t i = 1; i < m.main.size(); ++i) m.main[i].differs = true;
  return m;
}

std::string RenderStacksText(const MergedStacks& m, const std::string& title,
                             const std::string& native_note) {
  std::string out = title + "\n" + m.Summary() + "\n";
  out += "\n== Python, main thread of each rank (most recent call first) ==\n";
  for (const auto& g : m.main) RenderGroup(g, m.rank_count, "main thread of", out);
  if (!m.other.empty()) {
    out += "\n== Python, other threads ==\n";
    for (const auto& g : m.other) RenderGroup(g, m.rank_count, "thread of", out);
  }
  out += "\n== Native ==\n";
  if (m.native.empty()) {
    out +=
        "not collected: " + (native_note.empty() ? std::string("no native stack") : native_note) +
        "\n";
  }
  for (const auto& g : m.native) RenderGroup(g, m.rank_count, "thread of", out);
  if (!m.no_stack.empty()) {
    out += "\n== No Python stack ==\n";
    for (int r : m.no_stack) {
      auto n = m.notes.find(r);
      out += fmt::format("rank {}: {}\n", r, n == m.notes.end() ? "no stack" : n->second);
    }
  }
  return out;
}

}  // namespace ftrun::launcher
