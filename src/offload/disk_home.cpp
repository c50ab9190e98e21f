#include "offload/disk_home.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "diffq/error.h"
#include "io/mapped_file.h"
#include "offload/param_group.h"

namespace diffq::offload {

namespace {
constexpr const char* kCtx = "offload";
constexpr const char* kFormat = "diffq-offload-group-v1";
}  // namespace

DiskHome::DiskHome(std::filesystem::path dir, std::string fingerprint, std::shared_ptr<DiskFileCounters> counters,
                   bool drop_page_cache, std::shared_ptr<DeviceStaging> staging)
    : dir_(std::move(dir)),
      fingerprint_(std::move(fingerprint)),
      counters_(std::move(counters)),
      drop_page_cache_(drop_page_cache),
      staging_(std::move(staging)) {}

void DiskHome::drop_cached_pages() const {
  // Advice only: pages still mapped or dirty stay; the group's clean pages leave the page cache.
  if (drop_page_cache_ && fd_ >= 0) (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
}

DiskHome::~DiskHome() {
  if (fd_ >= 0) ::close(fd_);
}

std::filesystem::path DiskHome::file_for(const std::filesystem::path& dir, const Hash128& key) {
  return dir / ("group_" + key.hex() + ".safetensors");
}

std::string DiskHome::slot_tensor_name(size_t index, const std::string& key) {
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "%08zu.1.", index);
  return prefix + key;
}

std::string DiskHome::stale_reason(const std::filesystem::path& path, const ParamGroup& g, const Hash128& key,
                                   std::string_view fingerprint) {
  try {
    const auto f = io::SafetensorsFile::open(path);
    const auto& md = f.metadata();
    auto it = md.find("key");
    if (md.count("format") == 0 || md.at("format") != kFormat) return "it is not a diffq offload file";
    if (it == md.end() || it->second != key.hex())
      return cat("its metadata key is ", it == md.end() ? std::string("missing") : it->second);
    if (f.header().data_bytes != g.packed_bytes())
      return cat("its data section has ", f.header().data_bytes, " bytes, the group ", g.packed_bytes());
    for (size_t i = 0; i < g.slots().size(); ++i) {
      const auto& s = g.slots()[i];
      const std::string n = slot_tensor_name(i, s.key);
      if (!f.contains(n)) return cat("it has no tensor '", n, "'");
      const auto& e = f.entry(n);
      if (e.begin != s.offset || e.nbytes() != s.nbytes)
        return cat("tensor '", n, "' is at [", e.begin, ", ", e.end, "), expected [", s.offset, ", ",
                   s.offset + s.nbytes, ")");
    }
    const auto mf = io::MappedFile::open(path, kCtx);
    const Hash128 got = g.content_key(fingerprint, mf->data() + f.header().data_offset());
    if (!(got == key)) return cat("its bytes hash to ", got.hex(), ", not to its key ", key.hex());
    return "";
  } catch (const Error& e) {
    return cat("it cannot be read: ", e.what());
  }
}

void DiskHome::write(const ParamGroup& g) const {
  io::NamedTensors tensors;
  size_t pos = 0;
  for (size_t i = 0; i < g.slots().size(); ++i) {
    const auto& s = g.slots()[i];
    if (s.offset > pos) {
      char pad[32];
      std::snprintf(pad, sizeof pad, "%08zu.0.pad", i);
      tensors.emplace_back(pad, Tensor::zeros({int64_t(s.offset - pos)}, DType::u8));
    }
    check(s.storage->data() != nullptr && s.storage->device().is_cpu(), kCtx, "group '", g.id(), "': '", s.key,
          "' is not in host memory; cannot write ", file_.string());
    tensors.emplace_back(slot_tensor_name(i, s.key), Tensor(s.storage, {int64_t(s.nbytes)}, {1}, 0, DType::u8));
    pos = s.offset + s.nbytes;
  }
  io::Metadata md{{"format", kFormat}, {"group", g.id()}, {"key", key_.hex()}};
  io::save_safetensors(file_, tensors, md);  // atomic: temp + fsync + rename
}

void DiskHome::adopt(ParamGroup& g) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  check(!ec, kCtx, "cannot create the offload directory ", dir_.string(), ": ", ec.message());
  key_ = g.content_key(fingerprint_);
  file_ = file_for(dir_, key_);
  if (std::filesystem::exists(file_)) {
    const std::string why = stale_reason(file_, g, key_, fingerprint_);
    if (why.empty()) {
      ++counters_->reused;
    } else {
      std::fprintf(stderr, "[offload] warning: %s is stale for group '%s' (%s); rewriting it\n",
                   file_.string().c_str(), g.id().c_str(), why.c_str());
      ++counters_->stale_replaced;
      write(g);
    }
  } else {
    write(g);
    ++counters_->written;
  }
  mapped_ = std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(file_));
  fd_ = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd_ >= 0, kCtx, "cannot open ", file_.string(), ": ", std::strerror(errno));
  release(g);
  drop_cached_pages();  // the write or the staleness check read it all
}

