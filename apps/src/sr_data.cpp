#include "troupe/apps/sr_data.hpp"

#include <algorithm>

#include "troupe/apps/image.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/kernels/layout.hpp"
#include "troupe/models/splitmix.hpp"

namespace troupe::apps {

namespace {

// Procedural seeds: training images count up from seed << 32, held-out ones from a range no
// training image reaches, so the two never overlap.
std::uint64_t train_seed(std::uint64_t seed, std::uint64_t k) { return (seed << 32) + k; }
std::uint64_t held_out_seed(std::uint64_t k) { return 0xFFFF000000000000ULL + k; }

}  // namespace

Tensor downsample(const Tensor& hr, std::int64_t upscale) {
  return resize_bicubic(hr, hr.size(-2) / upscale, hr.size(-1) / upscale);
}

std::pair<Tensor, Tensor> SrData::pair_of(const Tensor& hr) const {
  const Tensor batch = hr.unsqueeze(0);
  return {downsample(batch, o_.upscale), batch};
}

SrData::SrData(const SrDataOptions& o) : o_(o) {
  TROUPE_CHECK(o.patch > 0 && o.upscale > 0 && o.patch % o.upscale == 0, invalid_argument, "--patch ", o.patch,
               " must be a positive multiple of the upscale factor ", o.upscale);
  TROUPE_CHECK(o.batch > 0, invalid_argument, "--batch must be positive");
  if (o.folder.empty()) {
    source_ = "procedural images (pass --data DIR for PNG files)";
    for (std::int64_t k = 0; k < o.held_out; ++k)
      held_out_.push_back(pair_of(procedural_image(held_out_seed(static_cast<std::uint64_t>(k)), o.patch, o.patch)));
    return;
  }
  const std::vector<std::string> files = list_png_files(o.folder);
  TROUPE_CHECK(files.size() >= 2, invalid_argument, "'", o.folder, "' holds ", files.size(),
               " PNG file; troupe-sr needs at least 2 (one is held out for PSNR)");
  const std::size_t held = std::max<std::size_t>(1, files.size() / 10);
  for (std::size_t i = 0; i < files.size(); ++i) {
    Tensor img = read_png(files[i]);
    TROUPE_CHECK(img.size(1) >= o.patch && img.size(2) >= o.patch, invalid_argument, "'", files[i], "' is ",
                 img.size(2), "x", img.size(1), ", smaller than a training patch of ", o.patch, "x", o.patch,
                 "; use bigger images or a smaller --patch");
    if (i + held < files.size()) {
      train_images_.push_back(img);
    } else {
      // Whole held-out images, cropped to a multiple of the scale factor.
      const std::int64_t h = img.size(1) / o.upscale * o.upscale, w = img.size(2) / o.upscale * o.upscale;
      held_out_.push_back(pair_of(img.slice(1, 0, h).slice(2, 0, w).contiguous()));
    }
  }
  source_ = std::to_string(files.size()) + " PNG files from " + o.folder + " (" + std::to_string(held) + " held out)";
}

std::pair<Tensor, Tensor> SrData::next() {
  std::vector<Tensor> patches;
  for (std::int64_t b = 0; b < o_.batch; ++b) {
    const std::uint64_t k = position_++;
    if (train_images_.empty()) {
      patches.push_back(procedural_image(train_seed(o_.seed, k), o_.patch, o_.patch).unsqueeze(0));
      continue;
    }
    const std::uint64_t r = models::mix64(train_seed(o_.seed, k));
    const Tensor& img = train_images_[r % train_images_.size()];
    const std::int64_t y = static_cast<std::int64_t>((r >> 20) % static_cast<std::uint64_t>(img.size(1) - o_.patch + 1));
    const std::int64_t x = static_cast<std::int64_t>((r >> 40) % static_cast<std::uint64_t>(img.size(2) - o_.patch + 1));
    patches.push_back(img.slice(1, y, y + o_.patch).slice(2, x, x + o_.patch).unsqueeze(0));
  }
  const Tensor hr = kernels::concat(patches, 0);
  return {downsample(hr, o_.upscale), hr};
}

double SrData::bicubic_psnr() const {
  double total = 0;
  for (const auto& [lr, hr] : held_out_)
    total += psnr(resize_bicubic(lr, hr.size(-2), hr.size(-1)), hr, o_.upscale);
  return total / static_cast<double>(held_out_.size());
}

}  // namespace troupe::apps
