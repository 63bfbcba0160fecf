// Uses each library of the installed SDK once, through its public headers only: the codec
// (encode and unpack a hack-int2 chunk), the client (a connection refused with a Status, a
// prompt's chunk keys and anchors), and with CUDA the kernels' API (a decode call rejected before
// it touches a device). Prints one line per check; exit status 0 when all hold.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kvdepot/client/client.h"
#include "kvdepot/codec/container.h"
#include "kvdepot/codec/hack.h"
#include "kvdepot/codec/tensor.h"
#include "kvdepot/kvdepot.h"
#if SDK_CONSUMER_CUDA
#include "kvdepot/cuda/hack.h"
#endif

namespace {

bool Check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  return ok;
}

}  // namespace

int main() {
  using namespace kvdepot;
  bool ok = true;

  const KvTensor kv = KvTensor::Zeros(DType::kFloat16, {2, 256, 4, 64});
  Result<std::vector<std::byte>> encoded = EncodeHack(kv.view());
  ok &= Check(encoded.ok(), "EncodeHack: " + encoded.status().ToString());
  if (encoded.ok()) {
    Result<ContainerView> view = ParseContainer(*encoded);
    Result<HackChunk> chunk = view.ok() ? UnpackHack(*view) : Result<HackChunk>(view.status());
    ok &= Check(chunk.ok() && chunk->shape.tokens == 256,
                "UnpackHack of " + std::to_string(encoded->size()) + " bytes");
  }

  client::ClientOptions options;
  options.address = "unix:/nonexistent/kvdepot-sdk-consumer.sock";
  auto connection = client::Connection::Connect(options);
  ok &= Check(!connection.ok(), "Connect to no daemon fails: " + connection.status().ToString());

  // A prompt's chunk keys and group anchors, as every SDK's prompt-level calls place them.
  Namespace ns;
  ns.model = "sdk-consumer";
  ns.chunk_tokens = 4;
  const std::vector<std::uint32_t> tokens(10, 7);  // 2 full chunks and a partial one
  Result<client::PrefixChain> chain = client::MakePrefixChain(ns, tokens, 8);
  ok &= Check(chain.ok() && chain->wire.size() == 2 && chain->placement.size() == 2 &&
                  chain->placement[1] == chain->wire[0],
              "MakePrefixChain: 2 chunks, both placed by chunk 0");

  kvdepot_client* c_client = nullptr;
  const int opened = kvdepot_open(options.address.c_str(), 1000, &c_client);
  const int pinged = opened == 0 ? kvdepot_ping(c_client) : 0;
  ok &= Check(opened == 0 && pinged != 0,
              std::string("C API: kvdepot_ping without a daemon fails: ") +
                  (c_client != nullptr ? kvdepot_last_error(c_client) : "no client"));
  kvdepot_close(c_client);

#if SDK_CONSUMER_CUDA
  cuda::HackKvCache cache;
  cache.layers = 1;
  cache.kv_heads = 8;
  cache.head_dim = 128;
  cuda::HackDecodeArgs args;
  args.q_heads = 64;
  cuda::HackAttentionWorkspace workspace;  // not created: the call must refuse it
  const Status decode = cuda::EnqueueHackDecodeAttention(cache, args, workspace, nullptr);
  ok &= Check(decode.code() == StatusCode::kInvalidArgument,
              "EnqueueHackDecodeAttention without a workspace: " + decode.ToString());
#endif
  return ok ? 0 : 1;
}
