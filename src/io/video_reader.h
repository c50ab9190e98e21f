// Reading a video back into frames (tests, `diffq` tools): any container and codec libavformat /
// libavcodec read, plus WebP, simple or animated, which FFmpeg 5.1 (Debian 12) cannot demux: its WebP
// decoder skips ANIM/ANMF chunks. For WebP, io/webp_container.h walks the RIFF chunks, libavcodec's
// WebP decoder decodes each frame's bitstream, and the frames are composited onto the canvas as the
// WebP container spec says (offsets, alpha blending, dispose to transparent).
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "diffq/tensor.h"

namespace diffq::io {

struct DecodedVideo {
  Tensor frames_u8;  // uint8 [F, H, W, 3] RGB (alpha dropped; YUV converted with the stream's matrix,
                     // BT.601 where the stream names none, as FFmpeg does)
  double fps = 0;    // the stream's average frame rate; WebP: from the frame durations (ms); 0 if unknown
                     // (a still image)
  std::map<std::string, std::string> metadata;  // container-level tags (libavformat's names); WebP: the XMP
                                                // chunk as "xmp" when present
  std::string codec;                            // libavcodec's codec name: "h264", "webp", "vp9", ...
  int loop_count = -1;                          // animated WebP: ANIM's loop count (0 = forever); else -1
};

DecodedVideo read_video(const std::filesystem::path& path);

}  // namespace diffq::io
