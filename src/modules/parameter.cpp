#include "modules/parameter.h"

#include "diffq/error.h"

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

const Tensor& Parameter::dense() const {
  check(dense_.defined(), "parameter", "'", name, "' ",
        is_quantized() ? "is quantized (" + quantized_->scheme() + "), not dense" : "is not loaded");
  return dense_;
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
  residency_ = r;
}

void Parameter::set(std::shared_ptr<QuantizedWeight> q, Residency r) {
  check(q != nullptr, "parameter", "'", name, "': null quantized weight");
  check(q->shape() == shape_, "parameter", "'", name, "' expects shape ", shape_str(shape_),
        " but the quantized weight is ", shape_str(q->shape()));
  quantized_ = std::move(q);
  dense_ = Tensor();
  residency_ = r;
}

DType Parameter::dtype() const {
  if (dense_.defined()) return dense_.dtype();
  check(quantized_ != nullptr, "parameter", "'", name, "' is not loaded");
  return quantized_->storage_tensors().at(0).dtype();
}

size_t Parameter::nbytes() const {
  if (dense_.defined()) return dense_.nbytes();
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
  if (dense_.defined()) move_tensor(dense_, d);
  if (quantized_)
    for (const Tensor& t : quantized_->storage_tensors()) move_tensor(t, d);
  if (defined()) residency_ = d.is_cpu() ? Residency::host : Residency::device;
}

}  // namespace diffq
