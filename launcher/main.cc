// ftrun: a fault-tolerant drop-in for torchrun.
#include <string>
#include <vector>

#include "launcher/cli/torchrun_main.h"

int main(int argc, char** argv) {
  return ftrun::launcher::RunTorchrun(std::vector<std::string>(argv + 1, argv + argc));
}
