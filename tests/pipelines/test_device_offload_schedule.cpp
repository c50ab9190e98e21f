// The copy schedule of group offloading onto an accelerator, checked host-side on the fake device's
// recording (fake_device.h: every pinned allocation, fence, side-stream upload and op, in order). Diffusers'
// enable_group_offload(onload_device="cuda", use_stream=True): each group's weights live in page-locked host
// memory, travel to a device buffer on the transfer stream, and a buffer is written again only after the
// kernels that read it were queued and fenced. What it cannot show: that the copies overlap the compute on a
// real GPU (the device check's offload rows measure that).
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <optional>

#include <unistd.h>

#include "pipeline_test_util.h"
#include "placement_test_util.h"

namespace diffq {
namespace {

using testing::FakeScheduleEvent;
const std::filesystem::path kFixtures = "tests/fixtures";

struct ScheduleFacts {
  int pinned = 0, uploads = 0, fences = 0, fenced_reuses = 0;
};

// Checks the rule every upload must keep: a device buffer is written again only after a fence recorded after
// the last kernel that read it (else the copy could overwrite weights a queued kernel has yet to read), and
// counts what happened. A kernel reads a buffer when one of its inputs starts inside it.
ScheduleFacts check_schedule(const std::vector<FakeScheduleEvent>& ev, const std::string& what) {
  ScheduleFacts f;
  struct Buffer {
    size_t nbytes = 0;
    std::optional<size_t> last_read;  // index of the last op reading it since its last upload
  };
  std::map<const void*, Buffer> buffers;
  std::map<int64_t, size_t> fence_at;  // fence id -> index
  for (size_t i = 0; i < ev.size(); ++i) {
    const FakeScheduleEvent& e = ev[i];
    if (e.kind == FakeScheduleEvent::pinned_alloc) ++f.pinned;
    if (e.kind == FakeScheduleEvent::fence) fence_at[e.fence_id] = i, ++f.fences;
    if (e.kind == FakeScheduleEvent::op)
      for (const void* r : e.reads)
        for (auto& [base, b] : buffers)
          if (r >= base && static_cast<const uint8_t*>(r) < static_cast<const uint8_t*>(base) + b.nbytes) b.last_read = i;
    if (e.kind != FakeScheduleEvent::upload) continue;
    ++f.uploads;
    EXPECT_GT(e.nbytes, 0u) << what << ": an empty upload at event " << i;
    Buffer& b = buffers[e.ptr];
    if (b.last_read) {
      EXPECT_NE(e.fence_id, 0) << what << ": upload " << i << " overwrites a device buffer kernel " << *b.last_read
                               << " read, without waiting";
      const auto fi = fence_at.find(e.fence_id);
      if (e.fence_id != 0 && fi != fence_at.end()) {
        EXPECT_GT(fi->second, *b.last_read) << what << ": upload " << i << " waits on a fence recorded before kernel "
                                            << *b.last_read << " that read its buffer";
        ++f.fenced_reuses;
      }
    }
    b.nbytes = e.nbytes;  // the range this fill holds: memory beyond it may be another allocation's
    b.last_read.reset();
  }
  return f;
}

struct Case {
  const char* folder;
  bool video;
  const char* mode;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.folder << " " << c.mode; }
};
class DeviceOffloadSchedule : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceOffloadSchedule, PinnedHomesSideStreamUploadsFencedBufferReuse) {
  const auto folder = kFixtures / GetParam().folder;
  const char* mode = GetParam().mode;
  const GenerateParams g = testing::small_call(GetParam().video);
  const GenerateResult cpu = testing::run_on_cpu(folder, g);
  testing::FakeDevice dev;
  {
    PipelineOptions po;
    po.dtype = DType::f32;
    po.device = Device::cuda(0);
    auto pipe = DiffusionPipeline::from_pretrained(folder, po);
    dev.clear_records();
    pipe->enable_offload(mode);
    const int pinned_at_setup = check_schedule(dev.schedule(), "setup").pinned;
    EXPECT_GT(pinned_at_setup, 2) << mode << ": each group's host copy is page-locked";
    dev.clear_records();
    const GenerateResult r = pipe->generate(g);
    testing::expect_all_on_device(dev.records(), mode);
    const ScheduleFacts f = check_schedule(dev.schedule(), mode);
    EXPECT_EQ(f.pinned, 0) << "no host memory is pinned per call";
    // Every group comes to the device for each of the two steps (and the encoders' once).
    EXPECT_GE(f.uploads, pinned_at_setup) << mode;
    EXPECT_GT(f.fenced_reuses, 0) << mode << ": device buffers are reused across groups, behind fences";
    EXPECT_EQ(testing::rel_err(r.latents, cpu.latents), 0.0);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

// Disk offload onto the accelerator: the groups' files are read through one page-locked staging buffer
// pinned at setup (not the model: nothing else is pinned), each upload waits on a fence and reused device
// buffers are fenced; the CPU's bits.
TEST(DeviceOffloadScheduleDisk, FilesReachTheDeviceThroughOneStagingBuffer) {
  const GenerateParams g = testing::small_call(false);
  const GenerateResult cpu = testing::run_on_cpu(kFixtures / "tiny-flux", g);
  const auto dir = std::filesystem::temp_directory_path() / ("diffq-disk-device-" + std::to_string(::getpid()));
  testing::FakeDevice dev;
  {
    PipelineOptions po;
    po.dtype = DType::f32;
    po.device = Device::cuda(0);
    auto pipe = DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po);
    dev.clear_records();
    const std::string applied = pipe->enable_offload("disk:" + dir.string());
    EXPECT_EQ(check_schedule(dev.schedule(), "setup").pinned, 1) << applied << ": one staging buffer, pinned once";
    EXPECT_TRUE(std::filesystem::exists(dir)) << applied;
    dev.clear_records();
    const GenerateResult r = pipe->generate(g);
    testing::expect_all_on_device(dev.records(), "disk");
    const ScheduleFacts f = check_schedule(dev.schedule(), "disk");
    EXPECT_EQ(f.pinned, 0);
    EXPECT_GT(f.uploads, 2);
    EXPECT_GT(f.fenced_reuses, 0) << "device buffers are reused across groups, behind fences";
    for (const auto& e : dev.schedule())
      if (e.kind == FakeScheduleEvent::upload) EXPECT_NE(e.fence_id, 0) << "an upload that waits on nothing";
    EXPECT_EQ(testing::rel_err(r.latents, cpu.latents), 0.0);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Modes, DeviceOffloadSchedule,
                         ::testing::Values(Case{"tiny-flux", false, "group"}, Case{"tiny-flux", false, "group:2"},
                                           Case{"tiny-flux", false, "leaf"}, Case{"tiny-wan", true, "group"},
                                           Case{"tiny-wan", true, "leaf"}, Case{"tiny-wan22", true, "group"}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.folder) + "_" + info.param.mode;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace diffq
