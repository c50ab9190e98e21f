// Bitwise comparison of two tensors for the tests that hold a fused op to the chain of ops it replaces:
// same dtype, same shape, every element's bytes equal (NaN payloads and signed zeros included).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "diffq/tensor.h"

namespace diffq {

inline void expect_bits_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  const size_t es = dtype_size(a.dtype());
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < ac.numel(); ++i)
    if (std::memcmp(static_cast<const char*>(ac.data_ptr()) + size_t(i) * es,
                    static_cast<const char*>(bc.data_ptr()) + size_t(i) * es, es) != 0) {
      if (first < 0) first = i;
      ++differ;
    }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << ac.numel() << " elements of " << a.str()
                       << " differ, the first at " << first;
}

}  // namespace diffq
