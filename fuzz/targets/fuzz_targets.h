// kvdepot's fuzz targets (docs/fuzzing.md): one entry function per parser of untrusted bytes.
//
// Each function takes any bytes and must return 0 without crashing, leaking or tripping a
// sanitizer; a parser that rejects the input with a Status is the expected outcome. They are
// compiled twice: with clang and -fsanitize=fuzzer into one libFuzzer binary per target
// (fuzz/CMakeLists.txt, KVDEPOT_FUZZ=ON), and with the normal compiler into the ctest that replays
// fuzz/corpus/<target>/ and fuzz/regressions/<target>/ (tests/fuzz/).
//
// Thread-safety: a target may keep process-wide state (the server target keeps one server);
// call them from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kvdepot::fuzz {

using TargetFn = int (*)(const std::uint8_t* data, std::size_t size);

int FuzzContainer(const std::uint8_t* data, std::size_t size);   // container
int FuzzCodecs(const std::uint8_t* data, std::size_t size);      // codecs
int FuzzProtocol(const std::uint8_t* data, std::size_t size);    // protocol
int FuzzServer(const std::uint8_t* data, std::size_t size);      // server
int FuzzLmHeader(const std::uint8_t* data, std::size_t size);    // lm_header
int FuzzLmServer(const std::uint8_t* data, std::size_t size);    // lm_server
int FuzzSsdRecord(const std::uint8_t* data, std::size_t size);   // ssd_record
int FuzzConfig(const std::uint8_t* data, std::size_t size);      // config
int FuzzRespCodec(const std::uint8_t* data, std::size_t size);   // resp_codec
int FuzzRespServer(const std::uint8_t* data, std::size_t size);  // resp_server

struct Target {
  std::string_view name;  // the folder name under fuzz/corpus and fuzz/regressions
  TargetFn fn;
};

// Every target, in a fixed order.
std::span<const Target> AllTargets();

}  // namespace kvdepot::fuzz
