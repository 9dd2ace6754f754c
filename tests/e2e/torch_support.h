// What the e2e tests that run real torch share: Debian's python3-torch, and the check that
// it is there (the python3 first on PATH may have no torch).
#pragma once

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// A JSON file a worker wrote, parsed (a parse error is a test failure naming the file).
inline google::protobuf::Struct ReadJson(const std::string& path) {
  google::protobuf::Struct s;
  auto status = google::protobuf::util::JsonStringToMessage(ReadFile(path), &s);
  EXPECT_TRUE(status.ok()) << path << ": " << status.message();
  return s;
}

// The "weights" list of a result file that scripts/demo/train.py (or a script like it) wrote.
inline std::vector<double> Weights(const std::string& result_file) {
  const google::protobuf::Struct s = ReadJson(result_file);
  std::vector<double> w;
  EXPECT_TRUE(s.fields().count("weights")) << result_file << " has no weights";
  if (!s.fields().count("weights")) return w;
  for (const auto& v : s.fields().at("weights").list_value().values()) {
    w.push_back(v.number_value());
  }
  return w;
}

}  // namespace ftrun::testing
