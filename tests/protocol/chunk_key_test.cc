#include "kvdepot/protocol/chunk_key.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "kvdepot/protocol/sha256.h"

namespace kvdepot {
namespace {

// The namespace and tokens of the golden vector in docs/format.md §2.
Namespace GoldenNamespace() {
  Namespace ns;
  ns.model = "meta-llama/Llama-3.1-8B-Instruct";
  ns.tp_world_size = 2;
  ns.tp_rank = 1;
  ns.dtype = DType::kBFloat16;
  ns.codec = CodecId::kCacheGen;
  ns.tenant = "acme";
  ns.salt = "s3cret";
  ns.chunk_tokens = 256;
  return ns;
}

// token[i] = i * 2654435761 mod 2^32: every byte of the u32 encoding varies.
std::vector<std::uint32_t> GoldenTokens(std::size_t count) {
  std::vector<std::uint32_t> tokens(count);
  for (std::size_t i = 0; i < count; ++i) {
    tokens[i] = static_cast<std::uint32_t>(i * 2654435761u);
  }
  return tokens;
}

// Computed independently with Python's hashlib from the spec (see docs/format.md §2).
constexpr const char* kGoldenNamespaceDigest =
    "2464864f1f3642583b7154cc1f55fdba00ec42490e0cf8a64f0c78b8dbce40d2";
constexpr const char* kGoldenKeys[] = {
    "2464864f1f3642583b7154cc1f55fdba"
    "b309721d2599fd9a3b1e56859f44ad501e3beda2766d5254a2aa5da3a683b66e",
    "2464864f1f3642583b7154cc1f55fdba"
    "c49a5bea2687c39dd7022a67b0de2696cfbd165a8ed34b1e338ff0b652cb43a1",
    "2464864f1f3642583b7154cc1f55fdba"
    "eff704d18b5f2b181220c5abf6907f9b0165743fc8606adbf840eb609d4a0e46",
};

std::vector<ChunkKey> KeysOrDie(const Namespace& ns, std::span<const std::uint32_t> tokens,
                                bool include_partial_last = true) {
  Result<std::vector<ChunkKey>> keys = ChunkKeysForTokens(ns, tokens, include_partial_last);
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return keys.ok() ? *keys : std::vector<ChunkKey>{};
}

Namespace ValidNamespace() {
  Namespace ns;
  ns.model = "m";
  return ns;
}

// ---- Namespace ---------------------------------------------------------------------------------

TEST(NamespaceTest, DefaultsWithAModelAreValid) {
  EXPECT_TRUE(ValidNamespace().Validate().ok());
}

TEST(NamespaceTest, ValidateNamesTheBadField) {
  struct Case {
    const char* what;
    std::function<void(Namespace&)> mutate;
    std::string message;  // empty: valid
  };
  const std::vector<Case> cases = {
      {"empty model", [](Namespace& ns) { ns.model.clear(); }, "namespace: model is empty"},
      {"model 256 bytes", [](Namespace& ns) { ns.model = std::string(256, 'x'); }, ""},
      {"model 257 bytes", [](Namespace& ns) { ns.model = std::string(257, 'x'); },
       "namespace: model is 257 bytes, over the limit of 256"},
      {"model newline", [](Namespace& ns) { ns.model = "abc\ndef"; },
       "namespace: model has control character 0x0a at byte 3"},
      {"model DEL", [](Namespace& ns) { ns.model.assign(1, '\x7f'); },
       "namespace: model has control character 0x7f at byte 0"},
      {"model NUL", [](Namespace& ns) { ns.model = std::string("a\0b", 3); },
       "namespace: model has control character 0x00 at byte 1"},
      {"model UTF-8", [](Namespace& ns) { ns.model = "mod\xc3\xa8le"; }, ""},
      {"tp_world_size 0", [](Namespace& ns) { ns.tp_world_size = 0; },
       "namespace: tp_world_size = 0 is out of range [1, 65536]"},
      {"tp_world_size 65537", [](Namespace& ns) { ns.tp_world_size = 65537; },
       "namespace: tp_world_size = 65537 is out of range [1, 65536]"},
      {"tp 65535/65536",
       [](Namespace& ns) {
         ns.tp_world_size = 65536;
         ns.tp_rank = 65535;
       },
       ""},
      {"tp_rank == world",
       [](Namespace& ns) {
         ns.tp_world_size = 4;
         ns.tp_rank = 4;
       },
       "namespace: tp_rank = 4 must be below tp_world_size = 4"},
      {"dtype 0", [](Namespace& ns) { ns.dtype = static_cast<DType>(0); },
       "namespace: dtype = 0 is not a valid dtype"},
      {"dtype 4", [](Namespace& ns) { ns.dtype = static_cast<DType>(4); },
       "namespace: dtype = 4 is not a valid dtype"},
      {"codec 3", [](Namespace& ns) { ns.codec = static_cast<CodecId>(3); },
       "namespace: codec = 3 is not a valid codec id"},
      {"tenant 128 bytes", [](Namespace& ns) { ns.tenant = std::string(128, 't'); }, ""},
      {"tenant 129 bytes", [](Namespace& ns) { ns.tenant = std::string(129, 't'); },
       "namespace: tenant is 129 bytes, over the limit of 128"},
      {"tenant tab", [](Namespace& ns) { ns.tenant = "a\tb"; },
       "namespace: tenant has control character 0x09 at byte 1"},
      {"salt any bytes", [](Namespace& ns) { ns.salt = std::string("\0\n\xff", 3); }, ""},
      {"salt 256 bytes", [](Namespace& ns) { ns.salt = std::string(256, 's'); }, ""},
      {"salt 257 bytes", [](Namespace& ns) { ns.salt = std::string(257, 's'); },
       "namespace: salt is 257 bytes, over the limit of 256"},
      {"chunk_tokens 0", [](Namespace& ns) { ns.chunk_tokens = 0; },
       "namespace: chunk_tokens = 0 is out of range [1, 65536]"},
      {"chunk_tokens 65537", [](Namespace& ns) { ns.chunk_tokens = 65537; },
       "namespace: chunk_tokens = 65537 is out of range [1, 65536]"},
      {"chunk_tokens 1", [](Namespace& ns) { ns.chunk_tokens = 1; }, ""},
      {"chunk_tokens 65536", [](Namespace& ns) { ns.chunk_tokens = 65536; }, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Namespace ns = ValidNamespace();
    c.mutate(ns);
    const Status status = ns.Validate();
    if (c.message.empty()) {
      EXPECT_TRUE(status.ok()) << status.ToString();
    } else {
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(status.message(), c.message);
    }
  }
}

TEST(NamespaceTest, SaltIsNeverPrinted) {
  Namespace ns = GoldenNamespace();
  EXPECT_EQ(ns.Label().find("s3cret"), std::string::npos);
  ns.salt = std::string(300, 'Q');
  EXPECT_EQ(ns.Validate().message().find("QQQ"), std::string::npos);
}

TEST(NamespaceTest, Label) {
  EXPECT_EQ(GoldenNamespace().Label(),
            "model=meta-llama/Llama-3.1-8B-Instruct tp=1/2 dtype=bf16 codec=cachegen chunk=256 "
            "tenant=acme");
  EXPECT_EQ(ValidNamespace().Label(), "model=m tp=0/1 dtype=fp16 codec=raw chunk=256 tenant=");
}

TEST(NamespaceTest, GoldenDigestAndId) {
  const Namespace ns = GoldenNamespace();
  ASSERT_TRUE(ns.Validate().ok());
  EXPECT_EQ(ns.Digest().ToHex(), kGoldenNamespaceDigest);
  EXPECT_EQ(ns.Id().ToHex(), std::string(kGoldenNamespaceDigest).substr(0, 32));
}

// Every field, and the length prefixes, separate namespaces.
std::vector<Namespace> DistinctNamespaces() {
  std::vector<Namespace> all;
  auto variant = [&](const std::function<void(Namespace&)>& mutate) {
    Namespace ns = GoldenNamespace();
    mutate(ns);
    EXPECT_TRUE(ns.Validate().ok()) << ns.Label();
    all.push_back(ns);
  };
  variant([](Namespace&) {});
  variant([](Namespace& ns) { ns.model = "meta-llama/Llama-3.1-70B-Instruct"; });
  variant([](Namespace& ns) { ns.tp_world_size = 4; });
  variant([](Namespace& ns) { ns.tp_rank = 0; });
  variant([](Namespace& ns) { ns.dtype = DType::kFloat16; });
  variant([](Namespace& ns) { ns.codec = CodecId::kRaw; });
  variant([](Namespace& ns) { ns.chunk_tokens = 128; });
  variant([](Namespace& ns) { ns.tenant = "acme2"; });
  variant([](Namespace& ns) { ns.tenant.clear(); });
  variant([](Namespace& ns) { ns.salt = "s3creT"; });
  variant([](Namespace& ns) { ns.salt.clear(); });
  // Moving a byte across a field boundary changes the encoding (length prefixes).
  variant([](Namespace& ns) {
    ns.tenant = "acmes";
    ns.salt = "3cret";
  });
  return all;
}

TEST(NamespaceTest, EveryFieldChangesTheDigest) {
  std::set<std::string> digests;
  std::set<NamespaceId> ids;
  const std::vector<Namespace> all = DistinctNamespaces();
  for (const Namespace& ns : all) {
    digests.insert(ns.Digest().ToHex());
    ids.insert(ns.Id());
  }
  EXPECT_EQ(digests.size(), all.size());
  EXPECT_EQ(ids.size(), all.size());
}

// ---- ChunkKey and ChunkKeysForTokens -----------------------------------------------------------

TEST(ChunkKeyTest, GoldenVector) {
  const std::vector<std::uint32_t> tokens = GoldenTokens(600);  // 256 + 256 + 88
  const std::vector<ChunkKey> keys = KeysOrDie(GoldenNamespace(), tokens);
  ASSERT_EQ(keys.size(), 3u);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i].ToHex(), kGoldenKeys[i]) << "chunk " << i;
    EXPECT_EQ(keys[i].ns(), GoldenNamespace().Id());
  }
}

