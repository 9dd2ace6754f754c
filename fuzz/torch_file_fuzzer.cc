// Fuzz target: a memory snapshot's bytes, which a worker writes, as the agent turns them into
// torch.save's file when it persists them (torch_file.h: TorchArchive, with its pickle rewrite
// and zip layout). The input is the snapshot ("FTRUNSN1", header length, header JSON, pickle,
// tensors).
//
// For any input: no crash, no sanitizer report; an archive it returns is as long as its pieces
// together, and every piece it does not own (a tensor's bytes) lies inside the input.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz/fuzz_support.h"
#include "launcher/checkpoint/torch_file.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = std::as_bytes(std::span(data, size));
  auto archive = ftrun::launcher::TorchArchive(input);
  if (!archive) return 0;
  uint64_t total = 0;
  for (auto piece : archive->pieces()) {
    total += piece.size();
    const bool inside =
        piece.data() >= input.data() && piece.data() + piece.size() <= input.data() + input.size();
    const bool outside =
        piece.data() + piece.size() <= input.data() || piece.data() >= input.data() + input.size();
    if (!inside && !outside) ftrun::fuzz::Fail("a piece straddles the input's end");
  }
  if (total != archive->size()) {
    ftrun::fuzz::Fail("pieces of " + std::to_string(total) + " bytes, size " +
                      std::to_string(archive->size()));
  }
  return 0;
}
