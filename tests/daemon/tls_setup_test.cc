// The server's TLS set-up errors name the setting, the file and what is wrong with it (issue 19:
// a missing certificate used to say only "asio.ssl error", OpenSSL 3's text for a system error).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "../common/test_cert.h"
#include "kvdepot/daemon/host_tier.h"
#include "kvdepot/daemon/server.h"
#include "kvdepot/daemon/store.h"

namespace kvdepot::daemon {
namespace {

namespace fs = std::filesystem;

class TlsSetupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvdepot-tls-setup-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Server::Start's status with TLS from `cert` and `key`.
  Status StartWith(const std::string& cert, const std::string& key) {
    HostTier tier(HostTierOptions::With(8ull << 20));
    Store store(tier, nullptr);
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.io_threads = 1;
    o.tls = TlsOptions{cert, key, ""};
    Server server(o, store);
    Status s = server.Start();
    if (s.ok()) server.Stop();
    return s;
  }
  // A self-signed certificate and its key: PEM files NAME.crt and NAME.key in the test's directory.
  std::string MakeCert(const std::string& name) { return test::MakeSelfSignedCert(dir_, name); }
  fs::path dir_;
};

TEST_F(TlsSetupTest, MissingCertificateSaysSo) {
  const std::string cert = (dir_ / "missing.crt").string();
  const Status s = StartWith(cert, (dir_ / "missing.key").string());
  EXPECT_EQ(s.message(), "tls.cert_file " + cert + ": No such file or directory");
}

TEST_F(TlsSetupTest, MissingKeySaysSo) {
  const std::string base = MakeCert("server");
  const std::string key = (dir_ / "missing.key").string();
  const Status s = StartWith(base + ".crt", key);
  EXPECT_EQ(s.message(), "tls.key_file " + key + ": No such file or directory");
}

TEST_F(TlsSetupTest, KeyOfAnotherCertificateSaysSo) {
  const std::string base = MakeCert("server");
  const std::string other = MakeCert("other");
  const Status s = StartWith(base + ".crt", other + ".key");
  EXPECT_EQ(s.message(), "tls.key_file " + other + ".key: key values mismatch");
}

TEST_F(TlsSetupTest, GarbageCertificateSaysSo) {
  const std::string cert = (dir_ / "junk.crt").string();
  std::ofstream(cert) << "junk\n";
  const Status s = StartWith(cert, cert);
  EXPECT_EQ(s.message().rfind("tls.cert_file " + cert + ": ", 0), 0u) << s.message();
  EXPECT_EQ(s.message().find("asio.ssl error"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvdepot::daemon
