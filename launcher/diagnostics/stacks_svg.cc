#include "launcher/diagnostics/stacks_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "common/markup.h"

namespace ftrun::launcher {
namespace {

constexpr double kWidth = 1200;
constexpr double kRow = 18;
constexpr double kTop = 40;  // the title's band

struct Node {
  std::string label;
  int samples = 0;
  std::set<int> ranks;
  bool native = false;
  std::vector<std::unique_ptr<Node>> children;  // in insertion order
  std::map<std::string, Node*> index;

  Node* Child(const std::string& name, bool is_native) {
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    children.push_back(std::make_unique<Node>());
    children.back()->label = name;
    children.back()->native = is_native;
    index[name] = children.back().get();
    return children.back().get();
  }
};

void AddGroup(Node& root, const StackGroup& g, bool is_native, size_t max_depth) {
  Node* n = &root;
  n->samples += g.threads;
  n->ranks.insert(g.ranks.begin(), g.ranks.end());
  const auto& f = g.stack.frames;
  size_t depth = 0;
  for (auto it = f.rbegin(); it != f.rend() && depth < max_depth; ++it, ++depth) {
    n = n->Child(it->Short(), is_native);
    n->samples += g.threads;
    n->ranks.insert(g.ranks.begin(), g.ranks.end());
  }
}

int Depth(const Node& n) {
  int d = 0;
  for (const auto& c : n.children) d = std::max(d, Depth(*c));
  return d + 1;
}

class Painter {
 public:
  Painter(int total, double height, const std::set<int>& differing)
      : total_(total), height_(height), differing_(differing) {}

  void Paint(const Node& n, double x, int level, std::string& out) const {
    const double w = kWidth * n.samples / std::max(1, total_);
    const double y = height_ - (level + 1) * kRow;
    const bool only_differing =
        !differing_.empty() && std::all_of(n.ranks.begin(), n.ranks.end(),
                                           [&](int r) { return differing_.count(r) != 0; });
    std::vector<int> ranks(n.ranks.begin(), n.ranks.end());
    const std::string fill = only_differing ? "#e0301e"
                             : n.native     ? "#6a9fd8"
                                            : (level % 2 ? "#f2a33a" : "#f6c04d");
    out += fmt::format(
        "<g><title>{} — rank(s) {} ({} thread(s))</title><rect x=\"{:.1f}\" y=\"{:.1f}\" "
        "width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\" rx=\"2\"/>",
        EscapeMarkup(n.label), FoldRanks(ranks), n.samples, x, y, std::max(0.5, w - 0.5), kRow - 1,
        fill);
    const size_t fits = static_cast<size_t>(std::max(0.0, (w - 6) / 7));
    if (fits >= 4) {
      std::string text = n.label + " [" + FoldRanks(ranks) + "]";
      if (text.size() > fits) text = text.substr(0, fits - 2) + "..";
      out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>", x + 3, y + kRow - 5,
                         EscapeMarkup(text));
    }
    out += "</g>\n";
    double cx = x;
    for (const auto& c : n.children) {
      Paint(*c, cx, level + 1, out);
      cx += kWidth * c->samples / std::max(1, total_);
    }
  }

 private:
  int total_;
  double height_;
  const std::set<int>& differing_;
};

}  // namespace

std::string RenderStacksSvg(const MergedStacks& m, const std::string& title, size_t max_depth) {
  Node root;
  root.label = "all ranks";
  Node* python = nullptr;
  Node* native = nullptr;
  for (const auto* list : {&m.main, &m.other}) {
    for (const auto& g : *list) {
      if (!python) python = root.Child("python", false);
      AddGroup(*python, g, false, max_depth);
    }
  }
  for (const auto& g : m.native) {
    if (!native) native = root.Child("native", true);
    AddGroup(*native, g, true, max_depth);
  }
  for (const auto& c : root.children) {
    root.samples += c->samples;
    root.ranks.insert(c->ranks.begin(), c->ranks.end());
  }
  const auto differing_list = m.DifferingRanks();
  const std::set<int> differing(differing_list.begin(), differing_list.end());
  const double height = kTop + Depth(root) * kRow + 10;
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"monospace\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#fdfdf8\"/>\n"
      "<text x=\"6\" y=\"16\" font-size=\"13\">{2}</text>\n"
      "<text x=\"6\" y=\"32\">{3}</text>\n",
      kWidth, height, EscapeMarkup(title), EscapeMarkup(m.Summary()));
  if (root.samples > 0) Painter(root.samples, height - 10, differing).Paint(root, 0, 0, out);
  out += "</svg>\n";
  return out;
}

}  // namespace ftrun::launcher
