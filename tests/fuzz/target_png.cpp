// troupe-sr's image path on an arbitrary file: a folder of a good PNG and the input, read by SrData
// (list, decode, size checks, held-out split) and one training batch drawn. Mutated inputs get
// their chunk CRCs recomputed, so most reach libpng's decoding instead of its CRC check.
#include <zlib.h>

#include <filesystem>

#include "fuzz/files.hpp"
#include "fuzz/targets.hpp"
#include "troupe/apps/image.hpp"
#include "troupe/apps/sr_data.hpp"

namespace troupe::fuzz {

namespace {

std::uint32_t be32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Rewrites the CRC of every whole chunk after the 8-byte signature.
void repair_crcs(std::string& png) {
  std::size_t at = 8;
  while (at + 12 <= png.size()) {
    const std::uint64_t length = be32(png, at);
    if (at + 12 + length > png.size()) break;
    const auto* bytes = reinterpret_cast<const Bytef*>(png.data() + at + 4);
    std::uint32_t crc = static_cast<std::uint32_t>(::crc32(0, bytes, static_cast<uInt>(length + 4)));
    for (int i = 3; i >= 0; --i, crc >>= 8) png[at + 8 + length + static_cast<std::size_t>(i)] = static_cast<char>(crc & 0xff);
    at += 12 + length;
  }
}

}  // namespace

FuzzTarget png_target(const std::string& scratch) {
  const std::string dir = scratch + "/png";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  apps::write_png(dir + "/a.png", apps::procedural_image(1, 8, 8));
  apps::write_png(dir + "/seed.png", apps::procedural_image(2, 6, 10));
  FuzzTarget t;
  t.name = "png";
  t.seeds = {read_bytes(dir + "/seed.png")};
  std::filesystem::remove(dir + "/seed.png");
  t.dictionary = {"IHDR", "IDAT", "IEND", "PLTE", "tRNS", "gAMA", "iCCP", "sBIT", "bKGD", "\x89PNG\r\n\x1a\n",
                  std::string("\0\0\0\x0d", 4), std::string("\x08\x06\0\0\0", 5), std::string("\x10\x02\0\0\0", 5),
                  std::string("\x01\x03\0\0\0", 5), std::string("\x08\x04\0\0\x01", 5)};
  t.repair = [](std::string& png) {
    if (png.size() % 10 != 0) repair_crcs(png);  // a tenth keep their broken CRCs
  };
  t.run = [dir](const std::string& bytes) {
    write_bytes(dir + "/b.png", bytes);
    apps::SrDataOptions options;
    options.folder = dir;
    options.patch = 4;
    options.upscale = 2;
    options.batch = 2;
    apps::SrData data(options);
    (void)data.next();
    return std::string("accepted");
  };
  return t;
}

}  // namespace troupe::fuzz