TEST(ChunkKeyTest, SmallGoldenVector) {
  const std::vector<std::uint32_t> tokens = {1, 2, 3};
  const std::vector<ChunkKey> keys = KeysOrDie(ValidNamespace(), tokens);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].ToHex(),
            "6ec8a8d6cc1bbc471232558193f70b33"
            "a74e37fefaeb850c155dce61be75c6800b60ab1a0ebf666fdbd5de066a85eec0");
}

TEST(ChunkKeyTest, KeysOfAPrefixArePrefixOfKeys) {
  const Namespace ns = GoldenNamespace();
  const std::vector<std::uint32_t> tokens = GoldenTokens(1300);
  const std::vector<ChunkKey> all = KeysOrDie(ns, tokens);
  ASSERT_EQ(all.size(), 6u);
  for (std::size_t length : {0u, 1u, 255u, 256u, 257u, 512u, 600u, 1024u, 1280u, 1300u}) {
    SCOPED_TRACE(length);
    const std::span<const std::uint32_t> prefix(tokens.data(), length);
    const std::vector<ChunkKey> full_only = KeysOrDie(ns, prefix, false);
    ASSERT_EQ(full_only.size(), length / 256);
    EXPECT_TRUE(std::equal(full_only.begin(), full_only.end(), all.begin()));
  }
}

