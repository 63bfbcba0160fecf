// Certificates for TLS tests, made at test time with the openssl CLI.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kvdepot::test {

// A self-signed certificate (so its own CA) for 127.0.0.1 and localhost, with its key: the PEM
// files DIR/NAME.crt and DIR/NAME.key. Returns DIR/NAME.
inline std::string MakeSelfSignedCert(const std::filesystem::path& dir, const std::string& name) {
  const std::string base = (dir / name).string();
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
      base + ".key -out " + base + ".crt >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return base;
}

}  // namespace kvdepot::test
