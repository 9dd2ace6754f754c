// Option values: the small parsers behind torchrun's option types (ints, --nnodes ranges,
// comma lists, signal lists, stream specs, byte sizes) and a v4 UUID for --standalone. Pure;
// every error names the option (or variable) and the text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace ftrun::launcher {

// Bit mask of the worker streams a redirect or tee applies to (torchrun's Std).
enum StdMask : int { kStdNone = 0, kStdOut = 1, kStdErr = 2, kStdAll = 3 };

// A whole decimal int ("12", "-3"); nullopt for anything else ("", "1.5", "12x").
std::optional<int> ToInt(std::string_view s);

// The text of a number as Python's int() (base 10) or float() takes it, cleaned for C++'s
// conversions: surrounding whitespace, a '+' and single underscores between digits removed
// ("  +1_000\n" -> "1000"); float() also takes inf, infinity and nan in any case, and an
// exponent. nullopt where Python raises ValueError ("", "0x10", "1__0", "1e", "0x1p-2").
std::optional<std::string> PythonIntText(std::string_view text);
std::optional<std::string> PythonFloatText(std::string_view text);
// int(text) as torchrun converts a value: nullopt when Python would refuse it or when it is
// outside int's range.
std::optional<int> PythonInt(std::string_view text);

// Per-local-rank stream masks from a "0".."3" or "0:3,1:1" spec (torchrun's Std.from_str).
Result<std::vector<int>> ParseStdSpec(const std::string& option, const std::string& spec,
                                      int nproc);

// "SIGTERM,SIGINT" -> signal numbers; SIG prefix optional, numbers accepted.
Result<std::vector<int>> ParseSignalList(const std::string& text);

// "N" or "MIN:MAX" with 0 < MIN <= MAX; errors name --nnodes.
Result<std::pair<int, int>> ParseNnodes(const std::string& text);

// "a,b,,c" -> {"a", "b,c"}: torchrun's comma_separated_list.
std::vector<std::string> SplitCommaList(const std::string& text);

// A fresh random UUID (version 4) as torch's --standalone uses for the run id.
std::string RandomUuid4();

// A size in bytes: a number, optionally with K, M, G or T (binary: 1K = 1024; KB/KiB too).
// Errors name `name` (the option or variable) and the text.
Result<uint64_t> ParseByteSize(const std::string& name, const std::string& text);

}  // namespace ftrun::launcher