// Bytes [offset, offset + len) of the group's data section into dst.
void DiskHome::read_into(const ParamGroup& g, uint8_t* dst, size_t offset, size_t len) const {
  const off_t base = off_t(mapped_->header().data_offset());
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd_, dst + done, len - done, base + off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    check(n > 0, kCtx, "group '", g.id(), "': reading ", file_.string(), " at byte ", size_t(base) + offset + done,
          ": ", n == 0 ? std::string("unexpected end of file") : std::string(std::strerror(errno)));
    done += size_t(n);
  }
}

std::shared_ptr<PoolBuffer> DiskHome::fetch(const ParamGroup& g, BufferPool& pool) {
  auto buf = pool.acquire(g.packed_bytes());
  check(buf->device.is_cpu() == (staging_ == nullptr), kCtx, "group '", g.id(), "': disk onload to ",
        buf->device.str(), staging_ ? " from a home made for an accelerator" : " needs a staging buffer");
  if (staging_) {
    // A fresh buffer has no fence, but its memory may have been another buffer's that queued kernels still
    // read: the first chunk waits for everything queued on the compute stream so far (DeviceHostHome).
    const std::shared_ptr<void> wait = buf->fence ? buf->fence : staging_->fence();
    staging_->upload(buf->data, g.packed_bytes(),
                     [&](void* dst, size_t off, size_t len) { read_into(g, static_cast<uint8_t*>(dst), off, len); },
                     wait);
    std::lock_guard<std::mutex> lock(mu_);
    onloaded_ = buf;
  } else {
    read_into(g, static_cast<uint8_t*>(buf->data), 0, g.packed_bytes());
  }
  counters_->bytes_read += int64_t(g.packed_bytes());
  ++counters_->reads;
  drop_cached_pages();
  return buf;
}

void DiskHome::release(ParamGroup& g) {
  if (staging_) {  // the compute stream's last kernels reading the buffer are fenced before it is reused
    std::shared_ptr<PoolBuffer> buf;
    {
      std::lock_guard<std::mutex> lock(mu_);
      buf = onloaded_.lock();
      onloaded_.reset();
    }
    if (buf) buf->fence = staging_->fence();
  }
  const auto& slots = g.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    Tensor t = mapped_->tensor(slot_tensor_name(i, slots[i].key));
    slots[i].storage->take_bytes_from(*t.storage());
  }
  // Drop any page touched through the mapping (an access outside the hooks): not our memory any more.
  if (!slots.empty()) {
    const long page = ::sysconf(_SC_PAGESIZE);
    auto* first = static_cast<uint8_t*>(mapped_->tensor(slot_tensor_name(0, slots[0].key)).data_ptr());
    auto* start = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(first) / page * page);
    const size_t len = size_t(first - start) + g.packed_bytes();
    ::madvise(start, (len + page - 1) / page * page, MADV_DONTNEED);
  }
}

void DiskHome::restore(ParamGroup& g) {
  const auto& slots = g.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    Tensor t = mapped_->tensor(slot_tensor_name(i, slots[i].key));
    auto fresh = Storage::allocate(slots[i].nbytes, Device::cpu());
    std::memcpy(fresh->data(), t.data_ptr(), slots[i].nbytes);
    slots[i].storage->take_bytes_from(*fresh);
  }
}

}  // namespace diffq::offload
