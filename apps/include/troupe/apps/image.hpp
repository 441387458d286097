#pragma once
// Images for the applications: PNG files in and out, bicubic resampling, seeded synthetic images
// and PSNR, which is what super-resolution needs to make, degrade and score its data.
//
// An image is an f32 Tensor of shape [3, H, W] (RGB planes, values in [0, 1]); functions that say so
// also take batches [N, 3, H, W].

#include <cstdint>
#include <string>
#include <vector>

#include "troupe/kernels/tensor.hpp"

namespace troupe::apps {

/// Loads a PNG (gray, palette, alpha or 16-bit are converted to 8-bit RGB; alpha is composited on
/// black) as a [3, H, W] f32 image in [0, 1]; throws Error(io) naming the path if it cannot.
Tensor read_png(const std::string& path);

/// Saves a [3, H, W] float image as an 8-bit RGB PNG (values clamped to [0, 1]); the file is written
/// to "<path>.tmp" and renamed, so readers never see a half-written image.
void write_png(const std::string& path, const Tensor& image);

/// read_png of PNG bytes in memory (an upload); `source` names them in errors ("the request body").
/// A positive `max_pixels` refuses larger images (invalid_argument) before decoding them.
Tensor decode_png(const std::string& bytes, const std::string& source, std::int64_t max_pixels = 0);

/// write_png's bytes, in memory; `what` begins its error messages.
std::string encode_png(const Tensor& image, const std::string& what = "encode_png");

/// Paths of the *.png files (extension in any case) directly inside `dir`, sorted; throws Error(io)
/// if the folder is missing or holds no PNG.
std::vector<std::string> list_png_files(const std::string& dir);

/// Resamples the last two dimensions (H, W) of `image` ([3, H, W], [N, 3, H, W], ...) to
/// (out_h, out_w) with the Keys bicubic (a = -0.5), antialiased when shrinking, as PIL's
/// Image.resize(BICUBIC); returns f32, not clamped.
Tensor resize_bicubic(const Tensor& image, std::int64_t out_h, std::int64_t out_w);

/// A deterministic synthetic RGB image [3, height, width] in [0, 1] from `seed`: gradients, sharp
/// shapes, textures and strokes, the kind of detail super-resolution has to restore.
Tensor procedural_image(std::uint64_t seed, std::int64_t height, std::int64_t width);

/// Peak signal-to-noise ratio in dB (peak 1.0) of two same-shape images or batches, after clamping
/// to [0, 1] and cropping `border` pixels from each side of H and W; +infinity when they are equal.
double psnr(const Tensor& a, const Tensor& b, std::int64_t border = 0);

}  // namespace troupe::apps
