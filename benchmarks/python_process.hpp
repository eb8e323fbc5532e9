#pragma once
// A Python process of the venv running one of the benchmarks' peer scripts, driven a line at a
// time over two pipes: the C++ side writes a request, the script answers one line. The venv's
// Python is FTOPT_PYTHON when set, else the one CMake was configured with.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace ftopt::bench {

class PythonProcess {
public:
  PythonProcess(const std::string& default_python, const std::string& script, const std::vector<std::string>& args = {}) {
    const char* python = std::getenv("FTOPT_PYTHON");
    exe_ = python ? python : default_python;
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("python peer: pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("python peer: fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      std::vector<char*> argv{const_cast<char*>(exe_.c_str()), const_cast<char*>(script.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(exe_.c_str(), argv.data());
      std::perror(("python peer: cannot run " + exe_).c_str());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
  }
  ~PythonProcess() {
    std::fputs("quit\n", in_);
    std::fclose(in_);
    std::fclose(out_);
    waitpid(pid_, nullptr, 0);
  }
  PythonProcess(const PythonProcess&) = delete;
  PythonProcess& operator=(const PythonProcess&) = delete;

  /// Sends one line and returns the answer's line (without its line break).
  std::string ask(const std::string& line) {
    std::fprintf(in_, "%s\n", line.c_str());
    std::fflush(in_);
    char buffer[256];
    if (!std::fgets(buffer, sizeof buffer, out_)) return "(no answer: the process ended)";
    std::string answer(buffer);
    while (!answer.empty() && (answer.back() == '\n' || answer.back() == '\r')) answer.pop_back();
    return answer;
  }
  const std::string& python() const { return exe_; }

private:
  std::string exe_;
  pid_t pid_ = -1;
  std::FILE* in_ = nullptr;
  std::FILE* out_ = nullptr;
};

} // namespace ftopt::bench
