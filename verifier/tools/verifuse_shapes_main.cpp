// verifuse-shapes: standalone (torch-free) shape-program analysis, JSON out.
//   verifuse-shapes FILE.smt2... [--redundant] [--mode prefix|others] [--timeout-ms N]
//                   [--query-timeout-ms N] [--no-hints] [--no-reasoning]
// Prints one JSON object per file (a JSON array when several files are given). Exit status: 0 when
// every file was analyzed, 1 when a file could not be read or parsed (error on stderr), 2 on usage.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "verifuse/shapes/shape_analysis.h"

namespace {
void usage() {
  std::cerr << "usage: verifuse-shapes FILE.smt2... [--redundant] [--mode prefix|others] [--timeout-ms N]\n"
               "                       [--query-timeout-ms N] [--no-hints] [--no-reasoning] [--version]\n";
}
bool parseInt(const std::string& s, int* out) {
  try {
    size_t pos = 0;
    int v = std::stoi(s, &pos);
    if (pos != s.size() || v < 0) return false;
    *out = v;
    return true;
  } catch (...) {
    return false;
  }
}
}  // namespace

int main(int argc, char** argv) {
  verifuse::shapes::ShapeOptions opt;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "verifuse-shapes: " << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--redundant") {
      opt.redundant = true;
    } else if (a == "--json") {
      // JSON is the only output format of this tool.
    } else if (a == "--mode") {
      std::string m = value("--mode");
      if (m == "prefix") opt.mode = verifuse::shapes::RedundancyMode::kPrefix;
      else if (m == "others") opt.mode = verifuse::shapes::RedundancyMode::kOthers;
      else {
        std::cerr << "verifuse-shapes: --mode must be 'prefix' or 'others'\n";
        return 2;
      }
    } else if (a == "--timeout-ms") {
      if (!parseInt(value("--timeout-ms"), &opt.timeout_ms)) { usage(); return 2; }
    } else if (a == "--query-timeout-ms") {
      if (!parseInt(value("--query-timeout-ms"), &opt.query_timeout_ms)) { usage(); return 2; }
    } else if (a == "--no-hints") {
      opt.use_hints = false;
    } else if (a == "--no-reasoning") {
      opt.use_reasoning = false;
    } else if (a == "--version") {
      std::cout << "verifuse-shapes (z3 " << verifuse::shapes::z3Version() << ")\n";
      return 0;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "verifuse-shapes: unknown option '" << a << "'\n";
      usage();
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    usage();
    return 2;
  }
  int rc = 0;
  std::vector<std::string> outs;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::cerr << "verifuse-shapes: " << f << ": cannot open file\n";
      rc = 1;
      continue;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto rep = verifuse::shapes::analyzeShapeProgram(ss.str(), opt);
    if (!rep.isOk()) {
      std::cerr << "verifuse-shapes: " << f << ": " << rep.status().message() << "\n";
      rc = 1;
      continue;
    }
    outs.push_back(verifuse::shapes::toJson(rep.value(), f));
  }
  if (files.size() == 1) {
    if (!outs.empty()) std::cout << outs[0] << "\n";
  } else {
    std::cout << "[";
    for (size_t i = 0; i < outs.size(); ++i) std::cout << (i ? ",\n " : "") << outs[i];
    std::cout << "]\n";
  }
  return rc;
}
