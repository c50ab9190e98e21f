#include "diffq/tensor.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "ops/ops.h"

namespace diffq {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* ctx) {
  const int64_t r = std::max<int64_t>(rank, 1);
  check(dim >= -r && dim < r, ctx, "dim ", dim, " out of range for a tensor of rank ", rank);
  return dim < 0 ? dim + r : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* ctx) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (!(da == db || da == 1 || db == 1)) fail(ctx, "shapes ", shape_str(a), " and ", shape_str(b),
          " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Storage

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device d) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = allocator_for(d).allocate(nbytes);
  s->nbytes_ = nbytes;
  s->device_ = d;
  s->allocated_ = true;
  return s;
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes, Device d,
                                         std::shared_ptr<const void> owner) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = d;
  s->owner_ = std::move(owner);
  return s;
}

std::shared_ptr<Storage> Storage::symbolic(int64_t id, size_t nbytes, Device d) {
  std::shared_ptr<Storage> s(new Storage());
  s->symbolic_id_ = id;
  s->nbytes_ = nbytes;
  s->device_ = d;
  return s;
}

void Storage::release() {
  if (allocated_ && data_) allocator_for(device_).deallocate(data_, nbytes_);
  data_ = nullptr;
  allocated_ = false;
  owner_.reset();
}

Storage::~Storage() { release(); }

void Storage::take_bytes_from(Storage& other) {
  check(other.nbytes_ == nbytes_ && !other.is_symbolic() && !is_symbolic(), "storage",
        "take_bytes_from: sizes differ (", other.nbytes_, " vs ", nbytes_, ") or storage is symbolic");
  if (&other == this) return;
  release();
  data_ = other.data_;
  device_ = other.device_;
  owner_ = std::move(other.owner_);
  allocated_ = other.allocated_;
  other.data_ = nullptr;
  other.allocated_ = false;
}

// ---------------------------------------------------------------------------------------------------
// Tensor

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
               DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {
  if (!(shape_.size() == strides_.size())) fail("tensor", "shape ", shape_str(shape_), " and strides ",
        shape_str(strides_), " differ in rank");
  for (int64_t d : shape_)
    if (d < 0) fail("tensor", "negative dimension in shape ", shape_str(shape_));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device d) {
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(Storage::allocate(bytes, d), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device d) { return full(shape, 0.0, dtype, d); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device d) {
  if (!d.is_cpu()) {
    // One element goes up; the device's copy kernel broadcasts it (a pipeline on a GPU asks for zeros
    // of activation size every step: the Wan VAE's causal padding), instead of uploading a host fill.
    const Tensor one = full({}, value, dtype, Device::cpu()).to(d);
    if (shape.empty()) return one;
    return one.view(Shape(shape.size(), 1)).expand(shape).contiguous();
  }
  Tensor t = empty(shape, dtype, Device::cpu());
  const int64_t n = t.numel();
  if (n > 0) {
    store_from_double(t.data_ptr(), dtype, 0, value);
    const size_t es = dtype_size(dtype);
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    for (int64_t i = 1; i < n; ++i) std::copy(p, p + es, p + i * es);
  }
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DType dtype) {
  if (!(int64_t(values.size()) == shape_numel(shape))) fail("tensor", "from_vector: ", values.size(),
        " values for shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) store_from_double(t.data_ptr(), dtype, i, values[i]);
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) store_from_double(t.data_ptr(), dtype, i, double(i));
  return t;
}

int64_t Tensor::size(int64_t d) const { return shape_[wrap_dim(d, dim(), "tensor")]; }

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return cat("Tensor", shape_str(shape_), " ", dtype_name(dtype_), " ", device().str(),
             is_symbolic() ? " (symbolic)" : "");
}

void* Tensor::data_ptr() const {
  check(defined(), "tensor", "data_ptr() of an undefined tensor");
  if (is_symbolic()) fail("tensor", "data_ptr() of a symbolic (traced) tensor ", str());
  return static_cast<uint8_t*>(storage_->data()) + offset_ * int64_t(dtype_size(dtype_));
}

void* Tensor::host_data_ptr() const {
  check(!defined() || device().is_cpu(), "tensor", "host access to ", str(),
        ": its bytes live on the device; copy it with .to(cpu) first");
  return data_ptr();
}

// ---- views ----------------------------------------------------------------------------------------

