#include "launcher/checkpoint/torch_file.h"

#include <endian.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace ftrun::launcher {
namespace {

constexpr std::string_view kMagic = "FTRUNSN1";

struct DtypeInfo {
  const char* storage;
  uint64_t size;
};

// torch's storage type of each dtype a snapshot names (str(dtype) without "torch.").
const std::map<std::string, DtypeInfo>& Dtypes() {
  static const std::map<std::string, DtypeInfo> dtypes{
      {"float32", {"FloatStorage", 4}},
      {"float64", {"DoubleStorage", 8}},
      {"float16", {"HalfStorage", 2}},
      {"bfloat16", {"BFloat16Storage", 2}},
      {"int64", {"LongStorage", 8}},
      {"int32", {"IntStorage", 4}},
      {"int16", {"ShortStorage", 2}},
      {"int8", {"CharStorage", 1}},
      {"uint8", {"ByteStorage", 1}},
      {"bool", {"BoolStorage", 1}},
      {"complex64", {"ComplexFloatStorage", 8}},
      {"complex128", {"ComplexDoubleStorage", 16}},
  };
  return dtypes;
}

const google::protobuf::Value* Field(const google::protobuf::Struct& s, const char* key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

std::optional<uint64_t> Count(const google::protobuf::Value& v) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue) return std::nullopt;
  double d = v.number_value();
  if (!(d >= 0 && d <= 9007199254740992.0) || d != static_cast<double>(static_cast<uint64_t>(d))) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(d);
}

Result<SnapshotTensor> ReadTensor(const google::protobuf::Value& v, uint64_t size) {
  const auto& l = v.list_value().values();
  if (l.size() != 3 || !Count(l[0]) || l[1].kind_case() != google::protobuf::Value::kStringValue) {
    return Error{"a tensor entry is not [offset, dtype, shape]"};
  }
  auto dtype = Dtypes().find(l[1].string_value());
  if (dtype == Dtypes().end()) {
    return Error{"dtype " + l[1].string_value() + " has no torch storage type"};
  }
  SnapshotTensor t{*Count(l[0]), dtype->second.storage, dtype->second.size, {}};
  unsigned __int128 bytes = t.element_size;
  unsigned __int128 span = 1;  // the largest stride's bound: the sizes with 0 taken as 1
  for (const auto& d : l[2].list_value().values()) {
    auto n = Count(d);
    if (!n) return Error{"a tensor's shape is not a list of sizes"};
    t.shape.push_back(static_cast<int64_t>(*n));
    bytes *= *n;
    span *= std::max<uint64_t>(*n, 1);
    if (span > static_cast<unsigned __int128>(INT64_MAX)) {
      return Error{"a tensor's shape is too large"};
    }
  }
  if (bytes > size || t.offset > size - static_cast<uint64_t>(bytes)) {
    return Error{"a tensor lies outside the snapshot"};
  }
  return t;
}

}  // namespace

