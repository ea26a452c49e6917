// Golden IR files: every tests/golden/ir/*.vfir must parse, verify, and print back to itself
// (comment lines starting with "//" are the file's header and are not part of the graph).
// VERIFUSE_UPDATE_GOLDEN=1 rewrites a file with the printer's output for review.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "verifuse/ir/graph.h"

namespace fs = std::filesystem;

namespace verifuse::ir {
namespace {

std::vector<fs::path> goldenFiles() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/ir")) {
    if (entry.path().extension() == ".vfir") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void splitHeader(const std::string& content, std::string& header, std::string& body) {
  std::istringstream in(content);
  std::string line;
  bool inHeader = true;
  while (std::getline(in, line)) {
    if (inHeader && line.rfind("//", 0) == 0) {
      header += line + "\n";
    } else {
      inHeader = false;
      body += line + "\n";
    }
  }
}

TEST(GoldenIrTest, EveryFileRoundTrips) {
  auto files = goldenFiles();
  ASSERT_GE(files.size(), 3u) << "golden files missing: the test would pass vacuously";
  const bool update = std::getenv("VERIFUSE_UPDATE_GOLDEN") != nullptr;
  for (const auto& path : files) {
    SCOPED_TRACE(path.filename().string());
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string header, body;
    splitHeader(ss.str(), header, body);
    auto parsed = parseGraph(body);
    ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
    EXPECT_TRUE(verifyGraph(*parsed).isOk());
    const std::string printed = printGraph(*parsed);
    if (update && printed != body) {
      std::ofstream(path) << header << printed;
      continue;
    }
    EXPECT_EQ(printed, body);
  }
}

}  // namespace
}  // namespace verifuse::ir
