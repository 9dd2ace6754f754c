// Parsing, merging, folding and drawing of merged stacks (launcher/diagnostics/).
#include "launcher/diagnostics/stacks.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "launcher/diagnostics/stacks_merge.h"
#include "launcher/diagnostics/stacks_svg.h"

namespace ftrun::testing {
namespace {

using launcher::FoldRanks;
using launcher::MergeStacks;
using launcher::ParseNativeStacks;
using launcher::ParsePythonStacks;
using launcher::RankDump;

// What faulthandler writes for a rank waiting in all_reduce (a gloo thread and the main one).
const char* kInAllReduce = R"(Thread 0x00007f1e2a7fc640 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3/dist-packages/ftrun/control.py", line 190 in _read
  File "/usr/lib/python3.11/threading.py", line 975 in run
  File "/usr/lib/python3.11/threading.py", line 1038 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap

Current thread 0x00007f1e3b2f1000 (most recent call first):
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 2050 in all_reduce
  File "/work/train.py", line 30 in step
  File "/work/train.py", line 50 in <module>
)";

const char* kInUserCode = R"(Thread 0x00007f1e2a7fc640 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3/dist-packages/ftrun/control.py", line 190 in _read
  File "/usr/lib/python3.11/threading.py", line 975 in run
  File "/usr/lib/python3.11/threading.py", line 1038 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap

Current thread 0x00007f1e3b2f1000 (most recent call first):
  File "/work/train.py", line 42 in slow_step
  File "/work/train.py", line 29 in step
  File "/work/train.py", line 50 in <module>
)";

RankDump Dump(int rank, const std::string& python, const std::string& native = "") {
  RankDump d;
  d.rank = rank;
  d.host = "node" + std::to_string(rank / 4);
  d.python = python;
  d.native = native;
  return d;
}

TEST(FoldRanks, FoldsRunsIntoRangesAndSortsAndDropsDuplicates) {
  EXPECT_EQ(FoldRanks({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(FoldRanks({8, 3, 1, 2, 0, 3}), "0-3,8");
  EXPECT_EQ(FoldRanks({5}), "5");
  EXPECT_EQ(FoldRanks({1, 3, 5}), "1,3,5");
  EXPECT_EQ(FoldRanks({0, 1, 4, 5, 6, 9}), "0-1,4-6,9");
  EXPECT_EQ(FoldRanks({}), "");
}

TEST(ParsePythonStacks, ReadsThreadsAndFramesOfAFaulthandlerDump) {
  auto t = ParsePythonStacks(kInAllReduce);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].id, "0x00007f1e2a7fc640");
  EXPECT_FALSE(t[0].current);
  EXPECT_FALSE(t[0].IsMain());
  EXPECT_EQ(t[0].frames.size(), 5u);
  EXPECT_TRUE(t[1].current);
  EXPECT_TRUE(t[1].IsMain());
  ASSERT_EQ(t[1].frames.size(), 3u);
  EXPECT_EQ(t[1].frames[0].func, "all_reduce");
  EXPECT_EQ(t[1].frames[0].line, 2050);
  EXPECT_EQ(t[1].frames[1].Short(), "train.py:30 in step");
}

TEST(ParsePythonStacks, SkipsNoiseAndKeepsWithinItsBounds) {
  EXPECT_TRUE(ParsePythonStacks("").empty());
  EXPECT_TRUE(ParsePythonStacks("Traceback: nothing here\n  File \"x\", line 1 in y\n").empty());
  // A cut dump and a path with quotes still parse.
  auto t = ParsePythonStacks(
      "Stack (most recent call first):\n  File \"/a \"b\".py\", line 7 in f\n  File \"/tr");
  ASSERT_EQ(t.size(), 1u);
  ASSERT_EQ(t[0].frames.size(), 1u);
  EXPECT_EQ(t[0].frames[0].file, "/a \"b\".py");
  std::string many;
  for (int i = 0; i < 10; ++i) many += kInAllReduce;
  EXPECT_EQ(ParsePythonStacks(many, 3, 2).size(), 3u);
  EXPECT_EQ(ParsePythonStacks(many, 3, 2)[0].frames.size(), 2u);
}

TEST(ParseNativeStacks, ReadsEuStackOutput) {
  auto t = ParseNativeStacks(
      "PID 4242 - process\nTID 4242:\n#0  0x00007f0a1b2c3d4e __select\n"
      "#1  0x000055d6b3f2c7e0 time_sleep - /usr/bin/python3.11\n#2  0x0000000000000001\n"
      "TID 4243:\n#0  0x00007f0a1b2c3d4e pthread_cond_wait@@GLIBC_2.3.2\n");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].id, "4242");
  ASSERT_EQ(t[0].frames.size(), 3u);
  EXPECT_EQ(t[0].frames[0].func, "__select");
  EXPECT_EQ(t[0].frames[1].file, "/usr/bin/python3.11");
  EXPECT_EQ(t[0].frames[2].func, "??");
  EXPECT_EQ(t[1].frames[0].func, "pthread_cond_wait@@GLIBC_2.3.2");
}