namespace {

// A snapshot's pickles (name "" for the one of a snapshot of one state) and tensors.
struct Parsed {
  std::vector<std::pair<std::string, std::span<const std::byte>>> pickles;
  std::vector<SnapshotTensor> tensors;
};

// [offset, length] of a pickle inside the snapshot.
Result<std::span<const std::byte>> PickleAt(const google::protobuf::Value* at, size_t first,
                                            std::span<const std::byte> snapshot) {
  if (!at || static_cast<size_t>(at->list_value().values().size()) != first + 2) {
    return Error{"a pickle entry is not [offset, length]"};
  }
  auto offset = Count(at->list_value().values()[static_cast<int>(first)]);
  auto size = Count(at->list_value().values()[static_cast<int>(first + 1)]);
  if (!offset || !size || *offset > snapshot.size() || *size > snapshot.size() - *offset) {
    return Error{"the pickle lies outside the snapshot"};
  }
  return snapshot.subspan(*offset, *size);
}

// At most this many files in one snapshot (a rank's files; Megatron-LM saves two).
constexpr size_t kMaxFiles = 64;

Result<Parsed> Parse(std::span<const std::byte> snapshot) {
  const size_t prefix = kMagic.size() + 8;
  if (snapshot.size() < prefix || std::memcmp(snapshot.data(), kMagic.data(), kMagic.size())) {
    return Error{"not a snapshot"};
  }
  uint64_t header_size = 0;
  std::memcpy(&header_size, snapshot.data() + kMagic.size(), sizeof header_size);
  header_size = le64toh(header_size);
  if (header_size > snapshot.size() - prefix) return Error{"the header is cut short"};
  google::protobuf::Struct header;
  std::string text(reinterpret_cast<const char*>(snapshot.data()) + prefix, header_size);
  if (!google::protobuf::util::JsonStringToMessage(text, &header).ok()) {
    return Error{"the header is not JSON"};
  }
  Parsed parsed;
  const auto* listed = Field(header, "tensors");
  if (!listed) return Error{"the header has no tensors"};
  if (const auto* files = Field(header, "files")) {
    if (files->list_value().values().empty()) return Error{"a snapshot of no files"};
    if (static_cast<size_t>(files->list_value().values().size()) > kMaxFiles) {
      return Error{"a snapshot of more than " + std::to_string(kMaxFiles) + " files"};
    }
    std::set<std::string> names;
    for (const auto& f : files->list_value().values()) {
      if (f.list_value().values().empty() ||
          f.list_value().values()[0].kind_case() != google::protobuf::Value::kStringValue) {
        return Error{"a file entry is not [name, offset, length]"};
      }
      const std::string& name = f.list_value().values()[0].string_value();
      if (name.empty() || !names.insert(name).second) {
        return Error{"a file name that is empty or repeated"};
      }
      auto pickle = PickleAt(&f, 1, snapshot);
      if (!pickle) return pickle.error();
      parsed.pickles.emplace_back(name, *pickle);
    }
    // Each byte in one pickle at most, as snapshot.py places them: no output larger than its
    // input, whatever a forged header says.
    std::vector<std::span<const std::byte>> spans;
    for (const auto& p : parsed.pickles) spans.push_back(p.second);
    std::sort(spans.begin(), spans.end(), [](auto a, auto b) { return a.data() < b.data(); });
    for (size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].data() < spans[i - 1].data() + spans[i - 1].size()) {
        return Error{"the files' pickles overlap"};
      }
    }
  } else {
    auto pickle = PickleAt(Field(header, "pickle"), 0, snapshot);
    if (!pickle) return pickle.error();
    parsed.pickles.emplace_back("", *pickle);
  }
  for (const auto& v : listed->list_value().values()) {
    auto t = ReadTensor(v, snapshot.size());
    if (!t) return t.error();
    parsed.tensors.push_back(std::move(*t));
  }
  return parsed;
}

}  // namespace

Result<std::vector<TorchFile>> TorchArchives(std::span<const std::byte> snapshot,
                                             bool force_zip64) {
  auto parsed = Parse(snapshot);
  if (!parsed) return parsed.error();
  std::vector<TorchFile> files;
  std::vector<bool> taken(parsed->tensors.size());  // a tensor belongs to one file
  for (const auto& [name, pickle] : parsed->pickles) {
    std::vector<size_t> used;
    auto data = TorchPickle(pickle, parsed->tensors, &used);
    if (!data) return data.error();
    for (size_t i : used) {
      if (taken[i]) return Error{"a tensor named by two files"};
      taken[i] = true;
    }
    ZipArchive zip(force_zip64);
    zip.AddCopy("archive/data.pkl", std::move(*data));
    zip.AddCopy("archive/byteorder", "little");
    // torch.load reads a storage by the key its pickle names, whatever the other keys are.
    std::sort(used.begin(), used.end());
    for (size_t i : used) {
      const auto& t = parsed->tensors[i];
      zip.AddView("archive/data/" + std::to_string(i),
                  snapshot.subspan(t.offset, t.numel() * t.element_size));
    }
    zip.AddCopy("archive/version", "3\n");
    zip.Finish();
    files.push_back({name, std::move(zip)});
  }
  return files;
}

Result<ZipArchive> TorchArchive(std::span<const std::byte> snapshot, bool force_zip64) {
  auto files = TorchArchives(snapshot, force_zip64);
  if (!files) return files.error();
  if (files->size() != 1 || !files->front().name.empty()) {
    return Error{"a snapshot of several files"};
  }
  return std::move(files->front().archive);
}

}  // namespace ftrun::launcher
