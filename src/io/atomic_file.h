// Writing a file so that readers see either the old file or the complete new one, never a half:
// the bytes go to a temporary sibling ("." + name + ".tmp.<pid>.<random>"), are fsync'ed, and the
// temporary is renamed over the target. Any failure (including an exception from `produce`) removes
// the temporary and throws a diffq::Error naming the file, prefixed with `ctx`.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string_view>

namespace diffq::io {

using ByteSink = std::function<void(const void* data, size_t size)>;

// produce(sink) writes the whole content through sink (any number of calls).
void write_file_atomically(const std::filesystem::path& path, std::string_view ctx,
                           const std::function<void(const ByteSink&)>& produce);

}  // namespace diffq::io
