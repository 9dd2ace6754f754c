// What the e2e tests that run real torch share: Debian's python3-torch, and the check that
// it is there (the python3 first on PATH may have no torch).
#pragma once

#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace ftrun::testing {

inline constexpr const char* kPython = "/usr/bin/python3";

// Success when ftrun can run kPython and it imports torch; for ASSERT_TRUE in SetUp.
inline ::testing::AssertionResult DebianTorchAvailable() {
  auto r = RunFtrun({"--log-level", "error", "--no-python", kPython, "-c", "import torch"});
  if (r.exit_code == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "Debian's python3-torch is required (scripts/install-deps.sh): " << r.err;
}

}  // namespace ftrun::testing
