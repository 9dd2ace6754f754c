#include "launcher/checkpoint/torch_file.h"

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

// Pickle opcodes (Python's pickle module) and how long their arguments are.
enum class Arg { kNone, kFixed, kLength, kLine, kTwoLines };
struct Opcode {
  Arg arg = Arg::kNone;
  int bytes = 0;  // kFixed: the argument; kLength: the length field's size
};

std::optional<Opcode> Lookup(unsigned char op) {
  switch (op) {
    case '(':
    case '.':
    case '0':
    case '1':
    case '2':
    case 'N':
    case 'a':
    case 'b':
    case 'd':
    case '}':
    case 'e':
    case 'l':
    case ']':
    case 'o':
    case 'R':
    case 's':
    case 't':
    case ')':
    case 'u':
    case 'Q':
    case 0x81:
    case 0x85:
    case 0x86:
    case 0x87:
    case 0x88:
    case 0x89:
    case 0x8f:
    case 0x90:
    case 0x91:
    case 0x92:
    case 0x93:
    case 0x94:
    case 0x97:
    case 0x98:
      return Opcode{};
    case 'K':
    case 'h':
    case 'q':
    case 0x80:
    case 0x82:
      return Opcode{Arg::kFixed, 1};
    case 'M':
    case 0x83:
      return Opcode{Arg::kFixed, 2};
    case 'J':
    case 'j':
    case 'r':
    case 0x84:
      return Opcode{Arg::kFixed, 4};
    case 'G':
    case 0x95:
      return Opcode{Arg::kFixed, 8};
    case 'U':
    case 'C':
    case 0x8c:
    case 0x8a:
      return Opcode{Arg::kLength, 1};
    case 'T':
    case 'B':
    case 'X':
    case 0x8b:
      return Opcode{Arg::kLength, 4};
    case 0x8d:
    case 0x8e:
    case 0x96:
      return Opcode{Arg::kLength, 8};
    case 'I':
    case 'L':
    case 'S':
    case 'V':
    case 'F':
    case 'g':
    case 'p':
    case 'P':
      return Opcode{Arg::kLine};
    case 'c':
    case 'i':
      return Opcode{Arg::kTwoLines};
    default:
      return std::nullopt;
  }
}

uint64_t Little(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// Pickle opcodes that push a Python int, as protocol 2+ writes it.
void PushInt(std::string& out, uint64_t v) {
  if (v < (uint64_t{1} << 31)) {
    out += 'J';
    for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
    return;
  }
  out += '\x8a';  // LONG1: little-endian two's complement, here 8 bytes with a sign byte
  out += '\x09';
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  out += '\0';
}

void PushText(std::string& out, const std::string& s) {
  out += 'X';
  for (int i = 0; i < 4; ++i) out += static_cast<char>((s.size() >> (8 * i)) & 0xff);
  out += s;
}

void PushInts(std::string& out, const std::vector<int64_t>& values) {
  if (values.empty()) {
    out += ')';
    return;
  }
  out += '(';
  for (int64_t v : values) PushInt(out, static_cast<uint64_t>(v));
  out += 't';
}

// What torch.save pickles for a contiguous CPU tensor with its own storage.
void PushTensor(std::string& out, const SnapshotTensor& t, size_t index) {
  out += "ctorch._utils\n_rebuild_tensor_v2\n(";
  out += '(';
  PushText(out, "storage");
  out += "ctorch\n" + t.storage + "\n";
  PushText(out, std::to_string(index));
  PushText(out, "cpu");
  PushInt(out, t.numel());
  out += "tQ";  // the tuple, as the persistent id
  PushInt(out, 0);
  PushInts(out, t.shape);
  // torch's contiguous strides: a size-0 dimension counts as 1 (ReadTensor bounds them).
  std::vector<int64_t> strides(t.shape.size());
  uint64_t stride = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    strides[i] = static_cast<int64_t>(stride);
    stride *= std::max<uint64_t>(static_cast<uint64_t>(t.shape[i]), 1);
  }
  PushInts(out, strides);
  out += '\x89';  // requires_grad: False
  out += "ccollections\nOrderedDict\n)R";
  out += "tR";
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

uint64_t SnapshotTensor::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

Result<std::string> TorchPickle(std::span<const std::byte> pickle,
                                const std::vector<SnapshotTensor>& tensors,
                                std::vector<size_t>* used_order) {
  const auto* p = reinterpret_cast<const unsigned char*>(pickle.data());
  const size_t n = pickle.size();
  std::string out;
  out.reserve(n + std::min(tensors.size(), n / 3) * 160);  // a tensor's id takes >= 3 bytes
  size_t last_start = std::string::npos;   // in `out`: the opcode before the current one
  std::vector<bool> used(tensors.size());  // a snapshot pickles each tensor once
  unsigned char last_op = 0;
  for (size_t at = 0; at < n;) {
    const unsigned char op = p[at];
    auto code = Lookup(op);
    if (!code) return Error{"pickle opcode " + std::to_string(op) + " is not known"};
    size_t end = at + 1;
    auto need = [&](uint64_t more) { return more <= n - end; };
    switch (code->arg) {
      case Arg::kNone:
        break;
      case Arg::kFixed:
        if (!need(code->bytes)) return Error{"the pickle ends inside an opcode"};
        end += code->bytes;
        break;
      case Arg::kLength: {
        if (!need(code->bytes)) return Error{"the pickle ends inside an opcode"};
        uint64_t length = Little(p + end, code->bytes);
        end += code->bytes;
        if (!need(length)) return Error{"the pickle ends inside an opcode"};
        end += length;
        break;
      }
      case Arg::kLine:
      case Arg::kTwoLines:
        for (int lines = code->arg == Arg::kLine ? 1 : 2; lines > 0; --lines) {
          const void* nl = std::memchr(p + end, '\n', n - end);
          if (!nl) return Error{"the pickle ends inside an opcode"};
          end = static_cast<const unsigned char*>(nl) - p + 1;
        }
        break;
    }
    if (op == 0x95) {  // FRAME: dropped
      at = end;
      continue;
    }
    if (op == 'P') return Error{"a text persistent id"};
    if (op == 'Q') {
      if (last_op != 'K' && last_op != 'M' && last_op != 'J') {
        return Error{"a persistent id that is not a tensor's index"};
      }
      const auto* arg = reinterpret_cast<const unsigned char*>(out.data()) + last_start + 1;
      uint64_t index = Little(arg, last_op == 'K' ? 1 : last_op == 'M' ? 2 : 4);
      if (index >= tensors.size()) return Error{"a persistent id beyond the tensors"};
      if (used[index]) return Error{"a tensor's persistent id used twice"};
      used[index] = true;
      if (used_order) used_order->push_back(index);
      out.resize(last_start);
      PushTensor(out, tensors[index], index);
      last_op = 0;
      at = end;
      continue;
    }
    last_start = out.size();
    last_op = op;
    out.append(reinterpret_cast<const char*>(p + at), end - at);
    at = end;
    if (op == '.') {
      if (at != n) return Error{"bytes after the pickle's end"};
      return Ok(std::move(out));
    }
  }
  return Error{"the pickle has no end"};
}

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
  const uint64_t header_size =
      Little(reinterpret_cast<const unsigned char*>(snapshot.data()) + kMagic.size(), 8);
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
