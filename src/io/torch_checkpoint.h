// PyTorch checkpoints (`torch.save(state_dict)`: pytorch_model.bin, diffusion_pytorch_model.bin) read
// without Python and without running pickle code: the zip container (torch_zip.h) is mmapped, data.pkl
// goes through the restricted unpickler (torch_pickle.h), and every tensor borrows its storage's bytes
// (zero-copy, like SafetensorsFile).
//
// torchao-quantized weights (Diffusers' save_pretrained(..., safe_serialization=False) of a
// TorchAoConfig model) are tensor subclasses in the pickle. They come out in the layout torchao's own
// safetensors support writes (torchao.prototype.safetensors flatten_tensor_state_dict), which diffq's
// torchao loader already reads: "<module>.<param>" becomes the tensors "<module>._<param>_<attr>" (qdata,
// scale, zero_point...) plus a metadata entry "<module>.<param>" = {"_type": "Int8Tensor", "_data":
// {non-tensor attributes}, "_tensor_data_names": [...]}. So a .bin and a .safetensors of the same
// model give the same StateDict and metadata.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"
#include "io/torch_pickle.h"

namespace diffq::io {

struct TorchCheckpoint {
  StateDict tensors;              // plain tensors by key; tensor subclasses flattened (see above)
  Metadata metadata;              // "<module>.<param>" -> torchao JSON, one per flattened subclass
  std::vector<std::string> keys;  // the pickle's own keys, in its order
};

// Reads a torch.save zip checkpoint. Throws diffq::Error naming the file and the defect: a legacy
// (non-zip) file, a truncated archive, a compressed entry, a global outside the allow-list, a storage
// too short for its tensor, a big-endian file, a dtype diffq cannot hold.
TorchCheckpoint load_torch_checkpoint(const std::filesystem::path& path);

// The bytes of one storage ("archive/data/<key>") and the owner that keeps them alive.
struct StorageBytes {
  uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};
using StorageLookup = std::function<StorageBytes(const std::string& key)>;

// The state dict of an unpickled data.pkl (the root must be a dict of tensors); `where` prefixes errors.
TorchCheckpoint build_torch_checkpoint(const pickle::Unpickled& u, const StorageLookup& storages,
                                       std::string_view where);

// True for file names the reader handles: *.bin, *.pt, *.pth.
bool is_torch_checkpoint_name(const std::filesystem::path& p);

}  // namespace diffq::io
