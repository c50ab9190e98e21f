#include "bench_quality.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "diffq/adherence.h"
#include "diffq/error.h"
#include "diffq/quality.h"

namespace diffq::cli {

namespace {

const char* on_name(QualityOn on) { return on == QualityOn::pixels ? "pixels" : "latents"; }

// FLUX's packed latents [B, (h/2)(w/2), 4C] -> [B, C, h, w] with (h, w) = 2 * (size / 16) (vae_scale_factor 8,
// what every FLUX folder and builtin has), as FluxPipeline._unpack_latents.
Tensor unpack_flux(const Tensor& packed, int64_t width, int64_t height) {
  const int64_t h2 = height / 16, w2 = width / 16, b = packed.size(0), c4 = packed.size(2);
  check(packed.dim() == 3 && packed.size(1) == h2 * w2 && c4 % 4 == 0, "bench",
        "--quality: FLUX latents ", packed.str(), " are not packed for ", width, "x", height);
  return packed.contiguous()
      .view({b, h2, w2, c4 / 4, 2, 2})  // [B, h/2, w/2, C, dy, dx]
      .permute({0, 3, 1, 4, 2, 5})      // [B, C, h/2, dy, w/2, dx]
      .reshape({b, c4 / 4, 2 * h2, 2 * w2});
}

}  // namespace

Tensor quality_planes(const GenerateResult& r, bool video, QualityOn on) {
  if (on == QualityOn::latents)
    return video ? r.latents : unpack_flux(r.latents, r.used.width, r.used.height);
  check(r.pixels_f32.defined(), "bench", "--quality: the generation returned no pixels");
  return video ? r.pixels_f32.permute({0, 1, 4, 2, 3})  // [N, F, 3, H, W]
               : r.pixels_f32.permute({0, 3, 1, 2});    // [N, 3, H, W]
}

nlohmann::json save_quality_output(const std::string& path, const Tensor& planes, QualityOn on) {
  save_latents(path, planes.to(DType::f32).contiguous());
  return {{"on", on_name(on)}, {"shape", planes.shape()}};
}

size_t quality_reference(const std::vector<std::string>& combos) {
  std::optional<size_t> first;
  for (size_t i = 0; i < combos.size(); ++i) {
    const Combo c = parse_combo(combos[i]);
    if (!unmodified_model(c)) continue;
    if (c.dtype == DType::f32) return i;
    if (!first) first = i;
  }
  check(first.has_value(), "bench",
        "--quality compares every combination with one that neither quantizes nor caches (e.g. add \"fp32\" or "
        "\"bf16\" to --combos)");
  return *first;
}

void add_quality(std::vector<nlohmann::json>& rows, const std::vector<std::string>& files, size_t ref) {
  const Tensor want = load_latents(files.at(ref));
  const std::string on = rows.at(ref).at("quality_output").at("on");
  // Pixels are in [0, 1]; latents have no fixed range: the reference's max - min.
  double L = 1.0;
  if (on == "latents") {
    const auto v = want.to_f32_vector();
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    L = std::max(double(*hi) - double(*lo), 1e-12);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& row = rows[i];
    const Tensor got = load_latents(files.at(i));
    check(got.shape() == want.shape(), "bench", "--quality: '", row.at("combo").get<std::string>(), "' made ",
          shape_str(got.shape()), " but the reference '", rows[ref].at("combo").get<std::string>(), "' made ",
          shape_str(want.shape()));
    const double mse = mean_squared_error(got, want), p = psnr(got, want, L);
    nlohmann::json q = {{"reference", rows[ref].at("combo")}, {"on", on}, {"data_range", L}, {"mse", mse},
                        {"identical", mse == 0}, {"psnr_db", std::isinf(p) ? nlohmann::json(nullptr) : nlohmann::json(p)},
                        {"ssim", ssim_fits(want.shape()) ? nlohmann::json(ssim(got, want, L)) : nlohmann::json(nullptr)}};
    row["quality"] = q;
    row.erase("quality_output");
  }
}

std::string quality_note(const std::vector<nlohmann::json>& rows) {
  for (const auto& r : rows) {
    if (!r.contains("quality")) continue;
    const auto& q = r.at("quality");
    const bool lat = q.at("on") == "latents";
    std::string s = "quality: PSNR and SSIM of each combination's output vs '" + q.at("reference").get<std::string>() +
                    "' (the unquantized, uncached reference; same seed) on the " +
                    (lat ? "final latents (no VAE in this model), data range = the reference's max - min"
                         : "decoded pixels in [0, 1], data range 1") +
                    "; SSIM: 11x11 Gaussian window (sigma 1.5), C1=(0.01 L)^2, C2=(0.03 L)^2, per channel " +
                    (lat ? "and latent frame" : "(R, G, B)") +
                    " averaged (as skimage's structural_similarity); LPIPS is not computed: it needs a trained network";
    if (q.at("ssim").is_null()) s += "; SSIM '-': the planes are smaller than the 11x11 window";
    return s;
  }
  return "";
}

nlohmann::json adherence_fields(const BenchArgs& a, DiffusionPipeline& pipe) {
  if (a.quality_out.empty() || a.model.rfind("builtin:", 0) == 0) return nlohmann::json::object();  // a --quality worker
  const auto folder = AdherenceJudge::next_to(a.model);
  if (folder.empty()) return nlohmann::json::object();
  const auto judge = AdherenceJudge::load(folder);
  const AdherenceScore s = check_adherence(pipe, *judge);
  return {{"adherence", {{"right", s.right}, {"total", s.total}, {"per_attribute", s.per_attribute},
                         {"judge", folder.string()}}}};
}

std::string adherence_cell(const nlohmann::json& row) {
  if (!row.contains("adherence")) return "-";
  const auto& j = row.at("adherence");
  return std::to_string(j.at("right").get<int64_t>()) + "/" + std::to_string(j.at("total").get<int64_t>());
}

std::string psnr_cell(const nlohmann::json& row) {
  if (!row.contains("quality")) return "-";
  const auto& q = row.at("quality");
  if (q.at("identical").get<bool>()) return "inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", q.at("psnr_db").get<double>());
  return b;
}

std::string ssim_cell(const nlohmann::json& row) {
  if (!row.contains("quality") || row.at("quality").at("ssim").is_null()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", row.at("quality").at("ssim").get<double>());
  return b;
}

}  // namespace diffq::cli
