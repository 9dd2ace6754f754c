// ZipArchive: the bytes of an uncompressed ("stored") zip archive whose entries' data are
// views into memory the caller keeps alive, laid out as torch.save writes its archive: each
// entry's data starts at a 64-byte boundary (an "FB" padding field, as PyTorch's writer pads),
// and zip64 fields are used where a size, an offset or the number of entries needs them.
//
// The archive is a list of pieces to write in order: small headers it owns and the entries'
// data, which it only points to (nothing is copied). Each entry's CRC-32 (zlib's, as zip
// requires) is computed when it is added; the whole archive's CRC-32 follows from those and
// the headers' without another pass over the data (crc32_combine).
//
// Thread: any; one archive is built by one thread. Errors: none (names are the caller's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ftrun::launcher {

class ZipArchive {
 public:
  // force_zip64: zip64 fields on every entry and a zip64 end record even when small (for
  // tests of the large-archive form without writing 4 GiB).
  explicit ZipArchive(bool force_zip64 = false) : force_zip64_(force_zip64) {}

  // Adds an entry holding a copy of `data` (small: a pickle, a version).
  void AddCopy(const std::string& name, std::string data);
  // Adds an entry whose data is `data` itself, which must outlive the pieces.
  void AddView(const std::string& name, std::span<const std::byte> data);
  // Ends the archive (central directory and end records); then pieces() is complete.
  void Finish();

  // The archive's bytes, in order.
  const std::vector<std::span<const std::byte>>& pieces() const { return pieces_; }
  uint64_t size() const { return offset_; }
  // zlib's CRC-32 of all of pieces(), as of the data when each entry was added.
  uint32_t crc32() const { return crc_; }

 private:
  struct Entry {
    std::string name;
    uint64_t size;
    uint32_t crc;
    uint64_t offset;  // of its local header
  };
  void Add(const std::string& name, std::span<const std::byte> data);
  std::span<const std::byte> Own(std::string bytes);
  // Appends a piece whose CRC-32 is `crc`.
  void Append(std::span<const std::byte> piece, uint32_t crc);

  bool force_zip64_;
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<std::string>> owned_;  // stable addresses for the pieces
  std::vector<std::span<const std::byte>> pieces_;
  uint64_t offset_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace ftrun::launcher
