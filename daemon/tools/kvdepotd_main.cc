// kvdepotd: the kvdepot cache server. See `kvdepotd --help` and config/kvdepot.yaml.
#include "kvdepot/daemon/daemon_main.h"

int main(int argc, char** argv) {
  return kvdepot::daemon::DaemonMain(argc, argv);
}
