// Video output of generated clips (Wan): mp4 (H.264) and animated WebP through FFmpeg's libraries
// (libavcodec / libavformat / libswscale; Debian 12 ships FFmpeg 5.1), and folders of PNG frames.
//
// Every file is written atomically: the muxer writes a temporary sibling ("." + name + ".tmp.<pid>.
// <random>"), which is fsynced and renamed over the target; on any error the temporary is removed, the
// target is left untouched, and diffq::Error("[video] cannot write <path>: ...") names the path and
// libav's own error string.
//
// mp4: H.264 via libx264, yuv420p (BT.601 limited range, tagged as such), preset medium, constant
//   rate factor `crf`. The default (crf = -1) is crf 25: what Diffusers' export_to_video(quality=5)
//   gets from imageio-ffmpeg, which maps quality q to crf int((1 - q / 10) * 51). The moov atom is
//   moved to the front (+faststart: plays while downloading). yuv420p needs even sizes: an odd width or
//   height is padded by one column / row repeating the last one (the file is then (W+1) x (H+1);
//   imageio instead rescales to a multiple of 16). Wan's sizes are multiples of 16, so this never
//   happens there; a generation is never lost to an error at the very end.
//   Metadata: every key/value is stored as a QuickTime metadata item ('mdta' keys, ffmpeg's
//   -movflags use_metadata_tags), so custom keys (prompt, seed, ...) survive as given; read_video and
//   `ffprobe` read them back (libavformat adds major_brand, minor_version, compatible_brands, encoder).
// webp: animated WebP, lossy (libwebp quality 90; `crf` does not apply), loops forever; each frame is a
//   full-canvas key frame, timestamps in milliseconds (the format's unit: 16 fps -> 62/63 ms).
//   Metadata: FFmpeg 5.1's WebP muxer writes none, so `metadata` is DROPPED for .webp (use the mp4 or
//   the PNG frames for provenance). Odd sizes are fine.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "diffq/tensor.h"

namespace diffq::io {

struct VideoWriteOptions {
  double fps = 16.0;                               // > 0; Wan's default
  std::map<std::string, std::string> metadata;     // see above for what each container keeps
  int crf = -1;                                    // mp4 only: 0 (lossless) .. 51; -1: 25 (see above)
};

// frames_u8: uint8 [F, H, W, 3] RGB on the CPU (any layout; copied contiguous when needed), F >= 1.
// The format comes from the extension (case-insensitive): .mp4, .webp.
void write_video(const std::filesystem::path& path, const Tensor& frames_u8, const VideoWriteOptions& opt = {});

// dir/00000.png, dir/00001.png, ... (dir and its parents are created); each PNG is written atomically
// (io/png.h) with `metadata` as text chunks (keys: 1-79 printable ASCII characters).
void write_frames_png(const std::filesystem::path& dir, const Tensor& frames_u8,
                      const std::map<std::string, std::string>& metadata = {});

// The crf write_video uses for `opt` (resolves -1); exposed for the CLI's reporting and the tests.
int effective_crf(const VideoWriteOptions& opt);

}  // namespace diffq::io