namespace {
Shape infer_minus_one(const Shape& shape, int64_t numel, const char* ctx) {
  Shape out = shape;
  int64_t known = 1, neg = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (!(neg < 0)) fail(ctx, "only one dimension can be -1 in ", shape_str(shape));
      neg = int64_t(i);
    } else {
      if (!(out[i] >= 0)) fail(ctx, "invalid dimension in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (neg >= 0) {
    if (!(known != 0 && numel % known == 0)) fail(ctx, "cannot infer -1 in ", shape_str(shape), " for ",
          numel, " elements");
    out[neg] = numel / known;
  }
  if (!(shape_numel(out) == numel)) fail(ctx, "shape ", shape_str(shape), " is invalid for ", numel,
        " elements");
  return out;
}

// Strides for viewing (shape, strides) as new_shape without copying, as torch's computeStride does;
// returns false when impossible.
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out.assign(new_shape.size(), 0);
  if (shape_numel(shape) == 0 || shape.empty()) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  const Shape ns = infer_minus_one(shape, numel(), "view");
  Shape st;
  if (!(view_strides(shape_, strides_, ns, st))) fail("view", "cannot view ", str(), " as ", shape_str(ns),
        " without a copy (use reshape)");
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape ns = infer_minus_one(shape, numel(), "reshape");
  Shape st;
  if (view_strides(shape_, strides_, ns, st)) return Tensor(storage_, ns, st, offset_, dtype_);
  return contiguous().view(ns);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  Shape ns(shape_.begin(), shape_.begin() + start);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= shape_[i];
  ns.push_back(m);
  ns.insert(ns.end(), shape_.begin() + end + 1, shape_.end());
  return reshape(ns);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  if (!(int64_t(dims.size()) == dim())) fail("permute", "got ", dims.size(), " dims for ", str());
  Shape ns(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    check(!seen[d], "permute", "dim ", d, " repeated");
    seen[d] = true;
    ns[i] = shape_[d];
    st[i] = strides_[d];
  }
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  std::vector<int64_t> p(dim());
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[wrap_dim(a, dim(), "transpose")], p[wrap_dim(b, dim(), "transpose")]);
  return permute(p);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  check(step > 0, "slice", "step must be positive, got ", step);
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape ns = shape_, st = strides_;
  ns[d] = (end - start + step - 1) / step;
  st[d] = strides_[d] * step;
  return Tensor(storage_, ns, st, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  if (index < 0) index += shape_[d];
  if (!(index >= 0 && index < shape_[d])) fail("select", "index ", index, " out of range for dim ", d,
        " of ", str());
  Shape ns = shape_, st = strides_;
  ns.erase(ns.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, ns, st, offset_ + index * strides_[d], dtype_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape ns = shape_, st = strides_;
  const int64_t s = d < dim() ? strides_[d] * shape_[d] : 1;
  ns.insert(ns.begin() + d, 1);
  st.insert(st.begin() + d, s);
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (shape_[d] != 1) return *this;
  Shape ns = shape_, st = strides_;
  ns.erase(ns.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, ns, st, offset_, dtype_);
}

Tensor Tensor::expand(const Shape& shape) const {
  if (!(shape.size() >= shape_.size())) fail("expand", "cannot expand ", str(), " to ", shape_str(shape));
  const size_t lead = shape.size() - shape_.size();
  Shape st(shape.size(), 0), ns = shape;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) continue;
    const int64_t cur = shape_[i - lead];
    if (ns[i] == -1) ns[i] = cur;
    if (cur == ns[i]) {
      st[i] = strides_[i - lead];
    } else {
      if (!(cur == 1)) fail("expand", "cannot expand ", str(), " to ", shape_str(shape));
      st[i] = 0;
    }
  }
  return Tensor(storage_, ns, st, offset_, dtype_);
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  d = wrap_dim(d, dim(), "chunk");
  check(chunks > 0, "chunk", "chunks must be positive");
  const int64_t each = (shape_[d] + chunks - 1) / chunks;
  std::vector<Tensor> out;
  for (int64_t s = 0; s < shape_[d]; s += each) out.push_back(slice(d, s, std::min(s + each, shape_[d])));
  return out;
}

std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t d) const {
  d = wrap_dim(d, dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (!(total == shape_[d])) fail("split", "sizes sum to ", total, " but dim ", d, " of ", str(), " has ",
        shape_[d]);
  std::vector<Tensor> out;
  int64_t s = 0;
  for (int64_t n : sizes) {
    out.push_back(slice(d, s, s + n));
    s += n;
  }
  return out;
}

// ---- copying ----------------------------------------------------------------------------------------

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : ops::copy(*this); }
Tensor Tensor::clone() const { return ops::copy(*this); }
Tensor Tensor::to(DType dtype) const { return dtype == dtype_ ? *this : ops::cast(*this, dtype); }
Tensor Tensor::to(Device device) const {
  return device == this->device() ? *this : ops::to_device(*this, device);
}

std::vector<double> Tensor::to_f64_vector() const {
  if (is_symbolic()) fail("tensor", "cannot read values of symbolic ", str());
  Tensor t = device().is_cpu() ? *this : to(Device::cpu());
  std::vector<double> out(size_t(t.numel()));
  const void* base = t.storage_->data();
  const int64_t n = t.numel();
  std::vector<int64_t> idx(t.dim(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = t.offset_;
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.strides_[d];
    out[i] = load_as_double(base, t.dtype_, off);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.shape_[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<float> Tensor::to_f32_vector() const {
  const auto d = to_f64_vector();
  return std::vector<float>(d.begin(), d.end());
}

double Tensor::item() const {
  if (!(numel() == 1)) fail("tensor", "item() needs exactly one element, ", str(), " has ", numel());
  return to_f64_vector()[0];
}

}  // namespace diffq
