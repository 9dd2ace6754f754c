#include "launcher/checkpoint/zip_archive.h"

#include <zlib.h>

namespace ftrun::launcher {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEnd = 0x06054b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint16_t kZip64Field = 0x0001;
constexpr uint16_t kPaddingField = 0x4246;  // "FB", PyTorch's writer's padding field
constexpr uint64_t kAlignment = 64;
constexpr uint64_t kMax32 = 0xffffffff;
constexpr uint64_t kMax16 = 0xffff;
static_assert(sizeof(z_off_t) >= 8, "crc32_combine must take a piece of more than 2 GiB");

void Put16(std::string& out, uint64_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}
void Put32(std::string& out, uint64_t v) {
  Put16(out, v & 0xffff);
  Put16(out, (v >> 16) & 0xffff);
}
void Put64(std::string& out, uint64_t v) {
  Put32(out, v & kMax32);
  Put32(out, v >> 32);
}

uint32_t Crc32(std::span<const std::byte> data) {
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

}  // namespace

std::span<const std::byte> ZipArchive::Own(std::string bytes) {
  owned_.push_back(std::make_unique<std::string>(std::move(bytes)));
  const std::string& s = *owned_.back();
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

void ZipArchive::Append(std::span<const std::byte> piece, uint32_t crc) {
  crc_ = static_cast<uint32_t>(crc32_combine(crc_, crc, static_cast<z_off_t>(piece.size())));
  offset_ += piece.size();
  pieces_.push_back(piece);
}

void ZipArchive::AddCopy(const std::string& name, std::string data) {
  Add(name, Own(std::move(data)));
}

void ZipArchive::AddView(const std::string& name, std::span<const std::byte> data) {
  Add(name, data);
}

void ZipArchive::Add(const std::string& name, std::span<const std::byte> data) {
  Entry e{name, data.size(), Crc32(data), offset_};
  const bool zip64 = force_zip64_ || e.size >= kMax32;
  std::string h;
  Put32(h, kLocalHeader);
  Put16(h, zip64 ? 45 : 20);  // version needed
  Put16(h, 0);                // flags
  Put16(h, 0);                // method: stored
  Put16(h, 0);                // time
  Put16(h, 0x21);             // date: 1980-01-01, as zip's epoch
  Put32(h, e.crc);
  Put32(h, zip64 ? kMax32 : e.size);  // compressed size
  Put32(h, zip64 ? kMax32 : e.size);  // uncompressed size
  Put16(h, name.size());
  std::string extra;
  if (zip64) {
    Put16(extra, kZip64Field);
    Put16(extra, 16);
    Put64(extra, e.size);
    Put64(extra, e.size);
  }
  const uint64_t before_padding = offset_ + 30 + name.size() + extra.size() + 4;
  const uint64_t padding = (kAlignment - before_padding % kAlignment) % kAlignment;
  Put16(extra, kPaddingField);
  Put16(extra, padding);
  extra.append(padding, 'Z');
  Put16(h, extra.size());
  h += name;
  h += extra;
  const auto header = Own(std::move(h));
  Append(header, Crc32(header));
  if (!data.empty()) Append(data, e.crc);
  entries_.push_back(std::move(e));
}

void ZipArchive::Finish() {
  const uint64_t directory_at = offset_;
  std::string d;
  for (const Entry& e : entries_) {
    const bool big_size = force_zip64_ || e.size >= kMax32;
    const bool big_offset = force_zip64_ || e.offset >= kMax32;
    std::string extra;
    if (big_size || big_offset) {
      Put16(extra, kZip64Field);
      Put16(extra, (big_size ? 16 : 0) + (big_offset ? 8 : 0));
      if (big_size) {
        Put64(extra, e.size);  // uncompressed, then compressed: zip's order
        Put64(extra, e.size);
      }
      if (big_offset) Put64(extra, e.offset);
    }
    Put32(d, kCentralHeader);
    Put16(d, 0x031e);  // made by: Unix, zip 3.0
    Put16(d, extra.empty() ? 20 : 45);
    Put16(d, 0);
    Put16(d, 0);
    Put16(d, 0);
    Put16(d, 0x21);
    Put32(d, e.crc);
    Put32(d, big_size ? kMax32 : e.size);
    Put32(d, big_size ? kMax32 : e.size);
    Put16(d, e.name.size());
    Put16(d, extra.size());
    Put16(d, 0);               // comment
    Put16(d, 0);               // disk
    Put16(d, 0);               // internal attributes
    Put32(d, 0100644u << 16);  // external: a regular file, rw-r--r--
    Put32(d, big_offset ? kMax32 : e.offset);
    d += e.name;
    d += extra;
  }
  const uint64_t directory_size = d.size();
  const uint64_t count = entries_.size();
  const uint64_t zip64_end_at = directory_at + directory_size;
  const bool zip64 =
      force_zip64_ || count >= kMax16 || directory_at >= kMax32 || directory_size >= kMax32;
  if (zip64) {
    Put32(d, kZip64End);
    Put64(d, 44);  // the record's size after this field
    Put16(d, 0x031e);
    Put16(d, 45);
    Put32(d, 0);  // this disk
    Put32(d, 0);  // the directory's disk
    Put64(d, count);
    Put64(d, count);
    Put64(d, directory_size);
    Put64(d, directory_at);
    Put32(d, kZip64Locator);
    Put32(d, 0);
    Put64(d, zip64_end_at);
    Put32(d, 1);  // disks
  }
  Put32(d, kEnd);
  Put16(d, 0);
  Put16(d, 0);
  Put16(d, zip64 ? kMax16 : count);
  Put16(d, zip64 ? kMax16 : count);
  Put32(d, zip64 ? kMax32 : directory_size);
  Put32(d, zip64 ? kMax32 : directory_at);
  Put16(d, 0);  // comment
  const auto directory = Own(std::move(d));
  Append(directory, Crc32(directory));
}

}  // namespace ftrun::launcher
