// TorchArchive and ZipArchive: memory snapshots made by the worker's own code (snapshot.py's
// Plan and layout.py's Layout, real torch) become files that torch.load reads back equal to
// what torch.save wrote of the same state; Python's zipfile checks the archive (CRCs, zip64
// form); bytes that are not a convertible snapshot give an error, never a crash.
#include "launcher/checkpoint/torch_file.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "launcher/checkpoint/checkpoint_writer.h"
#include "launcher/checkpoint/snapshot_store.h"
#include "tests/support/test_support.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher {
namespace {

namespace fs = std::filesystem;
using testing::AsBytes;
using testing::Python;

// Writes the snapshots and torch.save's file of two states (the second with the first's
// structure: the layout's reused pickle, numbers re-encoded).
constexpr const char* kMakeSnapshots = R"(
import sys, torch
from ftrun.flash_checkpoint import snapshot
from ftrun.flash_checkpoint.layout import Layout
out = sys.argv[1]
def state(seed):
    torch.manual_seed(seed)
    m = torch.nn.Linear(5, 3)
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(2, 5)).sum().backward()
    opt.step()
    return {"model": m.state_dict(), "opt": opt.state_dict(), "step": seed,
            "lr": 0.5 + seed, "bf16": torch.ones(3, dtype=torch.bfloat16) * seed,
            "scalar": torch.tensor(2.5 + seed), "t": torch.arange(12).view(3, 4).t(),
            "empty": torch.empty(0, 4), "mask": torch.tensor([True, False]),
            "empty3": torch.empty(3, 0, 4), "one": torch.ones(1, 1, 2),
            "half": torch.zeros(2, 2, dtype=torch.float16), "c": torch.ones(2, dtype=torch.cfloat),
            "i8": torch.tensor([-1, 2], dtype=torch.int8), "name": "run", "list": [1, (2, 3)]}
a, b = state(1), state(2)
torch.save(a, out + "/a.pt")
torch.save(b, out + "/b.pt")
plan = snapshot.Plan(a, 1, 4)
buf = bytearray(plan.bytes)
plan.write(buf)
open(out + "/plan.snap", "wb").write(buf)
# No floats: torch 1.13's weights_only unpickler reads none (BINFLOAT), even torch.save's.
c = {"model": {"w": torch.ones(3, 2), "b": torch.zeros(2, dtype=torch.bfloat16)}, "step": 3,
     "name": "x", "l": [1, (2, 3)], "flag": True, "none": None}
torch.save(c, out + "/c.pt")
plan = snapshot.Plan(c, 3, 1)
buf = bytearray(plan.bytes)
plan.write(buf)
open(out + "/weights.snap", "wb").write(buf)
files = snapshot.Files({"model_optim_rng.pt": a, "distrib_optim.pt": c})
plan = snapshot.Plan(files, 1, 2)
buf = bytearray(plan.bytes)
plan.write(buf)
open(out + "/files.snap", "wb").write(buf)
layout = Layout.build(a, 1, 4)
tensors = layout.refresh(b, 2, 4)
pickled = layout.pickled()
buf = bytearray(layout.bytes)
layout.write(buf, 2, pickled, tensors)
open(out + "/layout.snap", "wb").write(bytes(buf))
print("made")
)";

// torch.load of `file` equal, tensor by tensor (dtype, shape, values), to torch.load of `ref`.
constexpr const char* kCompare = R"(
import sys, torch, zipfile
file, ref = sys.argv[1], sys.argv[2]
weights_only = len(sys.argv) > 3  # the default of torch.load from torch 2.6
assert zipfile.ZipFile(file).testzip() is None
def eq(x, y):
    if isinstance(x, torch.Tensor):
        # Strides too, where torch.save kept contiguous ones (a snapshot stores every tensor
        # contiguous: a transposed one comes back with the same values, contiguous).
        return (x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
                and (x.stride() == y.stride() or not y.is_contiguous()))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(eq(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return type(x) == type(y) and len(x) == len(y) and all(map(eq, x, y))
    return x == y
print("equal" if eq(torch.load(file, weights_only=weights_only), torch.load(ref)) else "differ")
)";

class TorchFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ftrun-torch-file-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    Script("make.py", kMakeSnapshots);
    Script("compare.py", kCompare);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Script(const std::string& name, const char* text) { std::ofstream(dir_ / name) << text; }
  std::string Run(const std::string& script, const std::string& args) {
    return Python("import sys, runpy\nsys.argv = [\"x\"] + \"" + args +
                  "\".split()\nrunpy.run_path(\"" + (dir_ / script).string() + "\")");
  }
  std::string Read(const std::string& name) { return ftrun::testing::ReadFile(dir_ / name); }
  void Write(const std::string& name, const ZipArchive& zip) {
    std::ofstream out(dir_ / name, std::ios::binary);
    for (auto piece : zip.pieces()) {
      out.write(reinterpret_cast<const char*>(piece.data()), piece.size());
    }
  }

  // A request to store the newest snapshot of local rank 0 of `store` at `step` as group's
  // file `name` under dir_/ckpt.
  CheckpointRequest Request(SnapshotStore& store, uint64_t step, const std::string& group,
                            const std::string& name) {
    CheckpointRequest request;
    request.root = dir_ / "ckpt";
    request.step = step;
    request.parts.push_back(
        {.group = group, .files = {{.name = name, .header = "", .snapshot = store.Newest(0)}}});
    return request;
  }
  // A byte of the snapshot in `fd` changed after its commit (the conversion reads the bytes
  // more than once): the recorded checksum no longer matches and `request` is not stored.
  void ExpectRefusedOnceChanged(int fd, size_t at, CheckpointRequest request) {
    testing::WriteThrough(fd, at, "!");
    request.step += 1;
    auto refused = WriteCheckpoint(request);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("changed in memory since): not persisted"),
              std::string::npos)
        << refused.error().message;
    EXPECT_FALSE(fs::exists(dir_ / "ckpt" / ("ftrun-step-" + std::to_string(request.step))));
  }

  fs::path dir_;
};

