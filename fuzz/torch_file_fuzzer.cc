// Fuzz target: a memory snapshot's bytes, which a worker writes, as the agent turns them into
// torch.save's files when it persists them (torch_file.h: TorchArchives, with its pickle
// rewrite and zip layout; one file, or one per file of a snapshot of several). The input is the
// snapshot ("FTRUNSN1", header length, header JSON, pickles, tensors).
//
// For any input: no crash, no sanitizer report; an archive it returns is as long as its pieces
// together, every piece it does not own (a tensor's bytes) lies inside the input, and those
// pieces of all its archives together are no longer than the input.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz/fuzz_support.h"
#include "launcher/checkpoint/torch_file.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = std::as_bytes(std::span(data, size));
  auto files = ftrun::launcher::TorchArchives(input);
  if (!files) return 0;
  uint64_t viewed = 0;  // bytes of the input the archives point into
  for (const auto& file : *files) {
    uint64_t total = 0;
    for (auto piece : file.archive.pieces()) {
      total += piece.size();
      const bool inside = piece.data() >= input.data() &&
                          piece.data() + piece.size() <= input.data() + input.size();
      const bool outside = piece.data() + piece.size() <= input.data() ||
                           piece.data() >= input.data() + input.size();
      if (!inside && !outside) ftrun::fuzz::Fail("a piece straddles the input's end");
      if (inside) viewed += piece.size();
    }
    if (total != file.archive.size()) {
      ftrun::fuzz::Fail("pieces of " + std::to_string(total) + " bytes, size " +
                        std::to_string(file.archive.size()));
    }
  }
  if (viewed > input.size()) ftrun::fuzz::Fail("the archives view more bytes than the input has");
  return 0;
}
