// A program with one deliberate bug, for scripts/sanitize.sh: before the tests run under a
// sanitizer, the script checks that this bug is reported with the same options and
// suppressions, so that a silent run means "no bug found" and not "the sanitizer saw nothing".
//   sanitizer_canary race             a data race between the loop and another thread
//                                     (the agent's pattern: a handler posted to an io_context)
//   sanitizer_canary use-after-free   a heap read after delete
//   sanitizer_canary overflow         a signed integer overflow
// Built only in sanitizer builds. Exits 0 when the sanitizer stays silent.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sanitizer_canary race|use-after-free|overflow\n");
    return 2;
  }
  if (std::strcmp(argv[1], "race") == 0) {
    boost::asio::io_context io;
    int shared = 0;
    boost::asio::post(io, [&shared] { shared = 1; });
    std::thread loop([&io] { io.run(); });
    shared = 2;  // not ordered with the handler's write
    loop.join();
    return shared == 3;
  }
  if (std::strcmp(argv[1], "use-after-free") == 0) {
    volatile int* p = new int[4]{1, 2, 3, 4};
    delete[] p;
    return p[argc] == 42;
  }
  if (std::strcmp(argv[1], "overflow") == 0) {
    volatile int x = INT_MAX;
    int y = x + argc;
    return y == 0;
  }
  std::fprintf(stderr, "sanitizer_canary: unknown bug '%s'\n", argv[1]);
  return 2;
}
