#pragma once
// Training data for troupe-sr: high-resolution patches (procedural images by default, or random
// crops of the PNGs in a folder) and their low-resolution versions made by antialiased bicubic
// downsampling, plus a fixed held-out set scored by PSNR next to bicubic upscaling.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "troupe/kernels/tensor.hpp"

namespace troupe::apps {

/// Where the images come from and how big the patches are.
struct SrDataOptions {
  std::string folder;          // empty: the procedural generator
  std::int64_t patch = 128;    // high-resolution patch side (the input is patch / upscale)
  std::int64_t upscale = 2;
  std::int64_t batch = 4;
  std::int64_t held_out = 8;   // procedural held-out images (a folder holds out its last 10%, at least one)
  std::uint64_t seed = 1;
};

/// Batches of (low-resolution input, high-resolution target) and the held-out set.
class SrData {
 public:
  /// Loads the folder's images (errors name the file: not a PNG, corrupt, smaller than a patch).
  explicit SrData(const SrDataOptions& options);
  /// The next training batch: inputs [B, 3, p/r, p/r], targets [B, 3, p, p]. Batch k depends
  /// only on (seed, k), so a resumed run continues with the same data.
  std::pair<Tensor, Tensor> next();
  /// Batches drawn so far (checkpointed), and moving there.
  std::uint64_t position() const { return position_; }
  void set_position(std::uint64_t position) { position_ = position; }
  /// Held-out (input, target) pairs, each [1, 3, h, w] and [1, 3, h*r, w*r].
  const std::vector<std::pair<Tensor, Tensor>>& held_out() const { return held_out_; }
  /// Mean PSNR (dB, border = upscale) of bicubic upscaling on the held-out set: the baseline.
  double bicubic_psnr() const;
  /// "procedural images" or "N PNG files from DIR".
  const std::string& source() const { return source_; }

 private:
  std::pair<Tensor, Tensor> pair_of(const Tensor& hr) const;
  SrDataOptions o_;
  std::vector<Tensor> train_images_;  // folder mode: decoded once
  std::vector<std::pair<Tensor, Tensor>> held_out_;
  std::uint64_t position_ = 0;
  std::string source_;
};

/// The low-resolution version of a high-resolution image or batch (antialiased bicubic).
Tensor downsample(const Tensor& hr, std::int64_t upscale);

}  // namespace troupe::apps