TEST(MergeStacks, TheRankInUserCodeDiffersFromTheRanksInAllReduce) {
  auto m = MergeStacks(
      {Dump(0, kInAllReduce), Dump(1, kInAllReduce), Dump(2, kInAllReduce), Dump(3, kInUserCode)});
  ASSERT_EQ(m.main.size(), 2u);
  EXPECT_EQ(m.main[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(m.main[0].differs);
  EXPECT_EQ(m.main[1].ranks, std::vector<int>{3});
  EXPECT_TRUE(m.main[1].differs);
  EXPECT_EQ(m.DifferingRanks(), std::vector<int>{3});
  // The control thread is the same everywhere: one group of 4.
  ASSERT_EQ(m.other.size(), 1u);
  EXPECT_EQ(m.other[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(m.Summary(),
            "rank(s) 3 stuck where the others are not (0-2 at distributed_c10d.py:2050 in "
            "all_reduce): train.py:42 in slow_step");
}

TEST(MergeStacks, RanksWithoutAStackAreNamedWithTheirNote) {
  auto silent = Dump(5, "");
  silent.note = "did not finish writing its stack within 2.5s";
  auto m = MergeStacks({Dump(4, kInAllReduce), silent, Dump(6, kInAllReduce)});
  ASSERT_EQ(m.main.size(), 1u);
  EXPECT_EQ(m.main[0].ranks, (std::vector<int>{4, 6}));
  EXPECT_EQ(m.no_stack, std::vector<int>{5});
  EXPECT_NE(m.Summary().find("all 2 rank(s) with a stack (4,6) at distributed_c10d.py:2050"),
            std::string::npos)
      << m.Summary();
  EXPECT_NE(m.Summary().find("no stack from rank(s) 5"), std::string::npos);
  auto text = launcher::RenderStacksText(m, "title", "eu-stack is not installed");
  EXPECT_NE(text.find("rank 5: did not finish writing its stack within 2.5s"), std::string::npos)
      << text;
  EXPECT_NE(text.find("not collected: eu-stack is not installed"), std::string::npos);
}

TEST(MergeStacks, ManyRanksFoldAndTheTextShowsEveryGroupOnce) {
  std::vector<RankDump> dumps;
  for (int r = 0; r < 32; ++r)
    dumps.push_back(Dump(r, r == 8 || r == 21 ? kInUserCode : kInAllReduce));
  auto m = MergeStacks(dumps);
  ASSERT_EQ(m.main.size(), 2u);
  EXPECT_EQ(FoldRanks(m.main[0].ranks), "0-7,9-20,22-31");
  EXPECT_EQ(FoldRanks(m.DifferingRanks()), "8,21");
  auto text = launcher::RenderStacksText(m, "ftrun merged stacks", "");
  EXPECT_EQ(text.rfind("ftrun merged stacks\nrank(s) 8,21 stuck where the others are not", 0), 0u)
      << text;
  EXPECT_NE(text.find("main thread of rank(s) 0-7,9-20,22-31 (30 of 32):"), std::string::npos)
      << text;
  EXPECT_NE(text.find("main thread of rank(s) 8,21 (2 of 32)  <-- differs from the majority"),
            std::string::npos);
  EXPECT_NE(text.find("  File \"/work/train.py\", line 42 in slow_step\n"), std::string::npos);
}

TEST(MergeStacks, NativeStacksMergeByFunctionNotAddress) {
  auto m = MergeStacks({Dump(0, kInAllReduce, "TID 1:\n#0  0x1 __poll\n#1  0x2 main\n"),
                        Dump(1, kInAllReduce, "TID 9:\n#0  0x7 __poll\n#1  0x8 main\n")});
  ASSERT_EQ(m.native.size(), 1u);
  EXPECT_EQ(m.native[0].ranks, (std::vector<int>{0, 1}));
}

// Every '<' of the SVG opens a tag the document closes: a minimal well-formedness check (the
// end-to-end test parses the real one with an XML parser).
bool Balanced(const std::string& svg) {
  std::vector<std::string> open;
  for (size_t i = svg.find('<'); i != std::string::npos; i = svg.find('<', i + 1)) {
    const size_t end = svg.find('>', i);
    if (end == std::string::npos) return false;
    std::string tag = svg.substr(i + 1, end - i - 1);
    if (tag[0] == '?' || tag.back() == '/') continue;
    std::string name =
        tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" /", 1) - (tag[0] == '/'));
    if (tag[0] != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    } else {
      if (open.empty() || open.back() != name) return false;
      open.pop_back();
    }
  }
  return open.empty();
}

TEST(RenderStacksSvg, DrawsEveryFrameWithItsRanksAndEscapesMarkup) {
  auto m = MergeStacks({Dump(0, kInAllReduce), Dump(1, kInAllReduce), Dump(2, kInAllReduce),
                        Dump(3, kInUserCode, "TID 7:\n#0  0x1 __select\n")});
  auto svg = launcher::RenderStacksSvg(m, "hang <round 1> & more");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("hang &lt;round 1&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos) << "self-contained, no script";
  EXPECT_NE(svg.find("<title>train.py:42 in slow_step — rank(s) 3 (1 thread(s))</title>"),
            std::string::npos);
  EXPECT_NE(svg.find("<title>train.py:50 in &lt;module&gt; — rank(s) 0-3 (4 thread(s))</title>"),
            std::string::npos);
  EXPECT_NE(svg.find("__select"), std::string::npos);
  EXPECT_NE(svg.find("#e0301e"), std::string::npos) << "the differing rank's frames are red";
  EXPECT_TRUE(Balanced(svg)) << svg;
}

TEST(RenderStacksSvg, AnEmptyMergeIsStillAValidPicture) {
  auto svg = launcher::RenderStacksSvg(MergeStacks({}), "nothing");
  EXPECT_TRUE(Balanced(svg)) << svg;
  EXPECT_NE(svg.find("no Python stack from any of the 0 rank(s)"), std::string::npos);
}

}  // namespace
}  // namespace ftrun::testing
