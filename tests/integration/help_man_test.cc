// Each personality's --help and its man page must list the same options.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

std::set<std::string> HelpOptions(const std::vector<std::string>& argv) {
  auto r = RunFtrun(argv);
  EXPECT_EQ(r.exit_code, 0);
  std::set<std::string> out;
  static const std::regex option("^\\s+(?:-[a-z], )?(--[a-z][a-z0-9_-]*)");
  for (const auto& line : Lines(r.out)) {
    std::smatch m;
    if (std::regex_search(line, m, option)) out.insert(m[1]);
  }
  return out;
}

// Long options named on the tag line of every .TP paragraph in one .SH section of the man page.
std::set<std::string> ManOptions(const std::string& section, const std::string& page = "ftrun.1") {
  std::set<std::string> out;
  auto lines = Lines(ReadFile(SourceDir() + "/man/" + page));
  static const std::regex option(R"(\\-\\-([a-z0-9_]+(?:\\-[a-z0-9_]+)*))");
  std::string current;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    if (lines[i].rfind(".SH ", 0) == 0) current = lines[i].substr(4);
    if (current != section) continue;
    if ((lines[i] != ".TP" && lines[i] != ".TQ") || lines[i + 1].rfind("\\fB", 0) != 0) continue;
    const std::string& tag = lines[i + 1];
    for (std::sregex_iterator it(tag.begin(), tag.end(), option), end; it != end; ++it) {
      std::string name = (*it)[1];
      name = std::regex_replace(name, std::regex("\\\\-"), "-");
      out.insert("--" + name);
    }
  }
  return out;
}

void ExpectSame(const std::set<std::string>& help, const std::set<std::string>& man,
                const std::string& what) {
  for (const auto& o : help)
    EXPECT_TRUE(man.count(o)) << what << ": " << o << " not in the man page";
  for (const auto& o : man) EXPECT_TRUE(help.count(o)) << what << ": " << o << " not in --help";
}

TEST(HelpAndManPage, ListTheSameOptions) {
  auto help = HelpOptions({"--help"});
  ASSERT_GT(help.size(), 25u) << "could not read the --help options";
  ExpectSame(help, ManOptions("OPTIONS"), "ftrun");
}

TEST(HelpAndManPage, DistributedLaunchAddsUseEnv) {
  auto launch = HelpOptions({"torch.distributed.launch", "--help"});
  auto torchrun = HelpOptions({"--help"});
  EXPECT_TRUE(launch.count("--use-env"));
  launch.erase("--use-env");
  EXPECT_EQ(launch, torchrun);
  EXPECT_TRUE(ManOptions("PYTHON \\-m TORCH.DISTRIBUTED.LAUNCH AND .RUN").count("--use-env"));
}

TEST(HelpAndManPage, ReportListsTheSameOptions) {
  auto help = HelpOptions({"report", "--help"});
  ASSERT_GE(help.size(), 3u) << "could not read ftrun report --help";
  ExpectSame(help, ManOptions("FTRUN REPORT"), "ftrun report");
}

TEST(HelpAndManPage, MasterListsTheSameOptions) {
  auto help = HelpOptions({"master", "--help"});
  ASSERT_GT(help.size(), 6u) << "could not read ftrun master --help";
  ExpectSame(help, ManOptions("FTRUN MASTER"), "ftrun master");
}

TEST(HelpAndManPage, StatusListsTheSameOptions) {
  auto help = HelpOptions({"status", "--help"});
  ASSERT_GE(help.size(), 4u) << "could not read ftrun status --help";
  ExpectSame(help, ManOptions("FTRUN STATUS"), "ftrun status");
}

TEST(HelpAndManPage, MsrunListsTheSameOptions) {
  auto help = HelpOptions({"msrun", "--help"});
  ASSERT_GT(help.size(), 25u) << "could not read ftrun msrun --help";
  auto man = ManOptions("OPTIONS", "ftrun-msrun.1");
  ASSERT_TRUE(man.count("--worker_num")) << "could not read the msrun man page";
  for (const auto& o : ManOptions("FTRUN EXTENSIONS", "ftrun-msrun.1")) man.insert(o);
  // The extensions' --a-b spellings are not listed separately.
  std::set<std::string> shown;
  for (const auto& o : help) shown.insert(o);
  ExpectSame(shown, man, "ftrun msrun");
}

TEST(HelpAndManPage, DlroverRunListsTorchrunsOptionsAndItsOwn) {
  auto help = HelpOptions({"dlrover-run", "--help"});
  auto man = ManOptions("OPTIONS");
  auto own = ManOptions("DLROVER OPTIONS", "ftrun-dlrover-run.1");
  ASSERT_TRUE(own.count("--node-unit")) << "could not read the dlrover-run man page";
  // Options the page describes again for dlrover-run's sake are ftrun options too.
  for (const auto& o : own) man.insert(o);
  ExpectSame(help, man, "ftrun dlrover-run");
  for (const char* o : {"--precheck", "--node-unit", "--auto-config", "--numa-affinity"}) {
    EXPECT_FALSE(HelpOptions({"--help"}).count(o)) << o << " is dlrover-run's only";
  }
}

TEST(HelpAndManPage, MsrunManPageDocumentsItsBehaviour) {
  std::string man = ReadFile(SourceDir() + "/man/ftrun-msrun.1");
  for (const char* section : {".SH FTRUN EXTENSIONS", ".SH PROCESSES AND ENVIRONMENT", ".SH LOGS",
                              ".SH JOIN", ".SH MULTI\\-NODE JOBS", ".SH FAULTS AND RESTARTS",
                              ".SH EXIT STATUS", ".SH DIFFERENCES FROM MSRUN"}) {
    EXPECT_NE(man.find(section), std::string::npos) << section;
  }
}

TEST(HelpAndManPage, ManPageDocumentsExitCodesAndDifferences) {
  std::string man = ReadFile(SourceDir() + "/man/ftrun.1");
  for (const char* section :
       {".SH EXIT STATUS", ".SH ENVIRONMENT", ".SH DIFFERENCES FROM TORCHRUN", ".SH FILES",
        ".SH SIGNALS", ".SH MULTI\\-NODE JOBS", ".SH FTRUN MASTER", ".SH FTRUN STATUS",
        ".SH EVENT LOG", ".SH METRICS", ".SH FAULT\\-TIME CHECKPOINTS", ".SH THE WORKERS' STORE",
        ".SS The workers' store", ".B FTRUN_AGENT_STORE\n", ".B FTRUN_AGENT_STORE_PORT\n",
        ".B FTRUN_AGENT_STORE_HOST\n", ".SS Partitions"}) {
    EXPECT_NE(man.find(section), std::string::npos) << section;
  }
}

}  // namespace
}  // namespace ftrun::testing
