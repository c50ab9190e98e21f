// The basic layers, named and shaped as torch.nn's so their parameters load by name.
#pragma once

#include "modules/module.h"

namespace diffq {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor operator()(const Tensor& x) { return call1(x, &Linear::forward); }
  Tensor forward(const Tensor& x);  // [..., in] -> [..., out]
  int64_t in_features, out_features;
  Parameter weight;  // [out, in], dense or quantized
  Parameter bias;    // [out] (undefined shape [] when bias=false)
  bool has_bias;
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps, bool elementwise_affine = true, bool bias = true);
  Tensor operator()(const Tensor& x) { return call1(x, &LayerNorm::forward); }
  Tensor forward(const Tensor& x);
  double eps;
  bool affine, has_bias;
  Parameter weight, bias;
};

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, bool elementwise_affine = true);
  Tensor operator()(const Tensor& x) { return call1(x, &RMSNorm::forward); }
  Tensor forward(const Tensor& x);
  double eps;
  bool affine;
  Parameter weight;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t groups, int64_t channels, double eps, bool affine = true);
  Tensor operator()(const Tensor& x) { return call1(x, &GroupNorm::forward); }
  Tensor forward(const Tensor& x);
  int64_t groups;
  double eps;
  bool affine;
  Parameter weight, bias;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t padding = 0, bool bias = true);
  Tensor operator()(const Tensor& x) { return call1(x, &Conv2d::forward); }
  Tensor forward(const Tensor& x);
  int64_t stride, padding;
  bool has_bias;
  Parameter weight, bias;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim);
  Tensor operator()(const Tensor& ids) { return call1(ids, &Embedding::forward); }
  Tensor forward(const Tensor& ids);
  Parameter weight;
};

}  // namespace diffq
