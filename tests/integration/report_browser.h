// Headless Chromium (Debian's `chromium`) for the tests of `ftrun report`'s page: what the
// browser actually draws, not the HTML text. Measure() loads a copy of the page with a small
// script appended that writes the bounding boxes of the drawn elements into the DOM, read back
// with --dump-dom; Screenshot() saves a PNG that DecodePng() reads (8-bit RGB/RGBA, what
// Chromium writes) so a test can check a pixel's colour.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace ftrun::testing {

inline std::string ChromiumBinary() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (FileExists(p)) return p;
  }
  return "";
}

// Chromium's start on two busy cores takes seconds: a generous deadline.
inline RunResult RunChromium(const std::string& profile, std::vector<std::string> args) {
  std::vector<std::string> all = {"--headless",
                                  "--no-sandbox",
                                  "--disable-gpu",
                                  "--no-first-run",
                                  "--hide-scrollbars",
                                  "--force-device-scale-factor=1",
                                  "--user-data-dir=" + profile,
                                  "--window-size=1280,1000"};
  all.insert(all.end(), args.begin(), args.end());
  ChildRun run(ChromiumBinary(), all);
  return run.Wait(std::chrono::seconds(120));
}

struct Box {
  std::string cls;
  double x = 0, y = 0, w = 0, h = 0;
};

struct Measured {
  double viewport_width = 0;
  std::vector<Box> boxes;
  std::vector<Box> Of(const std::string& cls) const {
    std::vector<Box> out;
    for (const auto& b : boxes) {
      if (b.cls == cls) out.push_back(b);
    }
    return out;
  }
};

// The boxes of every element matching `selectors` (one CSS selector per entry, reported as
// its `cls`), as Chromium lays the page out.
inline std::optional<Measured> Measure(const std::string& page, const std::string& work_dir,
                                       const std::vector<std::string>& selectors) {
  std::string html = ReadFile(page);
  std::string list;
  for (const auto& s : selectors) list += (list.empty() ? "'" : ",'") + s + "'";
  const std::string script =
      "<script>(function(){var out=['W '+document.documentElement.clientWidth];"
      "[" +
      list +
      "].forEach(function(s,i){document.querySelectorAll(s).forEach(function(e){"
      "var r=e.getBoundingClientRect();out.push('B '+i+' '+r.x+' '+r.y+' '+r.width+' '+"
      "r.height);});});var p=document.createElement('pre');p.id='ftrun-measure';"
      "p.textContent=out.join('\\n');document.body.appendChild(p);})();</script>";
  const auto at = html.rfind("</body>");
  if (at == std::string::npos) return std::nullopt;
  html.insert(at, script);
  const std::string copy = work_dir + "/measure.html";
  std::ofstream(copy) << html;
  auto r = RunChromium(work_dir + "/profile-measure", {"--dump-dom", "file://" + copy});
  if (r.exit_code != 0) return std::nullopt;
  const auto start = r.out.find("<pre id=\"ftrun-measure\">");
  if (start == std::string::npos) return std::nullopt;
  Measured m;
  for (const auto& line :
       Lines(r.out.substr(start + 24, r.out.find("</pre>", start) - start - 24))) {
    std::smatch g;
    static const std::regex box("^B (\\S+) (\\S+) (\\S+) (\\S+) (\\S+)$");
    static const std::regex width("^W (\\S+)$");
    if (std::regex_match(line, g, box)) {
      const size_t i = std::stoul(g[1]);
      if (i >= selectors.size()) return std::nullopt;
      m.boxes.push_back(
          {selectors[i], std::stod(g[2]), std::stod(g[3]), std::stod(g[4]), std::stod(g[5])});
    } else if (std::regex_match(line, g, width)) {
      m.viewport_width = std::stod(g[1]);
    }
  }
  return m;
}

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
  const uint8_t* At(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

inline uint32_t BigEndian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// An 8-bit, non-interlaced RGB or RGBA PNG; nullopt for anything else.
inline std::optional<Image> DecodePng(const std::string& path) {
  const std::string file = ReadFile(path);
  const auto* d = reinterpret_cast<const uint8_t*>(file.data());
  if (file.size() < 8 || file.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return std::nullopt;
  Image img;
  int channels = 0;
  std::string idat;
  for (size_t pos = 8; pos + 12 <= file.size();) {
    const uint32_t len = BigEndian(d + pos);
    const std::string type = file.substr(pos + 4, 4);
    if (pos + 12 + len > file.size()) return std::nullopt;
    const uint8_t* body = d + pos + 8;
    if (type == "IHDR") {
      img.width = static_cast<int>(BigEndian(body));
      img.height = static_cast<int>(BigEndian(body + 4));
      if (body[8] != 8 || body[12] != 0) return std::nullopt;  // depth 8, no interlace
      channels = body[9] == 2 ? 3 : body[9] == 6 ? 4 : 0;
      if (channels == 0) return std::nullopt;
    } else if (type == "IDAT") {
      idat.append(reinterpret_cast<const char*>(body), len);
    }
    pos += 12 + len;
  }
  if (img.width <= 0 || img.height <= 0 || img.width > 10000 || img.height > 20000) {
    return std::nullopt;
  }
  const size_t stride = static_cast<size_t>(img.width) * channels;
  std::vector<uint8_t> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) !=
          Z_OK ||
      raw_len != raw.size()) {
    return std::nullopt;
  }
  std::vector<uint8_t> prev(stride, 0), cur(stride);
  img.rgb.resize(static_cast<size_t>(img.width) * img.height * 3);
  for (int y = 0; y < img.height; ++y) {
    const uint8_t* row = &raw[y * (stride + 1)];
    const uint8_t filter = row[0];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? cur[i - channels] : 0;
      const int b = prev[i];
      const int c = i >= static_cast<size_t>(channels) ? prev[i - channels] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          return std::nullopt;
      }
      cur[i] = static_cast<uint8_t>(row[1 + i] + pred);
    }
    for (int x = 0; x < img.width; ++x) {
      for (int k = 0; k < 3; ++k) {
        img.rgb[(static_cast<size_t>(y) * img.width + x) * 3 + k] = cur[x * channels + k];
      }
    }
    std::swap(prev, cur);
  }
  return img;
}

