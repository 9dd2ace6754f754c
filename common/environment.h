// Environment variables as a value: read once from the process, passed around explicitly so
// that configuration and worker environments are pure functions (and unit-testable).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ftrun {

using EnvMap = std::map<std::string, std::string>;

// A copy of this process's environment.
EnvMap CurrentEnvironment();

// The value of `key`, or nullopt when unset.
std::optional<std::string> Lookup(const EnvMap& env, const std::string& key);

// "KEY=VALUE" strings, for execve.
std::vector<std::string> ToEnvStrings(const EnvMap& env);

}  // namespace ftrun
