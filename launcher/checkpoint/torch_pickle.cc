// TorchPickle (torch_file.h): a snapshot's pickle rewritten as torch.save's data.pkl, each
// persistent id (a tensor's index) replaced by the storage reference torch.save writes. The
// opcodes are walked, not executed: nothing of the pickle is run.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "launcher/checkpoint/torch_file.h"

namespace ftrun::launcher {
namespace {

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

}  // namespace ftrun::launcher
