// DiskHome: a group's bytes in `<dir>/group_<key>.safetensors`, key = content hash of the group's
// weights, names, shapes, schemes and the model/quantization config fingerprint (ParamGroup::
// content_key). The file holds the packed layout exactly (uint8 tensors named "<index>.1.<slot key>",
// zero padding tensors "<index>.0.pad" between them), so an onload is one pread of the data section
// into a pool buffer: the page cache is the kernel's, never counted in the process' RSS.
//
// Offloaded, the group's storages borrow the file's read-only mapping (Residency::disk): nothing is
// resident until touched, and each release drops touched pages again (madvise DONTNEED), so a stray
// access outside the hooks still reads correct bytes.
//
// Staleness: an existing file is reused only when its metadata key, its layout and the hash of its
// bytes all match; otherwise it is rewritten (atomically: temp file + rename) and counted as stale.
//
// Onto an accelerator (a DeviceStaging given): an onload reads the file chunk by chunk into the staging
// buffer's page-locked memory and uploads each chunk into the device buffer on the transfer stream,
// after the buffer's fence; a release fences the buffer on the compute stream (as DeviceHostHome).
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "io/safetensors.h"
#include "offload/content_hash.h"
#include "offload/device_staging.h"
#include "offload/group_home.h"

namespace diffq::offload {

struct DiskFileCounters {
  std::atomic<int64_t> written{0}, reused{0}, stale_replaced{0}, bytes_read{0}, reads{0};
};

class DiskHome final : public GroupHome {
 public:
  // drop_page_cache: see GroupOffloadOptions::drop_page_cache. staging: the onload device's uploads
  // (null: the onload device is the CPU).
  DiskHome(std::filesystem::path dir, std::string fingerprint, std::shared_ptr<DiskFileCounters> counters,
           bool drop_page_cache = false, std::shared_ptr<DeviceStaging> staging = nullptr);
  ~DiskHome() override;

  void adopt(ParamGroup& g) override;
  std::shared_ptr<PoolBuffer> fetch(const ParamGroup& g, BufferPool& pool) override;
  void release(ParamGroup& g) override;
  void restore(ParamGroup& g) override;
  Residency home_residency() const override { return Residency::disk; }
  Residency onloaded_residency() const override { return staging_ ? Residency::device : Residency::host; }

  const std::filesystem::path& file() const { return file_; }
  const Hash128& key() const { return key_; }

  static std::filesystem::path file_for(const std::filesystem::path& dir, const Hash128& key);
  static std::string slot_tensor_name(size_t index, const std::string& key);
  // Why `path` cannot serve group `g` under `key` (empty string: it can). Reads the whole file.
  static std::string stale_reason(const std::filesystem::path& path, const ParamGroup& g, const Hash128& key,
                                  std::string_view fingerprint);

 private:
  void write(const ParamGroup& g) const;
  std::filesystem::path dir_;
  std::string fingerprint_;
  std::shared_ptr<DiskFileCounters> counters_;
  std::filesystem::path file_;
  Hash128 key_;
  std::unique_ptr<io::SafetensorsFile> mapped_;
  int fd_ = -1;
  bool drop_page_cache_ = false;
  std::shared_ptr<DeviceStaging> staging_;
  std::mutex mu_;
  std::weak_ptr<PoolBuffer> onloaded_;  // on an accelerator: the buffer to fence at release
  void drop_cached_pages() const;
  void read_into(const ParamGroup& g, uint8_t* dst, size_t offset, size_t len) const;
};

}  // namespace diffq::offload
