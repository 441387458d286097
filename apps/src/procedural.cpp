// Synthetic training images: painted from a seed with a splitmix64 stream (splitmix.hpp; no std:: distributions,
// whose output differs between standard libraries), so a seed means the same image everywhere.
#include <algorithm>
#include <array>
#include <cmath>

#include "troupe/apps/image.hpp"
#include "troupe/kernels/error.hpp"
#include "troupe/models/splitmix.hpp"

namespace troupe::apps {
namespace {

constexpr double kPi = 3.14159265358979323846;

using Colour = std::array<double, 3>;

struct Rng {
  std::uint64_t state;
  double uniform(double lo = 0.0, double hi = 1.0) {
    return lo + (hi - lo) * models::uniform01(state);
  }
  int below(int n) { return static_cast<int>(uniform() * n); }
  Colour colour() { return {uniform(), uniform(), uniform()}; }
};

// What fills a shape: a flat colour, or a texture between two colours. Textures put energy at
// frequencies up to Nyquist, which is exactly what downsampling destroys and SR must restore.
struct Paint {
  enum Kind { flat, stripes, checker, waves, noise } kind;
  Colour a, b;
  double cos_t, sin_t;  // texture orientation
  double frequency;     // cycles per pixel
  double phase;
  std::uint64_t noise_key;

  static Paint random(Rng& rng) {
    Paint p{};
    p.kind = static_cast<Kind>(rng.below(5));
    p.a = rng.colour();
    p.b = rng.colour();
    const double angle = rng.uniform(0.0, kPi);
    p.cos_t = std::cos(angle);
    p.sin_t = std::sin(angle);
    p.frequency = rng.uniform(0.03, 0.45);
    p.phase = rng.uniform(0.0, 2.0 * kPi);
    p.noise_key = models::splitmix64(rng.state);
    return p;
  }

  Colour at(std::int64_t x, std::int64_t y) const {
    const double u = x * cos_t + y * sin_t, v = -x * sin_t + y * cos_t;
    double t = 0.0;
    switch (kind) {
      case flat: return a;
      case stripes: t = std::sin(2.0 * kPi * frequency * u + phase) > 0.0 ? 1.0 : 0.0; break;
      case checker: {
        const auto cell = static_cast<std::int64_t>(std::floor(u * frequency) + std::floor(v * frequency));
        t = (cell & 1) ? 1.0 : 0.0;
        break;
      }
      case waves:
        t = 0.5 + 0.25 * std::sin(2.0 * kPi * frequency * u + phase) +
            0.25 * std::sin(2.0 * kPi * frequency * 0.61 * v - phase);
        break;
      case noise: {
        std::uint64_t s = noise_key ^ (static_cast<std::uint64_t>(y) << 32) ^ static_cast<std::uint64_t>(x);
        t = models::uniform01(s);
        break;
      }
    }
    return {a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t};
  }
};

struct Canvas {
  std::int64_t h, w;
  std::vector<double> rgb;  // [3, h, w]