TEST_F(TorchFileTest, TorchLoadReadsWhatTorchSaveWroteOfTheSameState) {
  ASSERT_EQ(Run("make.py", dir_.string()), "made\nexit=0");
  for (auto [snap, ref] : {std::pair{"plan.snap", "a.pt"}, std::pair{"layout.snap", "b.pt"}}) {
    for (bool zip64 : {false, true}) {
      SCOPED_TRACE(std::string(snap) + (zip64 ? " zip64" : ""));
      const std::string bytes = Read(snap);
      auto zip = TorchArchive(AsBytes(bytes), zip64);
      ASSERT_TRUE(zip) << zip.error().message;
      Write("out.pt", *zip);
      EXPECT_EQ(fs::file_size(dir_ / "out.pt"), zip->size());
      const std::string file = Read("out.pt");  // the archive's CRC-32, combined, is the file's
      EXPECT_EQ(zip->crc32(),
                crc32_z(0L, reinterpret_cast<const Bytef*>(file.data()), file.size()));
      EXPECT_EQ(Run("compare.py", (dir_ / "out.pt").string() + " " + (dir_ / ref).string()),
                "equal\nexit=0");
    }
  }
}

TEST_F(TorchFileTest, TorchLoadReadsItWithWeightsOnly) {
  ASSERT_EQ(Run("make.py", dir_.string()), "made\nexit=0");
  const std::string bytes = Read("weights.snap");
  auto zip = TorchArchive(AsBytes(bytes));
  ASSERT_TRUE(zip) << zip.error().message;
  Write("out.pt", *zip);
  EXPECT_EQ(Run("compare.py",
                (dir_ / "out.pt").string() + " " + (dir_ / "c.pt").string() + " weights_only"),
            "equal\nexit=0");
}

TEST_F(TorchFileTest, TheAgentWritesASnapshotAsTorchSavesFileUnlessItChangedInMemory) {
  ASSERT_EQ(Run("make.py", dir_.string()), "made\nexit=0");
  const std::string snap = Read("plan.snap");
  SnapshotStore store(1, 64 << 20);
  const int fd = testing::Save(store, 0, 1, snap);
  const CheckpointRequest request = Request(store, 1, "", "rank_0.pt");
  auto written = WriteCheckpoint(request);
  ASSERT_TRUE(written) << written.error().message;
  EXPECT_EQ(Run("compare.py", *written + "/group-all/rank_0.pt " + (dir_ / "a.pt").string()),
            "equal\nexit=0");
  ExpectRefusedOnceChanged(fd, snap.size() / 2, request);
}

