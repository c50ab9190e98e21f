// The demo model's judge (include/diffq/adherence.h, src/metrics/adherence_judge.cpp): diffq's CNN against
// PyTorch's logits of the same network on tests/fixtures/demo-judge (tools/reference/make_demo_judge_fixtures.py),
// the scoring rule, and clear errors for a broken judge folder.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error_of.h"
#include "diffq/adherence.h"
#include "diffq/error.h"
#include "io/png.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using diffq::Tensor;
using diffq::testing::error_of;

namespace {
const fs::path kJudge = DIFFQ_SOURCE_DIR "/models/demo-flux-classifier";
const fs::path kDir = DIFFQ_SOURCE_DIR "/tests/fixtures/demo-judge";

Tensor fixture_images() {
  const int64_t N = 12;
  Tensor t = Tensor::empty({N, 64, 64, 3}, diffq::DType::u8);
  for (int64_t i = 0; i < N; ++i) {
    const auto png = diffq::io::read_png(kDir / ("image_" + std::string(i < 10 ? "0" : "") + std::to_string(i) + ".png"));
    EXPECT_EQ(png.width, 64);
    std::copy(png.rgb.begin(), png.rgb.end(), t.data<uint8_t>() + i * 64 * 64 * 3);
  }
  return t;
}
}  // namespace

TEST(AdherenceJudge, LogitsMatchPyTorch) {
  const auto judge = diffq::AdherenceJudge::load(kJudge);
  const Tensor images = fixture_images();
  const auto got = judge->logits(images);
  const auto ref = diffq::io::SafetensorsFile::open(kDir / "logits.safetensors");
  ASSERT_EQ(judge->heads().size(), 4u);
  for (const auto& h : judge->heads()) {
    const auto r = ref.tensor(h).to_f32_vector();
    const auto g = got.at(h).to_f32_vector();
    ASSERT_EQ(r.size(), g.size()) << h;
    double maxd = 0, maxr = 0;
    for (size_t i = 0; i < r.size(); ++i) maxd = std::max(maxd, std::abs(double(g[i]) - r[i])), maxr = std::max(maxr, std::abs(double(r[i])));
    EXPECT_LE(maxd / maxr, 1e-4) << h << ": max |diffq - torch| " << maxd << " of " << maxr;
  }
  std::ifstream in(kDir / "labels.json");
  const auto labels = nlohmann::json::parse(in);
  const auto pred = judge->predict(images);
  ASSERT_EQ(pred.size(), labels.size());
  for (size_t i = 0; i < pred.size(); ++i)
    for (const auto& h : judge->heads()) EXPECT_EQ(pred[i].at(h), labels[i][h].get<std::string>()) << "image " << i << " " << h;
}

TEST(AdherenceJudge, ScoresEveryAttributeAndTheWholePrompt) {
  const auto judge = diffq::AdherenceJudge::load(kJudge);
  const auto& ps = judge->prompts();
  ASSERT_EQ(ps.size(), 20u);
  // Images the judge reads as image 0's attributes: row 0 right, the other rows right only where they agree.
  const Tensor one = fixture_images().slice(0, 0, 1);
  Tensor imgs = Tensor::empty({20, 64, 64, 3}, diffq::DType::u8);
  for (int64_t i = 0; i < 20; ++i) std::copy_n(one.data<uint8_t>(), 64 * 64 * 3, imgs.data<uint8_t>() + i * 64 * 64 * 3);
  const auto seen = judge->predict(one)[0];
  const auto s = judge->score(imgs);
  EXPECT_EQ(s.total, 20);
  int64_t right = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    bool all = true;
    for (const auto& h : judge->heads()) all = all && ps[i].expected.at(h) == seen.at(h);
    EXPECT_EQ(s.row_right[i], all) << ps[i].prompt;
    right += all;
  }
  EXPECT_EQ(s.right, right);
  for (const auto& h : judge->heads()) {
    int64_t n = 0;
    for (const auto& p : ps) n += p.expected.at(h) == seen.at(h);
    EXPECT_EQ(s.per_attribute.at(h), n) << h;
  }
  EXPECT_NE(error_of([&] { judge->score(one); }), "");  // one image for 20 prompts
  EXPECT_NE(error_of([&] { judge->predict(Tensor::zeros({1, 32, 32, 3}, diffq::DType::u8)); }).find("[N, 64, 64, 3]"),
            std::string::npos);
}

TEST(AdherenceJudge, BrokenFolderNamesTheFileAndField) {
  const fs::path tmp = fs::temp_directory_path() / ("diffq_judge_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  EXPECT_NE(error_of([&] { diffq::AdherenceJudge::load(tmp / "nope"); }).find("not a folder"), std::string::npos);
  for (const char* f : {"model.safetensors", "config.json", "adherence_prompts.json"}) fs::copy_file(kJudge / f, tmp / f);
  // a label the judge does not know
  {
    std::ifstream in(kJudge / "adherence_prompts.json");
    auto j = nlohmann::json::parse(in);
    j[3]["expected"]["colour"] = "teal";
    std::ofstream(tmp / "adherence_prompts.json") << j.dump();
    const auto e = error_of([&] { diffq::AdherenceJudge::load(tmp); });
    EXPECT_NE(e.find("adherence_prompts.json"), std::string::npos) << e;
    EXPECT_NE(e.find("teal"), std::string::npos) << e;
  }
  // a missing tensor
  {
    fs::copy_file(kJudge / "adherence_prompts.json", tmp / "adherence_prompts.json", fs::copy_options::overwrite_existing);
    diffq::io::StateDict sd;
    const auto f = diffq::io::SafetensorsFile::open(kJudge / "model.safetensors");
    for (const auto& n : f.names())
      if (n != "fc.bias") sd[n] = f.tensor(n);
    diffq::io::save_safetensors(tmp / "model.safetensors", sd, std::nullopt);
    const auto e = error_of([&] { diffq::AdherenceJudge::load(tmp); });
    EXPECT_NE(e.find("fc.bias"), std::string::npos) << e;
  }
  EXPECT_EQ(diffq::AdherenceJudge::next_to(DIFFQ_SOURCE_DIR "/models/demo-flux/"), fs::path(DIFFQ_SOURCE_DIR "/models/demo-flux-classifier"));
  EXPECT_EQ(diffq::AdherenceJudge::next_to(tmp), fs::path{});
  fs::remove_all(tmp);
}