  // Blends `colour` into pixel (x, y) with `coverage` in [0, 1]; 1 paints over.
  void blend(std::int64_t x, std::int64_t y, const Colour& colour, double coverage) {
    for (int c = 0; c < 3; ++c) {
      double& px = rgb[static_cast<std::size_t>((c * h + y) * w + x)];
      px += (colour[c] - px) * coverage;
    }
  }
};

// Even-odd rule: a point is inside if a ray to the right crosses the outline an odd number of times.
bool inside_polygon(const std::vector<std::array<double, 2>>& pts, double x, double y) {
  bool inside = false;
  for (std::size_t i = 0, j = pts.size() - 1; i < pts.size(); j = i++) {
    const auto& p = pts[i];
    const auto& q = pts[j];
    if ((p[1] > y) != (q[1] > y) && x < (q[0] - p[0]) * (y - p[1]) / (q[1] - p[1]) + p[0]) inside = !inside;
  }
  return inside;
}

void paint_background(Canvas& img, Rng& rng) {
  // Four corner colours blended bilinearly, plus a slow wave: smooth areas where SR must not add noise.
  const Colour c00 = rng.colour(), c01 = rng.colour(), c10 = rng.colour(), c11 = rng.colour();
  const double fx = rng.uniform(0.0, 2.0 * kPi / img.w), fy = rng.uniform(0.0, 2.0 * kPi / img.h);
  const double amp = rng.uniform(0.0, 0.15);
  for (std::int64_t y = 0; y < img.h; ++y) {
    const double v = img.h > 1 ? static_cast<double>(y) / (img.h - 1) : 0.0;
    for (std::int64_t x = 0; x < img.w; ++x) {
      const double u = img.w > 1 ? static_cast<double>(x) / (img.w - 1) : 0.0;
      const double wave = amp * std::sin(fx * x + fy * y);
      for (int c = 0; c < 3; ++c) {
        const double top = c00[c] + (c01[c] - c00[c]) * u, bottom = c10[c] + (c11[c] - c10[c]) * u;
        img.rgb[static_cast<std::size_t>((c * img.h + y) * img.w + x)] = top + (bottom - top) * v + wave;
      }
    }
  }
}

// A rectangle, an ellipse or a polygon, with hard (aliased) edges: the sharpest edges an image can have.
void paint_shape(Canvas& img, Rng& rng) {
  const double size = static_cast<double>(std::min(img.h, img.w));
  const double cx = rng.uniform(0.0, img.w), cy = rng.uniform(0.0, img.h);
  const double rx = rng.uniform(0.05, 0.3) * size, ry = rng.uniform(0.05, 0.3) * size;
  const Paint paint = Paint::random(rng);
  const int kind = rng.below(3);
  std::vector<std::array<double, 2>> polygon;
  if (kind == 2) {
    // Vertices at increasing angles around the centre: a star-shaped outline, convex or not.
    const int n = 3 + rng.below(4);
    const double start = rng.uniform(0.0, 2.0 * kPi);
    for (int i = 0; i < n; ++i) {
      const double angle = start + 2.0 * kPi * (i + rng.uniform(0.0, 0.8)) / n;
      const double r = rng.uniform(0.4, 1.0);
      polygon.push_back({cx + rx * r * std::cos(angle), cy + ry * r * std::sin(angle)});
    }
  }
  const auto x0 = std::max<std::int64_t>(0, static_cast<std::int64_t>(cx - rx));
  const auto x1 = std::min<std::int64_t>(img.w - 1, static_cast<std::int64_t>(cx + rx) + 1);
  const auto y0 = std::max<std::int64_t>(0, static_cast<std::int64_t>(cy - ry));
  const auto y1 = std::min<std::int64_t>(img.h - 1, static_cast<std::int64_t>(cy + ry) + 1);
  for (std::int64_t y = y0; y <= y1; ++y) {
    for (std::int64_t x = x0; x <= x1; ++x) {
      const double px = x + 0.5, py = y + 0.5;
      bool inside = false;
      if (kind == 0) {
        inside = std::abs(px - cx) <= rx && std::abs(py - cy) <= ry;
      } else if (kind == 1) {
        const double dx = (px - cx) / rx, dy = (py - cy) / ry;
        inside = dx * dx + dy * dy <= 1.0;
      } else {
        inside = inside_polygon(polygon, px, py);
      }
      if (inside) img.blend(x, y, paint.at(x, y), 1.0);
    }
  }
}

// A thick line along a quadratic Bezier curve, antialiased by the pixel's distance to the curve,
// so SR also sees thin structures and soft edges.
void paint_stroke(Canvas& img, Rng& rng) {
  const double size = static_cast<double>(std::min(img.h, img.w));
  std::array<std::array<double, 2>, 3> ctrl;
  for (auto& p : ctrl) p = {rng.uniform(0.0, img.w), rng.uniform(0.0, img.h)};
  const double half_width = rng.uniform(0.5, 0.03 * size + 1.0);
  const Colour colour = rng.colour();
  constexpr int kSegments = 16;
  std::array<std::array<double, 2>, kSegments + 1> pts;
  for (int i = 0; i <= kSegments; ++i) {
    const double t = static_cast<double>(i) / kSegments, s = 1.0 - t;
    for (int k = 0; k < 2; ++k) pts[i][k] = s * s * ctrl[0][k] + 2.0 * s * t * ctrl[1][k] + t * t * ctrl[2][k];
  }
  // Coverage from the distance to the nearest segment (not blended per segment), so the joints,
  // where segments overlap, are no thicker than the rest. The curve stays inside its control hull.
  const double reach = half_width + 1.0;
  double lo_x = img.w, hi_x = 0.0, lo_y = img.h, hi_y = 0.0;
  for (const auto& p : ctrl) {
    lo_x = std::min(lo_x, p[0]), hi_x = std::max(hi_x, p[0]);
    lo_y = std::min(lo_y, p[1]), hi_y = std::max(hi_y, p[1]);
  }
  const auto x0 = std::max<std::int64_t>(0, static_cast<std::int64_t>(lo_x - reach));
  const auto x1 = std::min<std::int64_t>(img.w - 1, static_cast<std::int64_t>(hi_x + reach));
  const auto y0 = std::max<std::int64_t>(0, static_cast<std::int64_t>(lo_y - reach));
  const auto y1 = std::min<std::int64_t>(img.h - 1, static_cast<std::int64_t>(hi_y + reach));
  for (std::int64_t y = y0; y <= y1; ++y) {
    for (std::int64_t x = x0; x <= x1; ++x) {
      double nearest2 = reach * reach;
      for (int i = 0; i < kSegments; ++i) {
        const double dx = pts[i + 1][0] - pts[i][0], dy = pts[i + 1][1] - pts[i][1];
        const double px = x + 0.5 - pts[i][0], py = y + 0.5 - pts[i][1];
        const double len2 = dx * dx + dy * dy;
        const double t = len2 > 0.0 ? std::clamp((px * dx + py * dy) / len2, 0.0, 1.0) : 0.0;
        const double ex = px - t * dx, ey = py - t * dy;
        nearest2 = std::min(nearest2, ex * ex + ey * ey);
      }
      const double coverage = std::clamp(half_width + 0.5 - std::sqrt(nearest2), 0.0, 1.0);
      if (coverage > 0.0) img.blend(x, y, colour, coverage);
    }
  }
}

}  // namespace

Tensor procedural_image(std::uint64_t seed, std::int64_t height, std::int64_t width) {
  TROUPE_CHECK(height > 0 && width > 0, invalid_argument, "procedural_image: size ", height, "x", width,
               " is not positive; pass height, width >= 1");
  Rng rng{seed};
  Canvas img{height, width, std::vector<double>(static_cast<std::size_t>(3 * height * width))};
  paint_background(img, rng);
  const int shapes = 5 + rng.below(8);
  for (int i = 0; i < shapes; ++i) paint_shape(img, rng);
  const int strokes = 2 + rng.below(4);
  for (int i = 0; i < strokes; ++i) paint_stroke(img, rng);

  // A little sensor-like grain everywhere, keyed by pixel so it does not depend on the painting order.
  const double grain = rng.uniform(0.0, 0.03);
  const std::uint64_t grain_key = models::splitmix64(rng.state);
  Tensor out = Tensor::empty({3, height, width}, DType::f32);
  float* dst = out.data<float>();
  for (std::size_t i = 0; i < img.rgb.size(); ++i) {
    std::uint64_t s = grain_key ^ i;
    const double n = models::uniform01(s) - 0.5;
    dst[i] = static_cast<float>(std::clamp(img.rgb[i] + grain * n, 0.0, 1.0));
  }
  return out;
}

}  // namespace troupe::apps
