// The README's code blocks marked `<!-- readme-example: NAME -->` run as they stand: the C++ one
// is compiled against libiris and run, the Python one run with the binding, both against a real
// irisd found through $IRIS_SOCKET. (The torch block runs in scripts/gpu-run.sh on a GPU.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

// The fenced block after the marker `<!-- readme-example: name -->`; empty when missing.
std::string readme_block(const std::string& name) {
  std::ifstream in(std::string(IRIS_TEST_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const auto marker = readme.find("<!-- readme-example: " + name + " -->");
  if (marker == std::string::npos) return "";
  const auto open = readme.find('\n', readme.find("```", marker)) + 1;
  const auto close = readme.find("\n```", open);
  return readme.substr(open, close - open + 1);
}

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = "/tmp/iris-readme-" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path) << content;
  return path;
}

// Builds the README's block `name` (written to `file`) with `compiler_and_flags` against
// `library` and runs it against a fresh irisd; expects it to exit 0 and print `expected`.
void build_run_and_expect(const std::string& name, const std::string& file,
                          const std::string& compiler_and_flags, const char* library,
                          const std::string& expected) {
  const std::string code = readme_block(name);
  ASSERT_FALSE(code.empty()) << "README.md lost its " << name << " example";
  const std::string source = write_temp(file, code);
  const std::string binary = source + ".bin";
  const auto build = run_program(
      {"/bin/sh", "-c",
       compiler_and_flags + " \"$1\" -o \"$2\" \"$3\" -Wl,-rpath,\"$(dirname \"$3\")\" 2>&1",
       IRIS_TEST_SOURCE_DIR, source, binary, library});
  ASSERT_EQ(build.exit_code, 0) << build.output;
  DaemonProcess daemon;
  std::vector<std::string> argv = {"/usr/bin/env", "IRIS_SOCKET=" + daemon.socket()};
  // Sanitizer builds: the library is instrumented, the example is not; the runtime goes first.
  if (const char* preload = std::getenv("IRIS_TEST_PRELOAD"))
    argv.push_back(std::string("LD_PRELOAD=") + preload);
  argv.push_back(binary);
  const auto run = run_program(argv);
  std::remove(source.c_str());
  std::remove(binary.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.output << daemon.log();
  EXPECT_NE(run.output.find(expected), std::string::npos) << run.output;
}

TEST(Readme, CppExampleCompilesAndRuns) {
  build_run_and_expect(
      "cpp", "example.cpp",
      "c++ -std=c++17 -Wall -Werror -I\"$0\"/client/include -I\"$0\"/shared/include",
      IRIS_TEST_LIBIRIS, "rank 0 gathered 1048576 bytes, last 42");
}

TEST(Readme, NcclExampleCompilesAgainstTheLibraryAndRuns) {
  build_run_and_expect("nccl", "nccl_example.c",
                       "cc -std=c11 -Wall -Werror -I\"$0\"/client/nccl/include", IRIS_TEST_LIBNCCL,
                       "nccl on irisd: rank 1 element 1023 = 3.0");
}

TEST(Readme, PythonExampleRuns) {
  const std::string code = readme_block("python");
  ASSERT_FALSE(code.empty()) << "README.md lost its Python example";
  const std::string script = write_temp("example.py", code);
  DaemonProcess daemon;
  std::vector<std::string> argv = {
      "/usr/bin/env", "IRIS_SOCKET=" + daemon.socket(),
      std::string("IRIS_LIBRARY=") + IRIS_TEST_LIBIRIS,
      std::string("PYTHONPATH=") + IRIS_TEST_SOURCE_DIR + "/client/python"};
  if (const char* preload = std::getenv("IRIS_TEST_PRELOAD"))
    argv.insert(argv.end(), {std::string("LD_PRELOAD=") + preload, "ASAN_OPTIONS=detect_leaks=0"});
  argv.insert(argv.end(), {"/bin/sh", "-c", "python3 \"$0\" 2>&1", script});
  const auto run = run_program(argv);
  std::remove(script.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.output << daemon.log();
}

}  // namespace
}  // namespace iris::testing
