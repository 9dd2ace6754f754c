// Checks that hold for every launcher's command line (torchrun's, msrun's) because they all
// go through the one parse skeleton (launcher/cli/cli11_support.h): each launcher's test calls
// them with its own parser and its own option.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/cli/parsed.h"

namespace ftrun::launcher {

// `parse` of {option, value, "--", "train.py", "a"} runs train.py with the one argument "a":
// "--" ends the options and is not passed on. `script` and `script_args` are where Args keeps
// the script and its arguments.
template <class Args>
void ExpectDoubleDashEndsTheOptions(Parsed<Args> (*parse)(const std::vector<std::string>&),
                                    const std::string& option, const std::string& value,
                                    std::string Args::*script,
                                    std::vector<std::string> Args::*script_args) {
  const Parsed<Args> p = parse({option, value, "--", "train.py", "a"});
  ASSERT_EQ(p.action, ParseAction::kRun) << p.error;
  EXPECT_EQ(p.args.*script, "train.py");
  EXPECT_EQ(p.args.*script_args, (std::vector<std::string>{"a"}));
}

}  // namespace ftrun::launcher
