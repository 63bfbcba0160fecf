#include "fuzz_targets.h"

namespace kvdepot::fuzz {

std::span<const Target> AllTargets() {
  static constexpr Target kTargets[] = {
      {"container", FuzzContainer},    {"codecs", FuzzCodecs},      {"protocol", FuzzProtocol},
      {"server", FuzzServer},          {"lm_header", FuzzLmHeader}, {"lm_server", FuzzLmServer},
      {"ssd_record", FuzzSsdRecord},   {"config", FuzzConfig},      {"resp_codec", FuzzRespCodec},
      {"resp_server", FuzzRespServer},
  };
  return kTargets;
}

}  // namespace kvdepot::fuzz
