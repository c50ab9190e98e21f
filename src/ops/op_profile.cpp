#include "ops/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "diffq/runtime.h"
#include "ops/packed_weight.h"

namespace diffq::ops {

namespace {

struct Entry {
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;
};

struct Key {
  OpKind kind;
  DType dtype;
  std::string shapes;
  auto operator<=>(const Key&) const = default;
};

class Profile {
 public:
  ~Profile() {
    if (entries_.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows;
    double total = 0;
    for (const auto& [key, e] : entries_) {
      std::string name = std::string(op_name(key.kind)) + " " + std::string(dtype_name(key.dtype));
      if (!key.shapes.empty()) name += " " + key.shapes;
      rows.emplace_back(std::move(name), e);
      total += e.seconds;
    }
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::fprintf(stderr, "\nop profile (DIFFQ_PROFILE_OPS): %.1f ms in ops\n", total * 1e3);
    std::fprintf(stderr, "%-28s %10s %12s %7s %9s\n", "op dtype", "calls", "total ms", "share", "GFLOP/s");
    for (const auto& [name, e] : rows) {
      std::fprintf(stderr, "%-28s %10lld %12.1f %6.1f%%", name.c_str(), static_cast<long long>(e.calls),
                   e.seconds * 1e3, total > 0 ? 100.0 * e.seconds / total : 0.0);
      if (e.flops > 0 && e.seconds > 0) std::fprintf(stderr, " %9.1f", e.flops / e.seconds * 1e-9);
      std::fprintf(stderr, "\n");
    }
  }
  void add(Key key, double flops, double s) {
    std::lock_guard<std::mutex> l(m_);
    Entry& e = entries_[std::move(key)];
    ++e.calls;
    e.seconds += s;
    e.flops += flops;
  }

  void clear() {
    std::lock_guard<std::mutex> l(m_);
    entries_.clear();
  }
  int64_t calls() {
    std::lock_guard<std::mutex> l(m_);
    int64_t n = 0;
    for (const auto& [key, e] : entries_) n += e.calls;
    return n;
  }

 private:
  std::mutex m_;
  std::map<Key, Entry> entries_;
};

Profile& profile() {
  static Profile p;
  return p;
}

}  // namespace

bool op_profile_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("DIFFQ_PROFILE_OPS");
    return e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
  }();
  return on;
}

bool op_profile_shapes() {
  static const bool on = [] {
    const char* e = std::getenv("DIFFQ_PROFILE_OPS");
    return e != nullptr && std::strcmp(e, "shapes") == 0;
  }();
  return on;
}

void op_profile_record(OpKind kind, DType dtype, const std::string& shapes, double flops, double seconds) {
  profile().add({kind, dtype, shapes}, flops, seconds);
}

void op_profile_reset() { profile().clear(); }

int64_t op_profile_calls() { return profile().calls(); }

std::string op_profile_shapes_of(const OpCall& call) {
  std::string s;
  for (const Tensor& t : call.inputs) {
    if (!s.empty()) s += " ";
    s += t.defined() ? shape_str(t.shape()) : "-";
  }
  return s;
}

double op_profile_flops(const OpCall& call) {
  if (call.kind == OpKind::linear && call.inputs.size() >= 2) {
    const Tensor& w = call.inputs[1];
    if (w.dim() != 2) return 0;  // packed quantized weights: not counted
    const double rows = double(call.inputs[0].numel()) / double(w.shape()[1]);
    return 2.0 * rows * double(w.shape()[0]) * double(w.shape()[1]);
  }
  if (call.kind == OpKind::linear_q && call.attrs.packed) {
    const Shape w = call.attrs.packed->shape();
    if (w.size() != 2 || w[1] == 0) return 0;
    return 2.0 * double(call.inputs[0].numel()) / double(w[1]) * double(w[0]) * double(w[1]);
  }
  if (call.kind == OpKind::sdpa && call.inputs.size() >= 3) {
    const Shape& q = call.inputs[0].shape();
    const Shape& v = call.inputs[2].shape();
    if (q.size() != 4 || v.size() != 4) return 0;
    const double bhs = double(q[0]) * double(q[1]) * double(q[2]) * double(v[2]);
    return 2.0 * bhs * double(q[3]) + 2.0 * bhs * double(v[3]);
  }
  return 0;
}

}  // namespace diffq::ops

void diffq::reset_op_profile() { ops::op_profile_reset(); }