TEST_F(TorchFileTest, ASnapshotOfSeveralFilesIsStoredAsTorchSavesFileOfEach) {
  ASSERT_EQ(Run("make.py", dir_.string()), "made\nexit=0");
  const std::string snap = Read("files.snap");
  auto single = TorchArchive(AsBytes(snap));
  ASSERT_FALSE(single);
  EXPECT_EQ(single.error().message, "a snapshot of several files");
  SnapshotStore store(1, 64 << 20);
  const int fd = testing::Save(store, 0, 1, snap);
  const CheckpointRequest request = Request(store, 1, "rank-0", "model_optim_rng.pt");
  auto written = WriteCheckpoint(request);
  ASSERT_TRUE(written) << written.error().message;
  const std::string part = *written + "/" + PartDirName("rank-0") + "/";
  EXPECT_EQ(testing::NamesIn(part), "PART.json distrib_optim.pt model_optim_rng.pt ");
  EXPECT_EQ(Run("compare.py", part + "model_optim_rng.pt " + (dir_ / "a.pt").string()),
            "equal\nexit=0");
  EXPECT_EQ(Run("compare.py", part + "distrib_optim.pt " + (dir_ / "c.pt").string()),
            "equal\nexit=0");
  // The loaders verify both and read them back as the state of several files.
  EXPECT_EQ(Python("from ftrun import checkpoint\nfrom ftrun.flash_checkpoint import loading\n"
                   "m = checkpoint.verify(\"" +
                   *written + "\")\ns = loading.load_part(\"" + *written +
                   "\", m, \"rank-0\")\nprint(type(s).__name__, sorted(s), "
                   "s[\"distrib_optim.pt\"][\"step\"])"),
            "Files ['distrib_optim.pt', 'model_optim_rng.pt'] 3\nexit=0");
  ExpectRefusedOnceChanged(fd, snap.size() / 2, request);  // neither file is stored
}

TEST_F(TorchFileTest, FilesWhoseNamesAreNotPlainAreStoredInTheSnapshotsOwnLayout) {
  ASSERT_EQ(Run("make.py", dir_.string()), "made\nexit=0");
  // Same length as distrib_optim.pt: the header stays in place.
  for (const char* name : {"distrib/optim.pt", "PART.json.tmp123"}) {
    SCOPED_TRACE(name);
    std::string snap = Read("files.snap");
    auto at = snap.find("distrib_optim.pt");
    ASSERT_NE(at, std::string::npos);
    snap.replace(at, 16, name);
    ASSERT_TRUE(TorchArchives(AsBytes(snap)));  // convertible: the names make the difference
    SnapshotStore store(1, 64 << 20);
    testing::Save(store, 0, 1, snap);
    auto written = WriteCheckpoint(Request(store, 1, "rank-0", "model_optim_rng.pt"));
    ASSERT_TRUE(written) << written.error().message;
    const std::string part = *written + "/" + PartDirName("rank-0");
    EXPECT_EQ(testing::NamesIn(part), "PART.json model_optim_rng.pt ");
    EXPECT_EQ(ftrun::testing::ReadFile(part + "/model_optim_rng.pt"), snap);
    fs::remove_all(dir_ / "ckpt");
  }
}

// A snapshot of 4 KiB whose header lists `files` (JSON) and one 4-byte tensor at 3072, with
// each (offset, bytes) of `placed` written in.
std::string FilesSnapshot(const std::string& files,
                          const std::vector<std::pair<size_t, std::string>>& placed) {
  const std::string header = R"({"format":1,"step":1,"world_size":1,"bytes":4096,"files":)" +
                             files + R"(,"tensors":[[3072,"uint8",[4]]]})";
  std::string snap = "FTRUNSN1" + std::string(8, '\0') + header;
  for (int i = 0; i < 8; ++i) snap[8 + i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  snap.resize(4096, '\0');
  for (const auto& [at, bytes] : placed) snap.replace(at, bytes.size(), bytes);
  return snap;
}

TEST(TorchFilesTest, AForgedListOfFilesIsAnErrorNeverAnOutputLargerThanItsInput) {
  const std::string names_tensor("\x80\x03K\x00Q.", 6);  // the tensor, as a persistent id
  const std::string none("\x80\x03N.", 4);
  auto error = [](const std::string& snap) {
    auto files = TorchArchives(AsBytes(snap));
    return files ? std::string("converted") : files.error().message;
  };
  EXPECT_EQ(error(FilesSnapshot(R"([["a",2048,6],["b",2050,4]])", {{2048, names_tensor}})),
            "the files' pickles overlap");
  EXPECT_EQ(error(FilesSnapshot(R"([["a",2048,6],["b",2112,6]])",
                                {{2048, names_tensor}, {2112, names_tensor}})),
            "a tensor named by two files");
  EXPECT_EQ(
      error(FilesSnapshot(R"([["a",2048,6],["a",2112,4]])", {{2048, names_tensor}, {2112, none}})),
      "a file name that is empty or repeated");
  EXPECT_EQ(error(FilesSnapshot(R"([["",2048,4]])", {{2048, none}})),
            "a file name that is empty or repeated");
  EXPECT_EQ(error(FilesSnapshot("[]", {})), "a snapshot of no files");
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += (i ? "," : "") + ("[\"f" + std::to_string(i) + "\",2048,4]");
  EXPECT_EQ(error(FilesSnapshot(many + "]", {{2048, none}})), "a snapshot of more than 64 files");
  EXPECT_EQ(error(FilesSnapshot(R"([["a",2048,6],["b",2112,3000]])", {{2048, names_tensor}})),
            "the pickle lies outside the snapshot");
  // Well formed: each file's archive holds the tensors its pickle names, and no other.
  auto files = TorchArchives(AsBytes(
      FilesSnapshot(R"([["a",2048,6],["b",2112,4]])", {{2048, names_tensor}, {2112, none}})));
  ASSERT_TRUE(files) << files.error().message;
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[0].name, "a");
  EXPECT_EQ((*files)[1].name, "b");
  EXPECT_GT((*files)[0].archive.size(), (*files)[1].archive.size() + 4);
}

