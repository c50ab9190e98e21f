// include/diffq/adherence.h: the demo model's judge, a CNN read from models/demo-flux-classifier
// (tools/train_demo/classifier.py writes it and lists the layers in config.json):
//   x = pixel / 127.5 - 1, [N, 3, 64, 64]
//   conv1 3->16 k3 p1, relu, maxpool2    -> [N, 16, 32, 32]
//   conv2 16->32 k3 p1, relu, maxpool2   -> [N, 32, 16, 16]
//   conv3 32->32 k3 p1, relu, maxpool2   -> [N, 32, 8, 8]
//   conv4 32->32 k3 p1, relu, flatten    -> [N, 2048]  (C, H, W order)
//   fc 2048->128, relu; heads.<name> 128->labels
#include "diffq/adherence.h"

#include <algorithm>
#include <cmath>

#include "diffq/error.h"
#include "io/json_config.h"
#include "io/safetensors.h"
#include "ops/ops.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "adherence";

// relu then 2x2 max pooling with stride 2 (torch's max_pool2d(relu(x), 2): floors odd sizes), f32 [N, C, H, W].
Tensor relu_max_pool2(const Tensor& x) {
  const Tensor c = x.to(DType::f32).contiguous();
  const int64_t N = c.size(0), C = c.size(1), H = c.size(2), W = c.size(3), h = H / 2, w = W / 2;
  Tensor out = Tensor::empty({N, C, h, w}, DType::f32);
  const float* in = c.data<float>();
  float* o = out.data<float>();
  for (int64_t p = 0; p < N * C; ++p)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const float* q = in + (p * H + 2 * i) * W + 2 * j;
        o[(p * h + i) * w + j] = std::max({0.0f, q[0], q[1], q[W], q[W + 1]});
      }
  return out;
}

Tensor relu(const Tensor& x) {
  Tensor c = x.to(DType::f32).contiguous().clone();
  float* p = c.data<float>();
  for (int64_t i = 0; i < c.numel(); ++i) p[i] = std::max(p[i], 0.0f);
  return c;
}

class CnnJudge final : public AdherenceJudge {
 public:
  explicit CnnJudge(const std::filesystem::path& folder) {
    const auto cfg_path = folder / "config.json";
    const io::JsonConfig cfg = io::read_json_config(cfg_path, kCtx);
    const auto& j = cfg.json();
    check(j.contains("heads") && j["heads"].is_object() && !j["heads"].empty(), kCtx, cfg_path.string(),
          ": 'heads' must be an object of label lists");
    for (const auto& [name, labels] : j["heads"].items()) {
      check(labels.is_array() && !labels.empty(), kCtx, cfg_path.string(), ": heads.", name, " must be a list of labels");
      heads_.push_back(name);
      for (const auto& l : labels) {
        check(l.is_string(), kCtx, cfg_path.string(), ": heads.", name, " holds ", l.dump(), ", expected strings");
        labels_[name].push_back(l.get<std::string>());
      }
    }
    size_ = cfg.get<int64_t>("image_size", 64);
    check(size_ == 64, kCtx, cfg_path.string(), ": image_size ", size_, " (the network's fc layer is built for 64)");

    const auto weights = folder / "model.safetensors";
    const auto f = io::SafetensorsFile::open(weights);
    const auto get = [&](const std::string& name, const Shape& shape) {
      check(f.contains(name), kCtx, weights.string(), ": tensor '", name, "' is missing");
      Tensor t = f.tensor(name).to(DType::f32).contiguous();
      check(t.shape() == shape, kCtx, weights.string(), ": '", name, "' is ", shape_str(t.shape()), ", expected ",
            shape_str(shape));
      return t;
    };
    const int64_t chans[5] = {3, 16, 32, 32, 32};
    for (int k = 0; k < 4; ++k) {
      const std::string n = "conv" + std::to_string(k + 1);
      conv_w_[k] = get(n + ".weight", {chans[k + 1], chans[k], 3, 3});
      conv_b_[k] = get(n + ".bias", {chans[k + 1]});
    }
    fc_w_ = get("fc.weight", {128, 32 * 8 * 8});
    fc_b_ = get("fc.bias", {128});
    for (const auto& h : heads_) {
      const int64_t n = int64_t(labels_[h].size());
      head_w_[h] = get("heads." + h + ".weight", {n, 128});
      head_b_[h] = get("heads." + h + ".bias", {n});
    }

    const auto prompts_path = folder / "adherence_prompts.json";
    const nlohmann::json pj = io::read_json_file(prompts_path, kCtx);
    check(pj.is_array(), kCtx, prompts_path.string(), ": expected a list of {prompt, seed, expected}");
    for (const auto& e : pj) {
      check(e.is_object() && e.contains("prompt") && e["prompt"].is_string() && e.contains("seed") &&
                e["seed"].is_number_unsigned() && e.contains("expected") && e["expected"].is_object(),
            kCtx, prompts_path.string(), ": entry ", e.dump().substr(0, 120), " needs prompt (string), seed (integer >= 0), expected (object)");
      AdherencePrompt p{e["prompt"].get<std::string>(), e["seed"].get<uint64_t>(), {}};
      for (const auto& h : heads_) {
        check(e["expected"].contains(h) && e["expected"][h].is_string(), kCtx, prompts_path.string(), ": '", p.prompt,
              "' has no expected ", h);
        const std::string v = e["expected"][h].get<std::string>();
        const auto& ls = labels_[h];
        check(std::find(ls.begin(), ls.end(), v) != ls.end(), kCtx, prompts_path.string(), ": '", p.prompt, "': ", h, " '",
              v, "' is not one of the judge's labels");
        p.expected[h] = v;
      }
      prompts_.push_back(std::move(p));
    }
  }

