// kvdepot: the command-line tool (see `kvdepot help`).
#include <iostream>

#include "kvdepot/cli/cli.h"

int main(int argc, char** argv) {
  return kvdepot::cli::RunCli(argc, argv, std::cout, std::cerr);
}
