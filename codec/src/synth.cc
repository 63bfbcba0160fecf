#include "kvdepot/codec/synth.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "kvdepot/codec/numeric.h"

namespace kvdepot {
namespace {

// ---- model parameters (docs/synth.md explains each and how it was calibrated) -----------------

// Parameters that differ between the first layer (fed by the embeddings) and deeper layers.
struct LayerClass {
  double k_bias_rms;      // RMS of the pre-RoPE per-channel K bias
  double k_outlier_bias;  // |bias| of an outlier K channel (times U[0.8, 1.2])
  double k_noise;         // median per-channel std of the pre-RoPE K fluctuation
  double v_mean_rms;      // RMS of the per-channel V mean
  double v_noise;         // median per-channel std of V
};
constexpr LayerClass kFirstLayer = {0.2, 1.0, 1.25, 0.16, 0.8};
constexpr LayerClass kDeeperLayer = {1.6, 6.0, 0.75, 0.7, 1.7};

constexpr double kRopeTheta = 10000.0;
constexpr double kLayerJitterSigma = 0.15;    // per-layer lognormal gain on the noise scales
constexpr double kKHeadBiasSigma = 0.4;       // per-head lognormal gain on K biases
constexpr double kKChannelScaleSigma = 0.35;  // per-channel lognormal spread of K scales
constexpr double kKOutlierNoiseGain = 1.5;    // outlier channels also fluctuate more
constexpr std::uint32_t kKOutlierEvery = 32;  // ceil(head_dim / 32) outlier channels per head
constexpr double kKShared = 0.4;              // K fluctuation variance shared by a head
constexpr double kKRho = 0.15;                // AR(1) coefficient of the K fluctuation
constexpr double kVChannelScaleSigma = 0.12;  // per-channel lognormal spread of V scales
constexpr double kVShared = 0.1;              // fraction of V variance shared by a head
constexpr double kVRho = 0.06;                // AR(1) coefficient of V

// ---- random numbers ---------------------------------------------------------------------------

std::uint64_t SplitMix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** seeded through splitmix64 from a stream key.
class Rng {
 public:
  explicit Rng(std::uint64_t key) {
    for (auto& word : s_) word = SplitMix64(key);
  }

