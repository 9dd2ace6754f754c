// Text for XML and HTML: the one escaping the SVG flame graphs and the report page share.
// Thread: any. Errors: none (control bytes other than tab and newline, which XML 1.0 does
// not allow, become spaces).
#pragma once

#include <string>
#include <string_view>

namespace ftrun {

// `s` with & < > " ' escaped, fit for element text and quoted attribute values.
std::string EscapeMarkup(std::string_view s);

}  // namespace ftrun
