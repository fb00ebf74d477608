// TLS for gRPC and for UCX's bootstrap (which runs over gRPC): certificates made for the test
// by deploy/tls/make_certs.sh (a CA, the server's certificate for 127.0.0.1, a client's), and
// another CA that signed none of them.
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/call.h"
#include "tests/testing/status_assertions.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/transports.h"
#include "transport/transport.h"

namespace hetps::transport {
namespace {

class EchoHandler final : public RequestHandler {
 public:
  void HandleRequest(Request request, ReplyCallback reply) override {
    Response response;
    response.header = request.header;
    reply(std::move(response));
  }
};

class TlsTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::ScopedTempDir();
    // Two private CAs: the cluster's (in the directory itself), and another that signed none
    // of its certificates (in other/).
    const std::string script = testing::SourcePath("deploy/tls/make_certs.sh");
    const std::string d = dir_->path();
    made_ = std::system(absl::StrCat("(", script, " --days 2 ", d, " 127.0.0.1 && ", script,
                                     " --days 2 ", d, "/other) >", d, "/openssl.log 2>&1")
                            .c_str()) == 0;
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    ASSERT_TRUE(made_) << "openssl could not make the test certificates: "
                       << testing::ReadFile(File("openssl.log"));
  }
  void TearDown() override {
    if (listener_ != nullptr) listener_->Shutdown();
  }

  static std::string File(const std::string& name) { return dir_->path() + "/" + name; }

  void Listen(bool require_client_certificates) {
    TransportOptions options;
    options.tls_cert_file = File("server.pem");
    options.tls_key_file = File("server.key");
    if (require_client_certificates) options.tls_ca_file = File("ca.pem");
    server_ = testing::NewTestTransport(GetParam(), options);
    auto listener = server_->Listen("127.0.0.1:0", &handler_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
  }

  // An echo over a new connection of a client with `options`: OK, or why not.
  absl::Status EchoAs(const TransportOptions& options) {
    std::shared_ptr<Transport> client = testing::NewTestTransport(GetParam(), options);
    auto connection = client->Connect(listener_->address(), absl::Now() + absl::Seconds(3));
    if (!connection.ok()) return connection.status();
    Request request;
    request.method = 1;
    request.header = "over tls";
    request.deadline = absl::Now() + absl::Seconds(5);
    absl::StatusOr<Response> response = testing::CallAndWait(**connection, std::move(request));
    (*connection)->Shutdown();
    if (response.ok() && response->header != "over tls") return absl::InternalError("garbled");
    return response.status();
  }

  static TransportOptions Client(const std::string& ca, bool with_certificate) {
    TransportOptions options;
    if (!ca.empty()) options.tls_ca_file = File(ca);
    if (with_certificate) {
      options.tls_cert_file = File("client.pem");
      options.tls_key_file = File("client.key");
    }
    return options;
  }

  static testing::ScopedTempDir* dir_;
  static bool made_;
  EchoHandler handler_;
  std::shared_ptr<Transport> server_;
  std::unique_ptr<Listener> listener_;
};

testing::ScopedTempDir* TlsTest::dir_ = nullptr;
bool TlsTest::made_ = false;

TEST_P(TlsTest, OnlyAClientThatTrustsTheServersCaConnects) {
  Listen(/*require_client_certificates=*/false);
  EXPECT_OK(EchoAs(Client("ca.pem", false)));
  EXPECT_FALSE(EchoAs(Client("other/ca.pem", false)).ok()) << "a CA that signed nothing here";
  EXPECT_FALSE(EchoAs(Client("", false)).ok()) << "a plaintext client";
  EXPECT_TRUE(EchoAs(Client("ca.pem", false)).ok()) << "the server still serves";
}

TEST_P(TlsTest, AServerThatRequiresClientCertificatesRefusesClientsWithout) {
  Listen(/*require_client_certificates=*/true);
  EXPECT_OK(EchoAs(Client("ca.pem", true)));
  EXPECT_FALSE(EchoAs(Client("ca.pem", false)).ok()) << "no client certificate";
}

TEST_P(TlsTest, UnreadableFilesAreAnErrorNotPlaintext) {
  TransportOptions options;
  options.tls_cert_file = File("missing.pem");
  options.tls_key_file = File("server.key");
  EXPECT_EQ(testing::NewTestTransport(GetParam(), options)
                ->Listen("127.0.0.1:0", &handler_)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  Listen(false);
  TransportOptions client;
  client.tls_ca_file = File("missing.pem");
  EXPECT_EQ(EchoAs(client).code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, TlsTest, ::testing::ValuesIn(testing::TransportsUnderTest({})),
                         [](const auto& info) { return testing::TestName(info.param); });

}  // namespace
}  // namespace hetps::transport
