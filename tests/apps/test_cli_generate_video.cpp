// `diffq generate` on a Wan folder as a user runs it: the built binary, the bundled tiny Wan pipelines. The mp4
// decodes (libav) to the call's frame count and size, each frame matching its PNG frame (below), which equal
// Diffusers' frames (uint8, as output_type "pil"); latents out equal Diffusers' final latents; bad input is a
// clear error with a non-zero exit and no file left behind.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/video_reader.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::max_rel;
using diffq::testing::run_cli;

const fs::path kRepo = fs::current_path();  // ctest runs the tests from the repository root

class CliGenerateVideo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("diffq-cli-video-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string model(const char* name = "tiny-wan") const { return "-m '" + (kRepo / "tests/fixtures" / name).string() + "'"; }
  fs::path dir_;
};

std::vector<uint8_t> bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

double psnr(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double se = 0;
  for (size_t i = 0; i < a.size(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return se == 0 ? std::numeric_limits<double>::infinity() : 10 * std::log10(255.0 * 255.0 * double(a.size()) / se);
}

// The "cfg" call of tests/fixtures/tiny-wan/reference/cases.json.
const std::string kCfgCall =
    "-p 'A photo of a Cat sitting on a RED chair, 4k!!' --width 48 --height 32 --frames 5 --steps 3 --guidance 5 --seed 0";

TEST_F(CliGenerateVideo, Mp4AndPngFramesMatchDiffusers) {
  const auto r = run_cli(dir_, "generate " + model() + " " + kCfgCall + " -o clip.mp4 --output-frames frames --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto ref = diffq::io::SafetensorsFile::open(kRepo / "tests/fixtures/tiny-wan/reference/cfg.safetensors");
  const auto ref_frames = ref.tensor("frames").to_f32_vector();  // [1, 5, 32, 48, 3] in [0, 1]
  const auto video = diffq::io::read_video(dir_ / "clip.mp4");
  EXPECT_EQ(video.codec, "h264");
  ASSERT_EQ(video.frames_u8.shape(), (diffq::Shape{5, 32, 48, 3}));
  EXPECT_DOUBLE_EQ(video.fps, 16.0);
  EXPECT_EQ(video.metadata.at("prompt"), "A photo of a Cat sitting on a RED chair, 4k!!");
  EXPECT_EQ(video.metadata.at("frames"), "5");
  // The tiny model's frames are per-pixel noise, the worst case for H.264 at crf 25 with 4:2:0 chroma: they
  // come back at ~23-24 dB (tests/io/test_video.cpp holds the >= 35 dB bound on natural-looking content).
  // Here: every mp4 frame is closer to its own PNG frame than to any other, by a margin, and >= 20 dB.
  const auto mp4 = video.frames_u8.contiguous();
  const size_t n = 32 * 48 * 3;
  std::vector<std::vector<uint8_t>> pngs;
  for (int f = 0; f < 5; ++f) {
    const auto file = bytes_of(dir_ / "frames" / ("0000" + std::to_string(f) + ".png"));
    const auto png = diffq::io::decode_png(file.data(), file.size(), "png");
    ASSERT_EQ(png.rgb.size(), n);
    std::vector<uint8_t> want(n), got(mp4.data<uint8_t>() + f * n, mp4.data<uint8_t>() + (f + 1) * n);
    for (size_t i = 0; i < n; ++i) want[i] = uint8_t(std::nearbyint(ref_frames[f * n + i] * 255.0f));
    EXPECT_GE(psnr(png.rgb, want), 40.0) << "frame " << f;  // PNG vs Diffusers' pil frame
    EXPECT_GE(psnr(got, png.rgb), 20.0) << "frame " << f;   // mp4 vs the PNG frame
    pngs.push_back(png.rgb);
  }
  for (int f = 0; f < 5; ++f) {
    const std::vector<uint8_t> got(mp4.data<uint8_t>() + f * n, mp4.data<uint8_t>() + (f + 1) * n);
    for (int g = 0; g < 5; ++g)
      if (g != f) EXPECT_GT(psnr(got, pngs[size_t(f)]), psnr(got, pngs[size_t(g)]) + 3.0) << f << " vs " << g;
  }
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["pipeline"], "WanPipeline");
  EXPECT_EQ(j["num_frames"], 5);
  EXPECT_EQ(j["steps"], 3);
}

TEST_F(CliGenerateVideo, LatentOutputEqualsDiffusersAndWebpIsWritten) {
  auto r = run_cli(dir_, "generate " + model() + " " + kCfgCall + " --output-type latent -o lat.safetensors");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto ref = diffq::io::SafetensorsFile::open(kRepo / "tests/fixtures/tiny-wan/reference/cfg.safetensors");
  const auto got = diffq::io::SafetensorsFile::open(dir_ / "lat.safetensors").tensor("latents");
  EXPECT_LE(max_rel(got.to_f32_vector(), ref.tensor("latents").to_f32_vector()), 1e-4);

  r = run_cli(dir_, "generate " + model("tiny-wan22") + " -p 'a fox' --width 32 --height 16 --frames 6 --steps 6 "
                    "--guidance 4 --guidance-2 3 -o clip.webp");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("rounded to 5"), std::string::npos) << r.out;  // 6 frames -> 6 // 4 * 4 + 1
  const auto video = diffq::io::read_video(dir_ / "clip.webp");
  EXPECT_EQ(video.codec, "webp");
  EXPECT_EQ(video.frames_u8.shape(), (diffq::Shape{5, 16, 32, 3}));
}

TEST_F(CliGenerateVideo, BadInputIsAClearErrorAndLeavesNothing) {
  auto r = run_cli(dir_, "generate " + model() + " -p x --width 40 --height 32 --frames 5 --steps 1 -o a.mp4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("multiples of 16"), std::string::npos) << r.out;
  r = run_cli(dir_, "generate " + model() + " -p x --width 32 --height 32 --frames 5 --steps 1 -o a.png");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find(".mp4 or .webp"), std::string::npos) << r.out;
  r = run_cli(dir_, "generate " + model() + " -p x --width 32 --height 32 --frames 5 --steps 1 --guidance-2 2 -o a.mp4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("guidance_scale_2 is only supported"), std::string::npos) << r.out;
  r = run_cli(dir_, "generate " + model() + " -p x --width 32 --height 32 --frames 5 --steps 1 --true-cfg 2 -o a.mp4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--true-cfg is a FLUX option"), std::string::npos) << r.out;
  r = run_cli(dir_, "generate " + model() + " -p x --width 32 --height 32 --frames 5 --steps 1 -o missing/dir/a.mp4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("missing/dir/a.mp4"), std::string::npos) << r.out;
  r = run_cli(dir_, "generate -p x --frames 5 -o a.png");  // the default model is FLUX: no video options
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("are for video pipelines"), std::string::npos) << r.out;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << e.path();
}

}  // namespace