TEST_F(TorchFileTest, BytesThatAreNotAConvertibleSnapshotAreAnErrorSayingWhy) {
  ASSERT_EQ(Run("make.py", dir_.string()), "made\nexit=0");
  const std::string good = Read("plan.snap");
  auto error = [](const std::string& bytes) {
    auto zip = TorchArchive(AsBytes(bytes));
    return zip ? std::string("converted") : zip.error().message;
  };
  EXPECT_EQ(error("not a snapshot at all"), "not a snapshot");
  EXPECT_EQ(error(good.substr(0, 30)), "the header is cut short");
  std::string bad = good;
  bad[16] = '!';
  EXPECT_EQ(error(bad), "the header is not JSON");
  EXPECT_NE(error(good.substr(0, good.size() / 2)).find("lies outside the snapshot"),
            std::string::npos);
  // Every cut of the pickle or a changed byte in it: an error or a conversion, never a crash
  // (what a changed byte converts to is torch.load's to judge).
  const size_t header_end = good.find('}') + 1;
  for (size_t at = header_end; at < std::min(good.size(), header_end + 2000); ++at) {
    std::string changed = good;
    changed[at] = static_cast<char>(changed[at] ^ 0x5a);
    (void)TorchArchive(AsBytes(changed));
  }
  std::string dtype = good;
  auto at = dtype.find("\"float32\"");
  ASSERT_NE(at, std::string::npos);
  dtype.replace(at, 9, "\"qint8\"  ");
  EXPECT_EQ(error(dtype), "dtype qint8 has no torch storage type");
}

TEST(TorchFileShapeTest, ShapesWhoseStridesOverflowAreRefused) {
  // The bytes fit (a size-0 dimension), the strides (sizes taken as at least 1) would not.
  std::string header = R"({"format":1,"step":1,"world_size":1,"bytes":512,"pickle":[256,6],)"
                       R"("tensors":[[256,"uint8",[0,4294967296,4294967296]]]})";
  std::string snap = "FTRUNSN1" + std::string(8, '\0') + header;
  snap[8] = static_cast<char>(header.size());
  snap.resize(512, '\0');
  auto zip = TorchArchive(AsBytes(snap));
  ASSERT_FALSE(zip);
  EXPECT_EQ(zip.error().message, "a tensor's shape is too large");
}

TEST(TorchPickleTest, PersistentIdsMustBeTensorIndices) {
  std::vector<SnapshotTensor> one{{0, "FloatStorage", 4, {2}}};
  auto pickle = [](const std::string& s) { return TorchPickle(AsBytes(s), {}); };
  EXPECT_EQ(TorchPickle(AsBytes(std::string("\x80\x03K\x01Q.", 6)), one).error().message,
            "a persistent id beyond the tensors");
  EXPECT_EQ(pickle("\x80\x03N)Q.").error().message, "a persistent id that is not a tensor's index");
  EXPECT_EQ(pickle("\x80\x03N").error().message, "the pickle has no end");
  EXPECT_EQ(pickle("\x80\x03X\xff\xff\xff\x7f").error().message,
            "the pickle ends inside an opcode");
  EXPECT_EQ(pickle("\xff").error().message, "pickle opcode 255 is not known");
  EXPECT_EQ(pickle("\x80\x03N.N").error().message, "bytes after the pickle's end");
  // Each tensor is pickled once: a repeated id would multiply what the agent builds.
  EXPECT_EQ(TorchPickle(AsBytes(std::string("\x80\x03K\x00QK\x00Q\x86.", 10)), one).error().message,
            "a tensor's persistent id used twice");
  auto converted = TorchPickle(AsBytes(std::string("\x80\x03K\x00Q.", 6)), one);
  ASSERT_TRUE(converted);
  EXPECT_NE(converted->find("ctorch._utils\n_rebuild_tensor_v2\n"), std::string::npos);
  EXPECT_NE(converted->find("ctorch\nFloatStorage\n"), std::string::npos);
}

}  // namespace
}  // namespace ftrun::launcher
