#include "modules/parameter.h"

#include <mutex>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "io/mapped_file.h"
#include "ops/weight_packing.h"

namespace diffq {

std::string_view residency_name(Residency r) {
  switch (r) {
    case Residency::unloaded: return "unloaded";
    case Residency::mmap: return "mmap";
    case Residency::host: return "host";
    case Residency::pinned: return "pinned";
    case Residency::device: return "device";
    case Residency::disk: return "disk";
  }
  return "?";
}

namespace {
std::mutex& pack_mutex() {  // packing and unpacking (rare) against each other across threads
  static std::mutex mu;
  return mu;
}
}  // namespace

const Tensor& Parameter::dense() const {
  if (packed_) keep_dense();
  check(dense_.defined(), "parameter", "'", name, "' ",
        is_quantized() ? "is quantized (" + quantized_->scheme() + "), not dense" : "is not loaded");
  return dense_;
}

const ops::PackedWeight& Parameter::packed() const {
  check(packed_ != nullptr, "parameter", "'", name, "' is not packed");
  return *packed_;
}

void Parameter::keep_dense() const {
  std::lock_guard<std::mutex> lock(pack_mutex());
  stay_dense_ = true;
  if (!packed_) return;
  dense_ = packed_->dequantize(packed_dtype_);
  packed_.reset();
}

bool Parameter::pack_for_linear(const Tensor& x) {
  if (packed_) return true;
  if (x.is_symbolic()) return false;  // traced graphs keep dense linears (compile's capture decides itself)
  return pack_for_linear(x.dtype(), x.device());
}

bool Parameter::pack_for_linear(DType x_dtype, Device x_device) {
  if (packed_) return true;
  if (stay_dense_ || !dense_.defined()) return false;
  std::lock_guard<std::mutex> lock(pack_mutex());
  if (packed_ || stay_dense_) return packed_ != nullptr;
  std::shared_ptr<ops::PackedWeight> p = ops::pack_linear_weight(dense_, x_dtype, x_device);
  if (!p) {
    stay_dense_ = true;  // the device packs none like it: not asked again
    return false;
  }
  packed_dtype_ = dense_.dtype();
  packed_ = std::move(p);
  // One copy: the packed one (readers unpack through dense()). Pages borrowed from a mapped checkpoint
  // are handed back to the OS (read again from the file if anything else views them).
  if (residency_ == Residency::mmap) {
    if (dense_.is_contiguous()) io::release_pages(dense_.data_ptr(), dense_.nbytes());
    residency_ = Residency::host;
  }
  // The host heap keeps freed blocks mapped (core/memory.cpp): hand the dense weights' bytes back every
  // ~64 MB, or the first forward's packing would leave both forms in the RSS.
  static size_t freed_since_trim = 0;
  freed_since_trim += dense_.nbytes();
  dense_ = Tensor();
  if (freed_since_trim >= (size_t(64) << 20)) {
    return_freed_memory_to_os();
    freed_since_trim = 0;
  }
  return true;
}

const QuantizedWeight& Parameter::quantized() const {
  check(quantized_ != nullptr, "parameter", "'", name, "' is not quantized");
  return *quantized_;
}

void Parameter::set(Tensor value, Residency r) {
  check(value.shape() == shape_, "parameter", "'", name, "' expects shape ", shape_str(shape_), " but got ",
        shape_str(value.shape()));
  dense_ = std::move(value);
  quantized_.reset();
  packed_.reset();
  stay_dense_ = false;
  residency_ = r;
}

void Parameter::set(std::shared_ptr<QuantizedWeight> q, Residency r) {
  check(q != nullptr, "parameter", "'", name, "': null quantized weight");
  check(q->shape() == shape_, "parameter", "'", name, "' expects shape ", shape_str(shape_),
        " but the quantized weight is ", shape_str(q->shape()));
  quantized_ = std::move(q);
  dense_ = Tensor();
  packed_.reset();
  stay_dense_ = false;
  residency_ = r;
}

DType Parameter::dtype() const {
  if (dense_.defined()) return dense_.dtype();
  if (packed_) return packed_dtype_;
  check(quantized_ != nullptr, "parameter", "'", name, "' is not loaded");
  return quantized_->storage_tensors().at(0).dtype();
}

size_t Parameter::nbytes() const {
  if (dense_.defined()) return dense_.nbytes();
  if (packed_) {
    size_t n = 0;
    for (const Tensor& t : packed_->storage_tensors()) n += t.nbytes();
    return n;
  }
  return quantized_ ? quantized_->nbytes() : 0;
}

namespace {
void move_tensor(const Tensor& t, Device d) {
  if (!t.defined() || t.device() == d) return;
  // Copy the whole storage (a tensor may view part of it) so every view of it stays valid.
  const auto& st = t.storage();
  Tensor whole(st, {int64_t(st->nbytes())}, {1}, 0, DType::u8);
  Tensor moved = whole.to(d);
  st->take_bytes_from(*moved.storage());
}
}  // namespace

void Parameter::move_to(Device d) {
  if (packed_) keep_dense();  // a packed layout is its device's GEMM's: moves carry the dense weight
  if (dense_.defined()) move_tensor(dense_, d);
  if (quantized_)
    for (const Tensor& t : quantized_->storage_tensors()) move_tensor(t, d);
  if (defined()) residency_ = d.is_cpu() ? Residency::host : Residency::device;
}

}  // namespace diffq
