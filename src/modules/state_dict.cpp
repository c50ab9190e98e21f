#include "diffq/memory.h"
#include "modules/state_dict.h"

#include <map>
#include <set>

#include "diffq/error.h"
#include "io/mapped_file.h"

namespace diffq {

bool module_name_matches(const std::string& name, const std::vector<std::string>& modules) {
  for (const std::string& m : modules) {
    if (m.empty()) continue;
    if (name == m || name.rfind(m + ".", 0) == 0 || name.find("." + m + ".") != std::string::npos)
      return true;
  }
  return false;
}

namespace {
std::string list(const std::vector<std::string>& v) {
  std::string s;
  const size_t shown = std::min<size_t>(v.size(), 20);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > shown) s += cat(", ... and ", v.size() - shown, " more");
  return s;
}

// A Storage of its own for `t`'s bytes, sharing (and keeping alive) the source storage.
Tensor own_storage_view(const Tensor& t) {
  if (t.offset() == 0 && t.storage()->nbytes() == t.nbytes() && t.is_contiguous()) return t;
  const Tensor c = t.contiguous();
  if (c.storage() != t.storage()) return c;
  auto st = Storage::borrow(c.data_ptr(), c.nbytes(), c.device(), c.storage());
  return Tensor(st, c.shape(), contiguous_strides(c.shape()), 0, c.dtype());
}
}  // namespace

LoadReport load_state_dict(Module& m, const StateDict& sd, const LoadOptions& opt) {
  LoadReport rep;
  std::set<std::string> used;
  const std::string where = opt.source.empty() ? std::string("state dict") : opt.source;
  // Each parameter's module (for the quantization hooks).
  std::map<const Parameter*, std::pair<std::string, const Module*>> owner_of;
  if (opt.quantize || opt.load_quantized)
    for (const auto& [mname, mod] : m.named_modules())
      for (const auto& [pname, par] : mod->own_parameters()) owner_of[par] = {mname, mod};
  int64_t transient_bytes = 0;  // f32 bytes of the weights quantized since the heap was last trimmed
  for (auto& [name, p] : m.named_parameters()) {
    std::string local = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
    const auto own = owner_of.find(p);
    const std::string mod_name = own == owner_of.end() ? std::string() : own->second.first;
    if (opt.load_quantized && own != owner_of.end()) {
      std::vector<std::string> consumed;
      if (auto q = opt.load_quantized(ParamRef{*own->second.second, mod_name, local, name, p->shape()}, sd, consumed)) {
        check(q->shape() == p->shape(), "load", where, ": pre-quantized '", name, "' has shape ", shape_str(q->shape()),
              " but the model expects ", shape_str(p->shape()));
        p->set(std::move(q), Residency::host);
        used.insert(consumed.begin(), consumed.end());
        ++rep.quantized;
        continue;
      }
    }
    auto it = sd.find(name);
    if (it == sd.end()) {
      rep.missing.push_back(name);
      continue;
    }
    used.insert(name);
    const Tensor& src = it->second;
    check(src.shape() == p->shape(), "load", where, ": '", name, "' has shape ", shape_str(src.shape()),
          " but the model expects ", shape_str(p->shape()));
    DType target = src.dtype();
    if (is_floating(src.dtype())) {
      if (module_name_matches(name, opt.keep_in_fp32)) target = DType::f32;
      else if (opt.dtype) target = *opt.dtype;
    }
    const bool borrowed = !src.storage()->owns_allocation();
    if (opt.quantize && !module_name_matches(name, opt.keep_in_fp32)) {
      const Tensor value = target == src.dtype() ? src : src.to(target);
      if (auto q = own == owner_of.end()
                       ? nullptr
                       : opt.quantize(ParamRef{*own->second.second, mod_name, local, name, p->shape()}, value)) {
        p->set(std::move(q), Residency::host);
        if (borrowed && src.is_contiguous()) io::release_pages(src.data_ptr(), src.nbytes());
        ++rep.quantized;
        // The quantizers' transient full-precision buffers are freed, but glibc keeps them mapped
        // (measured: flux-medium to nf4 peaked at 1.8x the quantized size + largest weight without
        // this); handing them back every ~64 MB keeps the peak near that bound.
        transient_bytes += value.numel() * 4;
        if (transient_bytes >= (int64_t(64) << 20)) {
          return_freed_memory_to_os();
          transient_bytes = 0;
        }
        continue;
      }
    }
    if (target == src.dtype()) {
      p->set(own_storage_view(src), borrowed ? Residency::mmap : Residency::host);
      ++(borrowed ? rep.zero_copy : rep.converted);
    } else {
      p->set(src.to(target), Residency::host);
      ++rep.converted;
    }
  }
  for (const auto& [k, v] : sd)
    if (!used.count(k)) rep.unexpected.push_back(k);
  if (opt.strict && (!rep.missing.empty() || !rep.unexpected.empty())) {
    std::string msg = cat(where, " does not match the ", m.type_name(), " model:");
    if (!rep.missing.empty()) msg += cat(" missing keys (", rep.missing.size(), "): ", list(rep.missing), ".");
    if (!rep.unexpected.empty())
      msg += cat(" unexpected keys (", rep.unexpected.size(), "): ", list(rep.unexpected), ".");
    fail("load", msg);
  }
  return rep;
}

}  // namespace diffq