TEST(ChunkKeyTest, ChangingOneTokenChangesThatChunkAndLaterOnly) {
  const Namespace ns = GoldenNamespace();
  const std::vector<std::uint32_t> tokens = GoldenTokens(5 * 256);
  const std::vector<ChunkKey> before = KeysOrDie(ns, tokens);
  for (std::size_t changed_chunk = 0; changed_chunk < 5; ++changed_chunk) {
    SCOPED_TRACE(changed_chunk);
    std::vector<std::uint32_t> edited = tokens;
    edited[changed_chunk * 256 + 100] ^= 1;
    const std::vector<ChunkKey> after = KeysOrDie(ns, edited);
    ASSERT_EQ(after.size(), before.size());
    for (std::size_t i = 0; i < before.size(); ++i) {
      if (i < changed_chunk) {
        EXPECT_EQ(after[i], before[i]) << "chunk " << i;
      } else {
        EXPECT_NE(after[i], before[i]) << "chunk " << i;
      }
    }
  }
}

TEST(ChunkKeyTest, EveryNamespaceFieldChangesTheKeys) {
  const std::vector<std::uint32_t> tokens = GoldenTokens(128);  // one chunk for every chunk_tokens
  std::set<ChunkKey> keys;
  std::set<std::string> chains;  // the 32-byte h(0), without the namespace prefix
  const std::vector<Namespace> all = DistinctNamespaces();
  for (const Namespace& ns : all) {
    const std::vector<ChunkKey> k = KeysOrDie(ns, tokens);
    ASSERT_EQ(k.size(), 1u);
    EXPECT_EQ(k[0].ns(), ns.Id());
    keys.insert(k[0]);
    chains.insert(k[0].ToHex().substr(32));
  }
  EXPECT_EQ(keys.size(), all.size());
  EXPECT_EQ(chains.size(), all.size());
}

