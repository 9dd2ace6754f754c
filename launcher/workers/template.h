// Python's string.Template.safe_substitute, which torchrun applies to worker arguments
// (${local_rank}) and to TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: $name and ${name} are replaced
// when name is in the mapping, $$ becomes $, anything else is left as it is.
#pragma once

#include <map>
#include <string>

namespace ftrun::launcher {

std::string SafeSubstitute(const std::string& text, const std::map<std::string, std::string>& vars);

}  // namespace ftrun::launcher