// Pixels of `img` inside the box within `tolerance` of the colour #rrggbb.
inline int CountColour(const Image& img, const Box& b, uint32_t rgb, int tolerance = 12) {
  int n = 0;
  for (int y = std::max(0, static_cast<int>(b.y));
       y < std::min(img.height, static_cast<int>(b.y + b.h)); ++y) {
    for (int x = std::max(0, static_cast<int>(b.x));
         x < std::min(img.width, static_cast<int>(b.x + b.w)); ++x) {
      const uint8_t* p = img.At(x, y);
      if (std::abs(p[0] - static_cast<int>((rgb >> 16) & 255)) <= tolerance &&
          std::abs(p[1] - static_cast<int>((rgb >> 8) & 255)) <= tolerance &&
          std::abs(p[2] - static_cast<int>(rgb & 255)) <= tolerance) {
        ++n;
      }
    }
  }
  return n;
}

// What every faulted job's page must draw, checked in Chromium's layout and pixels: a fault
// marker and the recovery's phases with a width, inside the viewport, and the fault's colour
// where its marker is. `phases`: the phase classes that must be drawn (e.g. "phase-stop").
inline void ExpectPageDrawsTheFault(const std::string& page, const std::string& work_dir,
                                    const std::vector<std::string>& phases) {
  ASSERT_FALSE(ChromiumBinary().empty()) << "chromium is required (scripts/install-deps.sh)";
  std::vector<std::string> selectors = {"#timeline .fault-mark", "#timeline .attempt",
                                        ".breakdown"};
  for (const auto& p : phases) {
    selectors.push_back("#timeline ." + p);
    selectors.push_back(".breakdown ." + p);
  }
  auto m = Measure(page, work_dir, selectors);
  ASSERT_TRUE(m) << "chromium could not load " << page;
  ASSERT_GT(m->viewport_width, 0);
  auto inside = [&](const Box& b, const std::string& what) {
    EXPECT_GT(b.w, 0) << what;
    EXPECT_GT(b.h, 0) << what;
    EXPECT_GE(b.x, 0) << what;
    EXPECT_GE(b.y, 0) << what;
    EXPECT_LE(b.x + b.w, m->viewport_width + 0.5) << what << " leaves the viewport";
  };
  const auto faults = m->Of("#timeline .fault-mark");
  ASSERT_FALSE(faults.empty()) << "no fault drawn in " << page;
  for (const auto& b : faults) inside(b, "fault marker");
  EXPECT_GE(m->Of("#timeline .attempt").size(), 2u) << "the attempts before and after the fault";
  for (const auto& p : phases) {
    for (const std::string where : {"#timeline .", ".breakdown ."}) {
      const auto boxes = m->Of(where + p);
      EXPECT_FALSE(boxes.empty()) << where << p << " not drawn";
      for (const auto& b : boxes) inside(b, where + p);
    }
  }
  // The fault's colour where the marker is, in the pixels Chromium painted.
  const Box& mark = faults.front();
  ASSERT_LT(mark.y + mark.h, 1000) << "the fault marker is below the screenshot";
  const std::string png = work_dir + "/page.png";
  auto shot = RunChromium(work_dir + "/profile-shot", {"--screenshot=" + png, "file://" + page});
  ASSERT_EQ(shot.exit_code, 0) << shot.err;
  auto img = DecodePng(png);
  ASSERT_TRUE(img) << png << " is not a PNG this test reads";
  const int red = CountColour(*img, mark, 0xd62728);
  EXPECT_GT(red, static_cast<int>(mark.w * mark.h / 2))
      << "the fault marker's box at " << mark.x << "," << mark.y << " is not painted red";
  // ... and not everywhere: the page's top-left corner is white.
  EXPECT_EQ(CountColour(*img, Box{"", 0, 0, 10, 10}, 0xd62728), 0);
}

}  // namespace ftrun::testing
