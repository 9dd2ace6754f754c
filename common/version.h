// ftrun's version, from CMake's project(VERSION).
#pragma once

namespace ftrun {
inline constexpr const char* kVersion = FTRUN_VERSION;
}