TEST(ChunkKeyTest, PartialLastChunk) {
  const Namespace ns = GoldenNamespace();
  const std::vector<std::uint32_t> tokens = GoldenTokens(600);
  const std::vector<ChunkKey> with = KeysOrDie(ns, tokens, true);
  const std::vector<ChunkKey> without = KeysOrDie(ns, tokens, false);
  ASSERT_EQ(with.size(), 3u);
  ASSERT_EQ(without.size(), 2u);
  EXPECT_TRUE(std::equal(without.begin(), without.end(), with.begin()));

  // The partial chunk hashes exactly its 88 ids, chained on chunk 1.
  PrefixHasher hasher(ns);
  const std::span<const std::uint32_t> all(tokens);
  ASSERT_TRUE(hasher.Next(all.subspan(0, 256)).ok());
  ASSERT_TRUE(hasher.Next(all.subspan(256, 256)).ok());
  Result<ChunkKey> partial = hasher.Next(all.subspan(512));
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(*partial, with[2]);

  // Exact multiples and short or empty sequences.
  EXPECT_EQ(KeysOrDie(ns, all.subspan(0, 512), true).size(), 2u);
  EXPECT_EQ(KeysOrDie(ns, all.subspan(0, 512), false).size(), 2u);
  EXPECT_EQ(KeysOrDie(ns, all.subspan(0, 100), true).size(), 1u);
  EXPECT_EQ(KeysOrDie(ns, all.subspan(0, 100), false).size(), 0u);
  EXPECT_TRUE(KeysOrDie(ns, {}, true).empty());
  EXPECT_TRUE(KeysOrDie(ns, {}, false).empty());

  // A partial chunk's key differs from the full chunk that extends it.
  const std::vector<ChunkKey> longer = KeysOrDie(ns, GoldenTokens(768));
  EXPECT_NE(longer[2], with[2]);
}

TEST(ChunkKeyTest, InvalidNamespaceIsRejected) {
  Namespace ns = GoldenNamespace();
  ns.tp_rank = 2;
  const std::vector<std::uint32_t> tokens = GoldenTokens(10);
  Result<std::vector<ChunkKey>> keys = ChunkKeysForTokens(ns, tokens);
  ASSERT_FALSE(keys.ok());
  EXPECT_EQ(keys.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(keys.status().message(), "namespace: tp_rank = 2 must be below tp_world_size = 2");
}

TEST(ChunkKeyTest, HexRoundTrip) {
  Result<ChunkKey> key = ChunkKey::FromHex(kGoldenKeys[0]);
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->ToHex(), kGoldenKeys[0]);
  EXPECT_EQ(key->ToHex().size(), 96u);
  EXPECT_EQ(key->ns(), GoldenNamespace().Id());

  std::string upper = kGoldenKeys[0];
  std::transform(upper.begin(), upper.end(), upper.begin(), [](char c) {
    return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  });
  Result<ChunkKey> from_upper = ChunkKey::FromHex(upper);
  ASSERT_TRUE(from_upper.ok()) << from_upper.status().ToString();
  EXPECT_EQ(*from_upper, *key);

  ChunkKey all_bytes;
  for (std::size_t i = 0; i < kChunkKeyBytes; ++i) {
    all_bytes.bytes[i] = static_cast<std::uint8_t>(i * 5 + 250);
  }
  Result<ChunkKey> again = ChunkKey::FromHex(all_bytes.ToHex());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, all_bytes);
}