  int64_t image_size() const override { return size_; }
  const std::vector<std::string>& heads() const override { return heads_; }
  const std::vector<AdherencePrompt>& prompts() const override { return prompts_; }

  std::map<std::string, Tensor> logits(const Tensor& images_u8) const override {
    check(images_u8.dtype() == DType::u8 && images_u8.dim() == 4 && images_u8.size(1) == size_ &&
              images_u8.size(2) == size_ && images_u8.size(3) == 3,
          kCtx, "the judge takes uint8 images [N, ", size_, ", ", size_, ", 3], got ", images_u8.str());
    // [N, H, W, 3] u8 -> [N, 3, H, W] in [-1, 1]
    const Tensor hwc = images_u8.contiguous();
    const int64_t N = hwc.size(0), S = size_;
    std::vector<float> x(size_t(N * 3 * S * S));
    const uint8_t* px = hwc.data<uint8_t>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t i = 0; i < S * S; ++i)
          x[size_t((n * 3 + c) * S * S + i)] = float(px[(n * S * S + i) * 3 + c]) / 127.5f - 1.0f;
    Tensor h = Tensor::from_vector(x, {N, 3, S, S});
    const ops::Conv2dPad pad{1, 1, 1, 1};
    for (int k = 0; k < 3; ++k) h = relu_max_pool2(ops::conv2d(h, conv_w_[k], conv_b_[k], 1, pad));
    h = relu(ops::conv2d(h, conv_w_[3], conv_b_[3], 1, pad)).reshape({N, 32 * 8 * 8});  // [N, 2048]
    const Tensor f = relu(ops::linear(h, fc_w_, fc_b_));                                  // [N, 128]
    std::map<std::string, Tensor> out;
    for (const auto& name : heads_) out[name] = ops::linear(f, head_w_.at(name), head_b_.at(name)).to(DType::f32);
    return out;
  }

  std::vector<Attributes> predict(const Tensor& images_u8) const override {
    const auto lg = logits(images_u8);
    const int64_t N = images_u8.size(0);
    std::vector<Attributes> out(static_cast<size_t>(N));
    for (const auto& name : heads_) {
      const std::vector<float> v = lg.at(name).to_f32_vector();
      const auto& ls = labels_.at(name);
      const int64_t L = int64_t(ls.size());
      for (int64_t n = 0; n < N; ++n) {
        const float* row = v.data() + n * L;
        out[size_t(n)][name] = ls[size_t(std::max_element(row, row + L) - row)];  // first maximum, as torch.argmax
      }
    }
    return out;
  }

 private:
  int64_t size_ = 64;
  std::vector<std::string> heads_;
  std::map<std::string, std::vector<std::string>> labels_;
  Tensor conv_w_[4], conv_b_[4], fc_w_, fc_b_;
  std::map<std::string, Tensor> head_w_, head_b_;
  std::vector<AdherencePrompt> prompts_;
};
}  // namespace

std::unique_ptr<AdherenceJudge> AdherenceJudge::load(const std::filesystem::path& folder) {
  check(std::filesystem::is_directory(folder), kCtx, folder.string(), " is not a folder (expected the demo judge: ",
        "model.safetensors, config.json, adherence_prompts.json)");
  return std::make_unique<CnnJudge>(folder);
}

std::filesystem::path AdherenceJudge::next_to(const std::filesystem::path& model_folder) {
  std::filesystem::path f = model_folder;
  while (!f.empty() && !f.has_filename()) f = f.parent_path();  // "models/demo-flux/" -> "models/demo-flux"
  const auto p = f.parent_path() / (f.filename().string() + "-classifier");
  return std::filesystem::is_regular_file(p / "model.safetensors") ? p : std::filesystem::path{};
}

AdherenceScore AdherenceJudge::score(const Tensor& images_u8) const {
  const auto& ps = prompts();
  check(images_u8.dim() == 4 && images_u8.size(0) == int64_t(ps.size()), kCtx, "score takes one image per prompt (",
        ps.size(), "), got ", images_u8.str());
  AdherenceScore s;
  s.total = int64_t(ps.size());
  s.predicted = predict(images_u8);
  for (const auto& h : heads()) s.per_attribute[h] = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    bool all = true;
    for (const auto& h : heads()) {
      const bool ok = s.predicted[i].at(h) == ps[i].expected.at(h);
      s.per_attribute[h] += ok;
      all = all && ok;
    }
    s.row_right.push_back(all);
    s.right += all;
  }
  return s;
}

AdherenceScore check_adherence(DiffusionPipeline& pipe, const AdherenceJudge& judge, const GenerateParams& base,
                               Tensor* images_out) {
  const auto& ps = judge.prompts();
  const int64_t S = judge.image_size();
  Tensor images = Tensor::empty({int64_t(ps.size()), S, S, 3}, DType::u8);
  for (size_t i = 0; i < ps.size(); ++i) {
    GenerateParams p = base;
    p.prompt = ps[i].prompt;
    p.seed = ps[i].seed;
    p.width = p.height = S;
    p.num_outputs = 1;
    const GenerateResult r = pipe.generate(p);
    check(r.images_u8.defined(), kCtx, "the pipeline made no image (a builtin or a video pipeline?)");
    const Tensor img = r.images_u8.select(0, 0).contiguous();
    std::copy_n(img.data<uint8_t>(), S * S * 3, images.data<uint8_t>() + int64_t(i) * S * S * 3);
  }
  if (images_out) *images_out = images;
  return judge.score(images);
}

}  // namespace diffq
