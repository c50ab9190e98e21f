// A module parameter: its expected shape, and its value — a dense Tensor or a QuantizedWeight.
// Where the bytes live (residency) is separate from the module tree: moving a parameter swaps the
// bytes inside its Storage objects, so modules, hooks and traced graphs keep pointing at it.
#pragma once

#include <memory>
#include <string>

#include "diffq/tensor.h"
#include "quant/quantized_weight.h"

namespace diffq {

enum class Residency : uint8_t {
  unloaded,  // no value yet
  mmap,      // borrowed from a memory-mapped checkpoint (zero copy)
  host,      // host memory owned by diffq
  pinned,    // page-locked host memory (fast async copies)
  device,    // accelerator memory
  disk       // offloaded to a file, reloaded on demand
};
std::string_view residency_name(Residency r);

class Parameter {
 public:
  Parameter() = default;
  explicit Parameter(Shape shape) : shape_(std::move(shape)) {}

  const Shape& shape() const { return shape_; }
  bool defined() const { return dense_.defined() || quantized_ != nullptr; }
  bool is_quantized() const { return quantized_ != nullptr; }

  // The dense value (throws naming the parameter when it is quantized or unloaded).
  const Tensor& dense() const;
  const QuantizedWeight& quantized() const;
  std::shared_ptr<const QuantizedWeight> quantized_ptr() const { return quantized_; }

  void set(Tensor value, Residency r);
  void set(std::shared_ptr<QuantizedWeight> q, Residency r);
  Residency residency() const { return residency_; }
  void set_residency(Residency r) { residency_ = r; }
  DType dtype() const;   // dense dtype (quantized: the dtype of its first packed tensor)
  size_t nbytes() const;

  // Moves the bytes to `d` (a copy is made there, then swapped into the same Storage objects).
  void move_to(Device d);

  std::string name;  // dotted name in the tree (set when registered; used in errors)

 private:
  Shape shape_;
  Tensor dense_;
  std::shared_ptr<QuantizedWeight> quantized_;
  Residency residency_ = Residency::unloaded;
};

}  // namespace diffq
