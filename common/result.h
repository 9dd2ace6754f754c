// Result<T> and Status: how fallible functions report failure inside ftrun.
//
// Exceptions are used only at the edges (CLI parsing, start-up); everything else returns a
// Result carrying either the value or an Error whose message already names the culprit, e.g.
// "--rdzv-conf: key 'timeout' needs a number of seconds, got 'abc'". Callers add context
// once, on the way up, with Error::Wrap.
#pragma once

#include <boost/system/result.hpp>
#include <string>
#include <utility>

namespace ftrun {

struct Error {
  std::string message;

  // "<context>: <message>"
  Error Wrap(std::string_view context) const {
    return Error{std::string(context) + ": " + message};
  }
};

template <class T>
using Result = boost::system::result<T, Error>;
using Status = Result<void>;

// A successful Result. Needed where T is constructible from the same thing as Error (a
// string), which makes the implicit conversion ambiguous.
template <class T>
Result<T> Ok(T value) {
  return Result<T>(boost::system::in_place_value, std::move(value));
}

// Called by Result<T>::value() on an error; only reachable through a programming error.
[[noreturn]] void throw_exception_from_error(const Error& e, const boost::source_location& loc);

}  // namespace ftrun
