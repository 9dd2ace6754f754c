// A flame graph of merged stacks as one self-contained SVG (no script, no external file):
// every rank's threads stacked from the outermost frame at the bottom to the innermost at
// the top, a frame's width the share of (rank, thread) samples passing through it. Each
// box's tooltip (<title>) names the frame and the folded ranks; frames reached only by ranks
// that differ from the majority are drawn red, Python frames warm, native frames blue.
//
// Pure. Thread: any. Errors: none; at most `max_depth` frames per stack are drawn.
#pragma once

#include <string>
#include <vector>

#include "launcher/diagnostics/stacks_merge.h"

namespace ftrun::launcher {

std::string RenderStacksSvg(const MergedStacks& merged, const std::string& title,
                            size_t max_depth = 64);

}  // namespace ftrun::launcher
