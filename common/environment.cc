#include "common/environment.h"

extern char** environ;

namespace ftrun {

EnvMap CurrentEnvironment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

std::optional<std::string> Lookup(const EnvMap& env, const std::string& key) {
  auto it = env.find(key);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> ToEnvStrings(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace ftrun
