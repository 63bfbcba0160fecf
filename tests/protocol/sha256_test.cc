#include "kvdepot/protocol/sha256.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kvdepot {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

std::string HexOf(std::string_view message) {
  return Sha256DigestHex(Sha256Of(Bytes(message)));
}

// The 200-byte message used by the split tests.
std::string Message200() {
  std::string m(200, '\0');
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<char>((i * 31 + 7) % 256);
  return m;
}

TEST(Sha256Test, FipsVectors) {
  // FIPS 180-4 examples / NIST CSRC "SHA256.pdf" and the NESSIE one-million-'a' vector.
  EXPECT_EQ(HexOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(HexOf("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HexOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(HexOf("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                  "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(HexOf(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, OneMillionAInPieces) {
  const std::string piece(1000, 'a');
  Sha256 hasher;
  for (int i = 0; i < 1000; ++i) hasher.Update(Bytes(piece));
  EXPECT_EQ(Sha256DigestHex(hasher.Finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PaddingBoundaries) {
  // Lengths where the 0x80 byte and the 64-bit length do or do not fit in the last block.
  // Expected values from Python's hashlib.
  struct Case {
    std::size_t length;
    const char* hex;
  };
  const Case cases[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HexOf(std::string(c.length, 'a')), c.hex) << "length " << c.length;
  }
}

TEST(Sha256Test, SplitAtEveryOffsetEqualsOneShot) {
  const std::string message = Message200();
  const std::string expected = "44cae5223d431caed4a9e32271d6abf17c3f2f4abac45fcdb48a99fcc6072a09";
  ASSERT_EQ(HexOf(message), expected);
  for (std::size_t split = 0; split <= message.size(); ++split) {
    Sha256 hasher;
    hasher.Update(Bytes(std::string_view(message).substr(0, split)));
    hasher.Update(Bytes(std::string_view(message).substr(split)));
    EXPECT_EQ(Sha256DigestHex(hasher.Finish()), expected) << "split at " << split;
  }
  // Three pieces, at every pair of offsets.
  for (std::size_t a = 0; a <= message.size(); a += 7) {
    for (std::size_t b = a; b <= message.size(); b += 5) {
      Sha256 hasher;
      hasher.Update(Bytes(std::string_view(message).substr(0, a)));
      hasher.Update(Bytes(std::string_view(message).substr(a, b - a)));
      hasher.Update(Bytes(std::string_view(message).substr(b)));
      EXPECT_EQ(Sha256DigestHex(hasher.Finish()), expected) << "splits at " << a << ", " << b;
    }
  }
  // One byte at a time, with empty updates in between.
  Sha256 hasher;
  for (char c : message) {
    hasher.Update(Bytes(std::string_view(&c, 1)));
    hasher.Update({});
  }
  EXPECT_EQ(Sha256DigestHex(hasher.Finish()), expected);
}

TEST(Sha256Test, FinishResetsForTheNextMessage) {
  Sha256 hasher;
  hasher.Update(Bytes("some earlier message"));
  (void)hasher.Finish();
  hasher.Update(Bytes("abc"));
  EXPECT_EQ(Sha256DigestHex(hasher.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256DigestHex(hasher.Finish()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256Test, CopyForksTheComputation) {
  Sha256 a;
  a.Update(Bytes("ab"));
  Sha256 b = a;
  a.Update(Bytes("c"));
  b.Update(Bytes("cdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"));
  EXPECT_EQ(Sha256DigestHex(a.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256DigestHex(b.Finish()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, IncrementalEqualsOneShotOnRandomInput) {
  std::mt19937 rng(12345);
  std::string message(4096, '\0');
  for (char& c : message) c = static_cast<char>(rng());
  for (std::size_t length = 0; length <= message.size(); length += (length < 300 ? 1 : 97)) {
    const std::string_view piece = std::string_view(message).substr(0, length);
    Sha256 hasher;
    hasher.Update(Bytes(piece.substr(0, length / 3)));
    hasher.Update(Bytes(piece.substr(length / 3)));
    EXPECT_EQ(hasher.Finish(), Sha256Of(Bytes(piece))) << "length " << length;
  }
}

TEST(Sha256Test, MovedObjectKeepsItsState) {
  Sha256 a;
  a.Update(Bytes("ab"));
  Sha256 b = std::move(a);
  b.Update(Bytes("c"));
  EXPECT_EQ(Sha256DigestHex(b.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  a = b;  // a moved-from object may be assigned to
  a.Update(Bytes("abc"));
  EXPECT_EQ(Sha256DigestHex(a.Finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace kvdepot
