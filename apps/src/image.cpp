// PNG images in and out, as files and as bytes in memory (libpng's simplified API), and PSNR.
#include "troupe/apps/image.hpp"

#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>

#include "troupe/apps/memory_budget.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::apps {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// Dense f32 on the CPU, whatever the caller handed in, so the loops below can index raw memory.
Tensor dense_f32(const Tensor& t, const char* op) {
  TROUPE_CHECK(t.defined(), invalid_argument, op, ": the image tensor is undefined");
  TROUPE_CHECK(is_floating(t.dtype()), dtype_mismatch, op, ": the image has dtype ", dtype_name(t.dtype()),
               "; pass a floating tensor with values in [0, 1]");
  return t.to(Device::cpu()).to(DType::f32);
}

}  // namespace

Tensor decode_png(const std::string& bytes, const std::string& source, std::int64_t max_pixels) {
  // Checking the signature ourselves gives a clearer message than libpng's for the commonest
  // mistake, bytes that are not a PNG at all.
  if (bytes.size() < 8 || png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) != 0)
    fail(ErrorKind::io, "read_png: ", source, " is not a PNG file (bad signature); pass PNG images");
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    std::string message = image.message;
    png_image_free(&image);
    fail(ErrorKind::io, "read_png: cannot decode ", source, ": ", message, "; the file is corrupt, re-create it");
  }
  image.format = PNG_FORMAT_RGB;
  const std::int64_t h = image.height, w = image.width;
  // Pixels come out of deflate, which expands at most 1032:1: a header declaring more rows than
  // the bytes could hold (even at one bit a pixel) is damage or a decompression bomb, refused
  // before the buffer for it is allocated.
  const double size = static_cast<double>(bytes.size());
  const double least_data = static_cast<double>(h) * (1 + std::ceil(static_cast<double>(w) / 8));
  if (least_data > 1032 * size + 4096) {
    png_image_free(&image);
    fail(ErrorKind::io, "read_png: ", source, " declares ", w, "x", h, " pixels, more than its ", size,
         " bytes can hold; the file is damaged, re-create it");
  }
  if (max_pixels > 0 && h * w > max_pixels) {
    png_image_free(&image);
    fail(ErrorKind::invalid_argument, "read_png: ", source, " is ", w, "x", h, " pixels, more than the limit of ",
         max_pixels, "; send a smaller image");
  }
  const double needed = 15.0 * static_cast<double>(w) * static_cast<double>(h);  // 8-bit RGB, then f32
  if (needed > physical_memory_bytes()) {
    png_image_free(&image);
    fail(ErrorKind::invalid_argument, "read_png: ", source, " is ", w, "x", h, " pixels, which needs ",
         needed / (1 << 30), " GiB to decode, more than this machine's memory; downscale it");
  }
  // Zeroed, because libpng composites any alpha channel onto what the buffer already holds.
  std::vector<png_byte> pixels(PNG_IMAGE_SIZE(image), 0);
  if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) {
    std::string message = image.message;
    png_image_free(&image);
    fail(ErrorKind::io, "read_png: cannot decode ", source, ": ", message,
         "; the file is truncated or corrupt, re-create it");
  }

  Tensor out = Tensor::empty({3, h, w}, DType::f32);
  float* dst = out.data<float>();
  const std::int64_t plane = h * w;
  for (std::int64_t i = 0; i < plane; ++i) {
    for (std::int64_t c = 0; c < 3; ++c) dst[c * plane + i] = pixels[3 * i + c] / 255.0f;
  }
  return out;
}

Tensor read_png(const std::string& path) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    fail(ErrorKind::io, "read_png: cannot open '", path, "': ", std::generic_category().message(errno),
         "; check the path");
  }
  std::string bytes;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0;) bytes.append(buffer, n);
  if (std::ferror(file.get()))
    fail(ErrorKind::io, "read_png: cannot read '", path, "': ", std::generic_category().message(errno));
  return decode_png(bytes, "'" + path + "'");
}

