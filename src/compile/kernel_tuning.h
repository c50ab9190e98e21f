// A node's kernel tuning (max-autotune's choice), opaque to compile: the compile backend of the graph's
// device makes it (its candidates, or an autotune cache entry read back) and installs it around the
// node's kernel (compile_backend.h). Copies share the device's value; two tunings are equal when their
// values are. Empty: the device's defaults (a backend never wraps its defaults).
#pragma once

#include <memory>

namespace diffq::compile {

class KernelTuning {
 public:
  KernelTuning() = default;
  // A device's own tuning value (a type with operator==).
  template <class T>
  static KernelTuning of(const T& value) {
    KernelTuning t;
    t.value_ = std::make_shared<const Holder<T>>(value);
    return t;
  }
  bool is_default() const { return value_ == nullptr; }
  // The device's value; nullptr when empty or of another type.
  template <class T>
  const T* as() const {
    const auto* h = dynamic_cast<const Holder<T>*>(value_.get());
    return h ? &h->value : nullptr;
  }
  bool operator==(const KernelTuning& o) const {
    return value_ == o.value_ || (value_ && o.value_ && value_->equals(*o.value_));
  }

 private:
  struct Value {
    virtual ~Value() = default;
    virtual bool equals(const Value& o) const = 0;
  };
  template <class T>
  struct Holder final : Value {
    explicit Holder(const T& v) : value(v) {}
    bool equals(const Value& o) const override {
      const auto* h = dynamic_cast<const Holder*>(&o);
      return h && h->value == value;
    }
    T value;
  };
  std::shared_ptr<const Value> value_;
};

}  // namespace diffq::compile
