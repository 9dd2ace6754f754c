// Which worker commands a standby can take over, and what must match between two attempts.
#include "launcher/standby/python_command.h"

#include <gtest/gtest.h>

namespace ftrun::launcher {
namespace {

ProcessSpec Spec(std::vector<std::string> args, std::string program = "/usr/bin/python3") {
  ProcessSpec s;
  s.program = std::move(program);
  s.args = std::move(args);
  s.env = {{"PATH", "/bin"},
           {"RANK", "3"},
           {"MASTER_PORT", "1234"},
           {"FTRUN_CONTROL_SOCKET", "x"},
           {"TORCHELASTIC_RESTART_COUNT", "1"},
           {"OMP_NUM_THREADS", "1"}};
  return s;
}

TEST(PythonCommand, ScriptWithFlagsAndArguments) {
  auto c =
      ParsePythonCommand(Spec({"-u", "-X", "dev", "train.py", "--lr", "-m"}), "/usr/bin/python3");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->flags, (std::vector<std::string>{"-u", "-X", "dev"}));
  EXPECT_FALSE(c->module);
  EXPECT_EQ(c->target, "train.py");
  EXPECT_EQ(c->args, (std::vector<std::string>{"--lr", "-m"}));
}

TEST(PythonCommand, Module) {
  auto c = ParsePythonCommand(Spec({"-u", "-m", "pkg.train", "a"}), "/usr/bin/python3");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->module);
  EXPECT_EQ(c->target, "pkg.train");
  EXPECT_EQ(c->args, (std::vector<std::string>{"a"}));
}

TEST(PythonCommand, WhatAStandbyCannotTakeOver) {
  EXPECT_EQ(
      ParsePythonCommand(Spec({"train.py"}, "/bin/numactl"), "/usr/bin/python3").error().message,
      "reason=not_python program=/bin/numactl");
  EXPECT_EQ(
      ParsePythonCommand(Spec({"-u", "-c", "code", "x.py"}), "/usr/bin/python3").error().message,
      "reason=unsupported_python_option option=-c");  // --run-path
  EXPECT_FALSE(ParsePythonCommand(Spec({"-I", "x.py"}), "/usr/bin/python3"));
  EXPECT_FALSE(ParsePythonCommand(Spec({"-u"}), "/usr/bin/python3"));
  EXPECT_FALSE(ParsePythonCommand(Spec({"-m"}), "/usr/bin/python3"));
  EXPECT_FALSE(ParsePythonCommand(Spec({"-"}), "/usr/bin/python3"));
}

TEST(PythonCommand, PerAttemptVariablesAreLeftOutOfTheStandbysEnvironmentAndKey) {
  EnvMap env = WithoutPerAttemptVariables(Spec({}).env);
  EXPECT_EQ(env, (EnvMap{{"PATH", "/bin"}, {"OMP_NUM_THREADS", "1"}}));
  for (const char* v : {"LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                        "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                        "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE"}) {
    EXPECT_TRUE(IsPerAttemptVariable(v)) << v;
  }
  EXPECT_FALSE(IsPerAttemptVariable("CUDA_VISIBLE_DEVICES"));

  ProcessSpec a = Spec({"-u", "t.py", "x"});
  ProcessSpec b = a;
  b.env["RANK"] = "7";
  b.env["MASTER_PORT"] = "999";
  b.env["TORCHELASTIC_RESTART_COUNT"] = "2";
  auto ca = ParsePythonCommand(a, "/usr/bin/python3").value();
  EXPECT_EQ(StandbyKey(a, ca), StandbyKey(b, ca));
  b.env["OMP_NUM_THREADS"] = "2";
  EXPECT_NE(StandbyKey(a, ca), StandbyKey(b, ca));
  ProcessSpec c = Spec({"-u", "t.py", "y"});
  EXPECT_NE(StandbyKey(a, ca), StandbyKey(c, ParsePythonCommand(c, "/usr/bin/python3").value()));
}

}  // namespace
}  // namespace ftrun::launcher
