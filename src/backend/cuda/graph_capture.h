// CUDA graph capture behind DeviceInterface::capture (backend/device_interface.h): the body's work is
// captured on the device's capture stream with its allocations in the graph pool (allocator.h), then
// instantiated; replay() launches it on the thread's current stream (the compute stream).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "backend/device_interface.h"

namespace diffq::backend::cuda {

// nullptr with *why when the capture failed (the body threw, broke the capture, or kept a tensor it made);
// nothing captured then ever runs.
std::unique_ptr<CapturedWork> capture_graph(int index, const std::function<void()>& body, std::string* why);

}  // namespace diffq::backend::cuda
