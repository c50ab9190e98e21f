#include "offload/param_group.h"

#include <cstring>
#include <set>

#include "diffq/error.h"
#include "offload/group_home.h"

namespace diffq::offload {

ParamGroup::ParamGroup(std::string id, std::vector<Module*> modules,
                       std::vector<std::pair<std::string, Parameter*>> params)
    : id_(std::move(id)), modules_(std::move(modules)), params_(std::move(params)) {
  std::set<const Storage*> seen;
  auto add = [&](const std::string& key, const Tensor& t) {
    if (!t.defined()) return;
    check(!t.is_symbolic(), "offload", "group '", id_, "': parameter '", key, "' is symbolic (tracing?)");
    const auto& st = t.storage();
    if (!seen.insert(st.get()).second || st->nbytes() == 0) return;
    packed_bytes_ = (packed_bytes_ + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    slots_.push_back({key, st, st->nbytes(), packed_bytes_});
    packed_bytes_ += st->nbytes();
  };
  for (auto& [name, p] : params_) {
    if (!p->defined()) continue;
    if (p->is_quantized()) {
      const auto ts = p->quantized().storage_tensors();
      for (size_t i = 0; i < ts.size(); ++i) add(name + "#" + std::to_string(i), ts[i]);
    } else {
      p->keep_dense();  // the group moves these bytes: never swapped for a packed copy behind its back
      add(name, p->dense());
    }
  }
}

ParamGroup::~ParamGroup() = default;

void ParamGroup::set_home(std::unique_ptr<GroupHome> h) { home_ = std::move(h); }

Hash128 ParamGroup::content_key(std::string_view fingerprint, const uint8_t* packed) const {
  ContentHasher h;
  h.update_field("diffq-offload-group-v1");
  h.update_field(fingerprint);
  for (const auto& [name, p] : params_) {
    if (!p->defined()) continue;
    h.update_field(name);
    h.update_field(shape_str(p->shape()));
    h.update_field(p->is_quantized() ? p->quantized().scheme() : std::string(dtype_name(p->dtype())));
  }
  for (const auto& s : slots_) {
    h.update_field(s.key);
    const uint64_t n = s.nbytes;
    h.update(&n, sizeof n);
  }
  for (const auto& s : slots_) {
    const void* bytes = packed ? packed + s.offset : s.storage->data();
    check(bytes != nullptr, "offload", "group '", id_, "': '", s.key, "' has no bytes");
    h.update(bytes, s.nbytes);
  }
  return h.digest();
}

void ParamGroup::pack_into(void* dst) const {
  auto* d = static_cast<uint8_t*>(dst);
  size_t pos = 0;
  for (const auto& s : slots_) {
    std::memset(d + pos, 0, s.offset - pos);
    std::memcpy(d + s.offset, s.storage->data(), s.nbytes);
    pos = s.offset + s.nbytes;
  }
}

void ParamGroup::attach(const std::shared_ptr<PoolBuffer>& buf) {
  check(buf && buf->capacity >= packed_bytes_, "offload", "group '", id_, "': onload buffer of ",
        buf ? buf->capacity : 0, " bytes is smaller than the group's ", packed_bytes_);
  auto* base = static_cast<uint8_t*>(buf->data);
  for (auto& s : slots_) {
    auto view = Storage::borrow(base + s.offset, s.nbytes, buf->device, buf);
    s.storage->take_bytes_from(*view);
  }
}

void ParamGroup::set_residency(Residency r) {
  for (auto& [name, p] : params_)
    if (p->defined()) p->set_residency(r);
}

}  // namespace diffq::offload