  std::uint64_t Next() {
    const std::uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Standard normal by Box-Muller (the cosine branch only, so each call uses two uniforms).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  double Sign() { return (Next() >> 63) != 0 ? 1.0 : -1.0; }

  // Uniform in [0, n). Precondition: n > 0. The modulo bias is below 2^-32 for n < 2^32.
  std::uint32_t Below(std::uint32_t n) { return static_cast<std::uint32_t>(Next() % n); }

 private:
  static std::uint64_t Rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

// The key of one random stream: the seed and up to three coordinates, mixed so that nearby
// coordinates give unrelated streams.
std::uint64_t StreamKey(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t state = seed;
  std::uint64_t key = SplitMix64(state);
  for (const std::uint64_t coord : {a, b, c}) {
    state = key ^ coord;
    key = SplitMix64(state);
  }
  return key;
}

constexpr std::uint64_t kLayerStream = 0;
constexpr std::uint64_t kKStream = 1;
constexpr std::uint64_t kVStream = 2;

// A unit-variance AR(1) sequence: x_0 ~ N(0, 1), x_t = rho x_{t-1} + sqrt(1 - rho^2) n_t.
class Ar1 {
 public:
  explicit Ar1(double rho) : rho_(rho), innovation_(std::sqrt(1.0 - rho * rho)) {}
  double Step(Rng& rng) {
    const double n = rng.Normal();
    x_ = started_ ? rho_ * x_ + innovation_ * n : n;
    started_ = true;
    return x_;
  }

 private:
  double rho_;
  double innovation_;
  double x_ = 0.0;
  bool started_ = false;
};

// Writes one value at element index `i` of `out` (dtype conversion via numeric.h).
void Store(KvTensor& out, std::uint64_t i, double value) {
  const float f = static_cast<float>(value);
  std::byte* dst = out.data.data();
  switch (out.dtype) {
    case DType::kFloat32: std::memcpy(dst + i * 4, &f, 4); return;
    case DType::kFloat16: {
      const std::uint16_t h = FloatToHalfBits(f);
      std::memcpy(dst + i * 2, &h, 2);
      return;
    }
    case DType::kBFloat16: {
      const std::uint16_t b = FloatToBf16Bits(f);
      std::memcpy(dst + i * 2, &b, 2);
      return;
    }
  }
}

// Geometry of one (layer, K|V, head) block inside the C-order tensor.
struct Block {
  std::uint64_t base;        // element index of (layer, kv, token 0, head, channel 0)
  std::uint64_t token_step;  // kv_heads * head_dim
};

// Fills the tokens of one block: value[t][c] = bias[c] + scale[c] * (sqrt(1 - shared) e[t][c] +
// sqrt(shared) loading[c] f[t]), e and f unit AR(1) sequences, then applies `rotate` to each
// token's channel vector.
template <typename Rotate>
void FillBlock(KvTensor& out, const Block& block, std::uint32_t tokens,
               const std::vector<double>& bias, const std::vector<double>& scale,
               const std::vector<double>& loading, double shared, double rho, Rng& rng,
               Rotate&& rotate) {
  const std::size_t dim = bias.size();
  const double own = std::sqrt(1.0 - shared);
  const double common = std::sqrt(shared);
  Ar1 factor(rho);
  std::vector<Ar1> channels(dim, Ar1(rho));
  std::vector<double> row(dim);
  for (std::uint32_t t = 0; t < tokens; ++t) {
    const double f = factor.Step(rng);
    for (std::size_t c = 0; c < dim; ++c) {
      row[c] = bias[c] + scale[c] * (own * channels[c].Step(rng) + common * loading[c] * f);
    }
    rotate(t, row);
    const std::uint64_t at = block.base + t * block.token_step;
    for (std::size_t c = 0; c < dim; ++c) Store(out, at + c, row[c]);
  }
}

}  // namespace

Result<KvTensor> SynthesizeKv(const SynthOptions& options) {
  if (!IsValidDType(static_cast<std::uint8_t>(options.dtype))) {
    return InvalidArgument("synth: invalid dtype " +
                           std::to_string(static_cast<unsigned>(options.dtype)));
  }
  KVD_RETURN_IF_ERROR(ValidateShape(options.shape, options.dtype).WithContext("synth"));

  const KvShape& shape = options.shape;
  const std::uint32_t dim = shape.head_dim;
  const std::uint32_t half = dim / 2;  // RoPE pairs (i, i + half); channel 2*half stays put
  KvTensor out = KvTensor::Zeros(options.dtype, shape);

  // Llama inverse frequencies over the rotated dimensions: theta^(-2i / (2 half)).
  std::vector<double> inv_freq(half);
  for (std::uint32_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(kRopeTheta, -2.0 * i / (2.0 * half));
  }
  const auto rope = [&](std::uint32_t pos, std::vector<double>& row) {
    for (std::uint32_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * inv_freq[i];
      const double cs = std::cos(angle);
      const double sn = std::sin(angle);
      const double x = row[i];
      const double y = row[i + half];
      row[i] = x * cs - y * sn;
      row[i + half] = y * cs + x * sn;
    }
  };
  const auto no_rotation = [](std::uint32_t, std::vector<double>&) {};

  const std::uint64_t token_step = std::uint64_t{shape.kv_heads} * dim;
  const std::uint64_t kv_step = std::uint64_t{shape.tokens} * token_step;
  std::vector<double> bias(dim), scale(dim), loading(dim);
  std::vector<std::uint32_t> order(dim);

  for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
    const LayerClass& lc = layer == 0 ? kFirstLayer : kDeeperLayer;
    Rng layer_rng(StreamKey(options.seed, kLayerStream, layer, 0));
    const double k_layer_gain = std::exp(kLayerJitterSigma * layer_rng.Normal());
    const double v_layer_gain = std::exp(kLayerJitterSigma * layer_rng.Normal());
    const std::uint64_t layer_base = std::uint64_t{layer} * 2 * kv_step;

    for (std::uint32_t head = 0; head < shape.kv_heads; ++head) {
      // K: biases, scales, outliers, then the tokens (rotated).
      Rng k_rng(StreamKey(options.seed, kKStream, layer, head));
      const double head_bias_gain = std::exp(kKHeadBiasSigma * k_rng.Normal());
      for (std::uint32_t c = 0; c < dim; ++c) {
        bias[c] = lc.k_bias_rms * head_bias_gain * k_rng.Normal();
        scale[c] = lc.k_noise * k_layer_gain * std::exp(kKChannelScaleSigma * k_rng.Normal());
        loading[c] = k_rng.Sign();
        order[c] = c;
      }
      const std::uint32_t outliers = (dim + kKOutlierEvery - 1) / kKOutlierEvery;
      for (std::uint32_t j = 0; j < outliers; ++j) {  // partial Fisher-Yates: distinct channels
        const std::uint32_t pick = j + k_rng.Below(dim - j);
        std::swap(order[j], order[pick]);
        const std::uint32_t c = order[j];
        bias[c] = k_rng.Sign() * lc.k_outlier_bias * (0.8 + 0.4 * k_rng.Uniform());
        scale[c] *= kKOutlierNoiseGain;
      }
      FillBlock(out, {layer_base + std::uint64_t{head} * dim, token_step}, shape.tokens, bias,
                scale, loading, kKShared, kKRho, k_rng, rope);

      // V: means and scales, then the tokens (not rotated).
      Rng v_rng(StreamKey(options.seed, kVStream, layer, head));
      for (std::uint32_t c = 0; c < dim; ++c) {
        bias[c] = lc.v_mean_rms * v_rng.Normal();
        scale[c] = lc.v_noise * v_layer_gain * std::exp(kVChannelScaleSigma * v_rng.Normal());
        loading[c] = v_rng.Sign();
      }
      FillBlock(out, {layer_base + kv_step + std::uint64_t{head} * dim, token_step}, shape.tokens,
                bias, scale, loading, kVShared, kVRho, v_rng, no_rotation);
    }
  }
  return out;
}

}  // namespace kvdepot