TEST(ChunkKeyTest, HexErrors) {
  const std::string good = kGoldenKeys[0];
  struct Case {
    std::string hex;
    std::string message;
  };
  const Case cases[] = {
      {"", "chunk key: hex is 0 characters, expected 96"},
      {good.substr(1), "chunk key: hex is 95 characters, expected 96"},
      {good + "0", "chunk key: hex is 97 characters, expected 96"},
      {good.substr(0, 17) + "g" + good.substr(18),
       "chunk key: hex character 'g' at position 17 is not a hex digit"},
      {"x" + good.substr(1), "chunk key: hex character 'x' at position 0 is not a hex digit"},
      {good.substr(0, 95) + "\n",
       "chunk key: hex character 0x0a at position 95 is not a hex digit"},
      {good.substr(0, 40) + " " + good.substr(41),
       "chunk key: hex character ' ' at position 40 is not a hex digit"},
  };
  for (const Case& c : cases) {
    Result<ChunkKey> key = ChunkKey::FromHex(c.hex);
    ASSERT_FALSE(key.ok()) << c.hex;
    EXPECT_EQ(key.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(key.status().message(), c.message);
  }
}

TEST(ChunkKeyTest, FromBytes) {
  Result<ChunkKey> key = ChunkKey::FromHex(kGoldenKeys[1]);
  ASSERT_TRUE(key.ok());
  const auto bytes = std::as_bytes(std::span<const std::uint8_t>(key->bytes));
  Result<ChunkKey> copy = ChunkKey::FromBytes(bytes);
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(*copy, *key);

  Result<ChunkKey> short_key = ChunkKey::FromBytes(bytes.first(47));
  ASSERT_FALSE(short_key.ok());
  EXPECT_EQ(short_key.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(short_key.status().message(), "chunk key: 47 bytes, expected 48");
  EXPECT_FALSE(ChunkKey::FromBytes({}).ok());
}

TEST(ChunkKeyTest, OrderingAndHashing) {
  std::vector<ChunkKey> keys;
  for (const char* hex : kGoldenKeys) keys.push_back(*ChunkKey::FromHex(hex));
  std::unordered_set<ChunkKey, ChunkKeyHash> set(keys.begin(), keys.end());
  EXPECT_EQ(set.size(), 3u);
  for (const ChunkKey& key : keys) EXPECT_TRUE(set.contains(key));
  EXPECT_NE(ChunkKeyHash{}(keys[0]), ChunkKeyHash{}(keys[1]));
  EXPECT_EQ(ChunkKeyHash{}(keys[0]), ChunkKeyHash{}(*ChunkKey::FromHex(kGoldenKeys[0])));

  // Byte-wise order, so keys of one namespace are contiguous in an ordered index.
  ChunkKey low, high;
  low.bytes[15] = 1;
  high.bytes[0] = 1;
  EXPECT_LT(low, high);
  EXPECT_LT(low.ns(), high.ns());
}

// ---- PrefixHasher ------------------------------------------------------------------------------

TEST(PrefixHasherTest, MatchesChunkKeysForTokens) {
  const Namespace ns = GoldenNamespace();
  const std::vector<std::uint32_t> tokens = GoldenTokens(600);
  PrefixHasher hasher(ns);
  const std::span<const std::uint32_t> all(tokens);
  for (std::size_t i = 0; i < 3; ++i) {
    const std::size_t length = std::min<std::size_t>(256, 600 - i * 256);
    Result<ChunkKey> key = hasher.Next(all.subspan(i * 256, length));
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    EXPECT_EQ(key->ToHex(), kGoldenKeys[i]);
    EXPECT_EQ(hasher.chunks(), i + 1);
  }
}

TEST(PrefixHasherTest, MisuseIsAnErrorAndChangesNothing) {
  const Namespace ns = GoldenNamespace();
  const std::vector<std::uint32_t> tokens = GoldenTokens(600);
  const std::span<const std::uint32_t> all(tokens);
  PrefixHasher hasher(ns);

  Result<ChunkKey> empty = hasher.Next({});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.status().message(), "prefix hasher: chunk 0 is empty");

  Result<ChunkKey> too_long = hasher.Next(all.subspan(0, 257));
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(too_long.status().message(),
            "prefix hasher: chunk 0 has 257 tokens, more than the namespace's chunk_tokens = 256");
  EXPECT_EQ(hasher.chunks(), 0u);

  // The failed calls left the chain where it was.
  Result<ChunkKey> first = hasher.Next(all.subspan(0, 256));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->ToHex(), kGoldenKeys[0]);

  ASSERT_TRUE(hasher.Next(all.subspan(256, 100)).ok());  // partial: must be the last
  Result<ChunkKey> after_partial = hasher.Next(all.subspan(356, 256));
  ASSERT_FALSE(after_partial.ok());
  EXPECT_EQ(after_partial.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(after_partial.status().message(),
            "prefix hasher: chunk 2 follows chunk 1, which had fewer than chunk_tokens = 256 "
            "tokens; only the last chunk may be partial");
  EXPECT_EQ(hasher.chunks(), 2u);
}

TEST(PrefixHasherTest, CopyForksTheChain) {
  const Namespace ns = GoldenNamespace();
  const std::vector<std::uint32_t> tokens = GoldenTokens(600);
  const std::span<const std::uint32_t> all(tokens);
  PrefixHasher a(ns);
  ASSERT_TRUE(a.Next(all.subspan(0, 256)).ok());
  PrefixHasher b = a;
  std::vector<std::uint32_t> other(all.begin() + 256, all.begin() + 512);
  other[0] ^= 1;
  Result<ChunkKey> from_a = a.Next(all.subspan(256, 256));
  Result<ChunkKey> from_b = b.Next(other);
  ASSERT_TRUE(from_a.ok());
  ASSERT_TRUE(from_b.ok());
  EXPECT_EQ(from_a->ToHex(), kGoldenKeys[1]);
  EXPECT_NE(*from_b, *from_a);
}

}  // namespace
}  // namespace kvdepot
