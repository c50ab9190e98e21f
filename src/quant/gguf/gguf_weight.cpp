#include "quant/gguf/gguf_weight.h"

#include <cctype>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "diffq/error.h"
#include "quant/tile_linear_plan.h"

namespace diffq::quant {

namespace {
constexpr const char* kCtx = "gguf";

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

DType parse_compute_dtype(const nlohmann::json& v) {
  check(v.is_string(), kCtx, "compute_dtype must be a string such as \"bfloat16\", got ", v.dump());
  const std::string s = v.get<std::string>();
  DType d;
  try {
    d = parse_dtype(s);
  } catch (const Error&) {
    fail(kCtx, "compute_dtype '", s, "' is not a dtype (float32, bfloat16 or float16)");
  }
  check(d == DType::f32 || d == DType::bf16 || d == DType::f16, kCtx, "compute_dtype '", s,
        "' must be float32, bfloat16 or float16");
  return d;
}
}  // namespace

// ---- config ----------------------------------------------------------------------------------------

GGUFQuantizationConfig GGUFQuantizationConfig::from_json(const nlohmann::json& j) {
  check(j.is_object(), kCtx, "a GGUF quantization config must be a JSON object, got ", j.dump());
  GGUFQuantizationConfig c;
  if (auto it = j.find("quant_method"); it != j.end() && !it->is_null())
    check(it->is_string() && lower(it->get<std::string>()) == "gguf", kCtx, "quant_method ", it->dump(),
          " is not \"gguf\"");
  if (auto it = j.find("type"); it != j.end() && !it->is_null()) {
    check(it->is_string(), kCtx, "type must be a string such as \"q4_K\", got ", it->dump());
    const auto t = gguf::parse_type(it->get<std::string>());
    check(t.has_value(), kCtx, "type '", it->get<std::string>(), "' is not a GGUF type diffq supports (",
          gguf::supported_type_names(), ")");
    c.type = *t;
  }
  if (auto it = j.find("compute_dtype"); it != j.end() && !it->is_null()) c.compute_dtype = parse_compute_dtype(*it);
  return c;
}

nlohmann::json GGUFQuantizationConfig::to_json() const {
  return {{"quant_method", "gguf"},
          {"type", std::string(gguf::find_type(type)->name())},
          {"compute_dtype", std::string(dtype_name(compute_dtype))}};
}

std::string GGUFQuantizationConfig::scheme() const { return "gguf_" + lower(gguf::find_type(type)->name()); }

// ---- weight -----------------------------------------------------------------------------------------

GGUFQuantizedWeight::GGUFQuantizedWeight(const gguf::TypeTraits& t, Tensor data, int64_t N, int64_t K,
                                         DType compute_dtype)
    : traits_(&t), data_(std::move(data)), N_(N), K_(K), row_bytes_(t.row_bytes(K)), compute_dtype_(compute_dtype) {}

bool GGUFQuantizedWeight::should_quantize(const Shape& shape, gguf::GGMLType type) {
  const gguf::TypeTraits* t = gguf::find_type(type);
  return t != nullptr && shape.size() == 2 && shape[0] > 0 && shape[1] > 0 && shape[1] % t->block_size() == 0;
}

std::shared_ptr<GGUFQuantizedWeight> GGUFQuantizedWeight::quantize(const Tensor& w, const GGUFQuantizationConfig& cfg,
                                                                   std::string_view name) {
  const gguf::TypeTraits* t = gguf::find_type(cfg.type);
  check(t != nullptr, kCtx, "ggml type ", uint32_t(cfg.type), " is not supported");
  check(w.dim() == 2, kCtx, name, " has shape ", shape_str(w.shape()), "; GGUF quantizes 2-D [out, in] weights");
  check(w.shape()[1] % t->block_size() == 0, kCtx, name, " has rows of ", w.shape()[1], " elements, not a multiple of the ",
        t->name(), " block size ", t->block_size());
  check(w.dtype() == DType::f32 || w.dtype() == DType::bf16 || w.dtype() == DType::f16, kCtx, name, " is ",
        dtype_name(w.dtype()), "; GGUF quantizes float32/bfloat16/float16 weights");
  const int64_t N = w.shape()[0], K = w.shape()[1];
  const Tensor wf = w.to(Device::cpu()).to(DType::f32).contiguous();
  const int64_t rb = t->row_bytes(K);
  Tensor data = Tensor::empty({N * rb}, DType::u8);
  const float* src = wf.data<float>();
  auto* dst = data.data<uint8_t>();
  t->quantize_rows(src, N, K, dst);
  return std::shared_ptr<GGUFQuantizedWeight>(new GGUFQuantizedWeight(*t, std::move(data), N, K, cfg.compute_dtype));
}

std::shared_ptr<GGUFQuantizedWeight> GGUFQuantizedWeight::load(std::string_view name, const Tensor& raw, uint32_t ggml_type,
                                                               const Shape& shape, DType compute_dtype) {
  const gguf::TypeTraits& t = gguf::type_or_throw(ggml_type, cat("tensor '", name, "'"));
  check(compute_dtype == DType::f32 || compute_dtype == DType::bf16 || compute_dtype == DType::f16, kCtx,
        "compute dtype of tensor '", name, "' must be float32, bfloat16 or float16");
  check(shape.size() == 2 && shape[0] >= 0 && shape[1] >= 0, kCtx, "tensor '", name, "' (", t.name(), ") has shape ",
        shape_str(shape), "; a quantized Linear weight is 2-D [out_features, in_features]");
  const int64_t N = shape[0], K = shape[1];
  check(K % t.block_size() == 0, kCtx, "tensor '", name, "' (", t.name(), ", shape ", shape_str(shape),
        ") has rows of ", K, " elements, not a multiple of the ", t.name(), " block size ", t.block_size());
  check(raw.defined() && raw.dtype() == DType::u8 && raw.dim() == 1, kCtx, "tensor '", name,
        "': raw GGUF data must be a 1-D uint8 tensor, got ", raw.defined() ? raw.str() : "nothing");
  check(raw.device().is_cpu(), kCtx, "tensor '", name, "': raw GGUF data must be on the CPU, got ", raw.device().str());
  const int64_t want = N * t.row_bytes(K);
  const int64_t have = raw.numel();
  if (have < want)
    fail(kCtx, "tensor '", name, "' (", t.name(), ", shape ", shape_str(shape), ") is truncated: ", have,
         " bytes of block data, ", want, " needed (", N * (K / t.block_size()), " blocks of ", t.type_size(), " bytes)");
  check(have == want, kCtx, "tensor '", name, "' (", t.name(), ", shape ", shape_str(shape), ") has ", have,
        " bytes of block data, but ", want, " are needed (", N * (K / t.block_size()), " blocks of ", t.type_size(),
        " bytes)");
  return std::shared_ptr<GGUFQuantizedWeight>(new GGUFQuantizedWeight(t, raw.contiguous(), N, K, compute_dtype));
}

std::shared_ptr<GGUFQuantizedWeight> GGUFQuantizedWeight::load(const io::GGUFFile& file, std::string_view name,
                                                               DType compute_dtype) {
  const io::GGUFTensorInfo& info = file.tensor_info(name);
  return load(name, file.raw_tensor(name), info.type, info.shape, compute_dtype);
}

std::shared_ptr<GGUFQuantizedWeight> GGUFQuantizedWeight::rows(int64_t n0, int64_t n1) const {
  check(0 <= n0 && n0 <= n1 && n1 <= N_, kCtx, "rows [", n0, ", ", n1, ") out of range for a weight of ", N_, " rows");
  Tensor part = data_.slice(0, n0 * row_bytes_, n1 * row_bytes_);
  return std::shared_ptr<GGUFQuantizedWeight>(new GGUFQuantizedWeight(*traits_, std::move(part), n1 - n0, K_, compute_dtype_));
}

io::GGUFWriteTensor GGUFQuantizedWeight::save(std::string name) const {
  return io::GGUFWriteTensor{std::move(name), uint32_t(traits_->type), {N_, K_}, data_};
}

std::string GGUFQuantizedWeight::scheme() const { return "gguf_" + lower(traits_->name()); }

void GGUFQuantizedWeight::dequant_rows(int64_t n0, int64_t n1, float* dst) const {
  if (n1 <= n0) return;
  const auto* p = static_cast<const uint8_t*>(data_.data_ptr());
  const int64_t n = (n1 - n0) * K_;
  traits_->dequantize_ref(p + n0 * row_bytes_, dst, n);  // rows are contiguous whole blocks
  if (compute_dtype_ != DType::f32)
    for (int64_t i = 0; i < n; ++i) dst[i] = round_through(compute_dtype_, dst[i]);
}

Tensor GGUFQuantizedWeight::dequantize(DType dtype) const {
  Tensor w = Tensor::empty({N_, K_}, DType::f32);
  const auto* p = static_cast<const uint8_t*>(data_.data_ptr());
  float* wp = w.data<float>();
  core::parallel_for(N_, 16, [&](int64_t a, int64_t b) {
    traits_->dequantize_ref(p + a * row_bytes_, wp + a * K_, (b - a) * K_);
  });
  return dtype == DType::f32 ? w : w.to(dtype);
}

std::optional<TileLinearPlan> GGUFQuantizedWeight::tile_linear_plan(const Tensor& x, const Tensor& bias) const {
  // Diffusers' GGUFLinear rounds the bias to compute_dtype as well.
  const Tensor b = bias.defined() && compute_dtype_ != DType::f32 ? bias.to(compute_dtype_) : bias;
  return TileLinearPlan{x, b, N_, K_, [this](int64_t n0, int64_t n1, float* dst) { dequant_rows(n0, n1, dst); }};
}

}  // namespace diffq::quant