std::string encode_png(const Tensor& image, const std::string& what) {
  TROUPE_CHECK(image.defined() && image.dim() == 3 && image.size(0) == 3, shape_mismatch, what,
               ": expected an image of shape [3, H, W], got ",
               image.defined() ? shape_str(image.shape()) : std::string("an undefined tensor"));
  const Tensor src = dense_f32(image, what.c_str());
  const std::int64_t h = src.size(1), w = src.size(2), plane = h * w;
  TROUPE_CHECK(h > 0 && w > 0 && h <= PNG_UINT_31_MAX && w <= PNG_UINT_31_MAX, invalid_argument, what,
               ": cannot store an image of shape ", shape_str(src.shape()), " as PNG");
  const float* p = src.data<float>();
  std::vector<png_byte> pixels(static_cast<std::size_t>(3 * plane));
  for (std::int64_t i = 0; i < plane; ++i) {
    for (std::int64_t c = 0; c < 3; ++c) {
      float v = p[c * plane + i];
      v = std::isnan(v) ? 0.0f : std::clamp(v, 0.0f, 1.0f);
      pixels[3 * i + c] = static_cast<png_byte>(std::lround(v * 255.0f));
    }
  }
  png_image info{};
  info.version = PNG_IMAGE_VERSION;
  info.width = static_cast<png_uint_32>(w);
  info.height = static_cast<png_uint_32>(h);
  info.format = PNG_FORMAT_RGB;
  // The first call measures, the second writes.
  png_alloc_size_t size = 0;
  std::string bytes;
  bool ok = png_image_write_to_memory(&info, nullptr, &size, 0, pixels.data(), 0, nullptr) != 0;
  if (ok) {
    bytes.resize(size);
    ok = png_image_write_to_memory(&info, bytes.data(), &size, 0, pixels.data(), 0, nullptr) != 0;
    bytes.resize(size);
  }
  const std::string message = ok ? "" : info.message;
  png_image_free(&info);
  TROUPE_CHECK(ok, io, what, ": cannot encode an image of shape ", shape_str(src.shape()), ": ", message);
  return bytes;
}

void write_png(const std::string& path, const Tensor& image) {
  const std::string bytes = encode_png(image, "write_png: '" + path + "'");
  // Write-then-rename: a crash or a full disk leaves the old file (or none), never a broken one.
  const std::string tmp = path + ".tmp";
  File file(std::fopen(tmp.c_str(), "wb"));
  if (!file) {
    fail(ErrorKind::io, "write_png: cannot create '", tmp, "': ", std::generic_category().message(errno),
         "; check that the folder exists and is writable");
  }
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file.get()) == bytes.size();
  std::string message = ok ? "" : std::generic_category().message(errno);
  if (ok && (std::fflush(file.get()) != 0 || ::fsync(fileno(file.get())) != 0)) {
    ok = false;
    message = std::generic_category().message(errno);
  }
  if (std::fclose(file.release()) != 0 && ok) {
    ok = false;
    message = std::generic_category().message(errno);
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    message = std::generic_category().message(errno);
  }
  if (!ok) {
    std::remove(tmp.c_str());
    fail(ErrorKind::io, "write_png: cannot write '", path, "': ", message,
         "; check free disk space and permissions");
  }
}

std::vector<std::string> list_png_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fail(ErrorKind::io, "list_png_files: '", dir, "' is not a folder; pass a folder of PNG images");
  }
  std::vector<std::string> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    std::string ext = entry.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    if (ext == ".png" && entry.is_regular_file(ec)) paths.push_back(entry.path().string());
  }
  if (ec) fail(ErrorKind::io, "list_png_files: cannot read the folder '", dir, "': ", ec.message());
  if (paths.empty()) {
    fail(ErrorKind::io, "list_png_files: the folder '", dir, "' holds no .png file; put the images there");
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

double psnr(const Tensor& a, const Tensor& b, std::int64_t border) {
  TROUPE_CHECK(a.defined() && b.defined(), invalid_argument, "psnr: an image tensor is undefined");
  TROUPE_CHECK(a.shape() == b.shape(), shape_mismatch, "psnr: the images have different shapes ",
               shape_str(a.shape()), " and ", shape_str(b.shape()), "; compare images of the same size");
  TROUPE_CHECK(a.dim() >= 2, shape_mismatch, "psnr: expected images [3, H, W] or [N, 3, H, W], got ",
               shape_str(a.shape()));
  const std::int64_t h = a.size(-2), w = a.size(-1);
  TROUPE_CHECK(border >= 0 && 2 * border < h && 2 * border < w, invalid_argument, "psnr: border ", border,
               " leaves nothing of images of shape ", shape_str(a.shape()), "; use 0 <= border < min(H, W) / 2");
  const Tensor da = dense_f32(a, "psnr"), db = dense_f32(b, "psnr");
  const float* pa = da.data<float>();
  const float* pb = db.data<float>();
  const std::int64_t planes = a.numel() / (h * w);
  double sum = 0.0;
  for (std::int64_t p = 0; p < planes; ++p) {
    for (std::int64_t y = border; y < h - border; ++y) {
      const std::int64_t row = (p * h + y) * w;
      for (std::int64_t x = border; x < w - border; ++x) {
        const double d = std::clamp(pa[row + x], 0.0f, 1.0f) - std::clamp(pb[row + x], 0.0f, 1.0f);
        sum += d * d;
      }
    }
  }
  const double mse = sum / static_cast<double>(planes * (h - 2 * border) * (w - 2 * border));
  if (mse == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(1.0 / mse);
}

}  // namespace troupe::apps
