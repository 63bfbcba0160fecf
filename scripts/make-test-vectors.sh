#!/usr/bin/env bash
# Regenerates tests/vectors/: small chunk containers with their expected decoded tensors, plus
# malformed containers with the error each must produce. Valid vectors come from the kvdepot CLI;
# the malformed and forward-compatibility ones are built with the independent Python reference
# (tests/python/kvd_reference.py). Re-running it must reproduce the committed files byte for byte.
# Usage: scripts/make-test-vectors.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kvdepot="${1:-$root/build}/bin/kvdepot"
out="$root/tests/vectors"
mkdir -p "$out"
cd "$out"
rm -f ./*.kvd ./*.npy manifest.txt

"$kvdepot" codec synth raw-fp16-small.npy --layers 1 --tokens 3 --heads 2 --dim 4 --seed 1 --quiet
"$kvdepot" codec synth raw-bf16-odd.npy --layers 2 --tokens 5 --heads 3 --dim 7 --seed 2 \
  --dtype bf16 --quiet
"$kvdepot" codec synth raw-fp32-one.npy --layers 1 --tokens 1 --heads 1 --dim 1 --seed 3 \
  --dtype fp32 --quiet
/usr/bin/python3 - <<'PY'
import numpy as np
bits = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff, 0xfbff,
        0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x3555, 0x7d00]
np.save("raw-fp16-specials.npy", np.array(bits, np.uint16).view(np.float16).reshape(1, 2, 2, 1, 4))
PY
"$kvdepot" codec encode --quiet raw-fp16-small.npy raw-fp16-small.kvd
"$kvdepot" codec encode --quiet --dtype bf16 raw-bf16-odd.npy raw-bf16-odd.kvd
"$kvdepot" codec encode --quiet raw-fp32-one.npy raw-fp32-one.kvd
"$kvdepot" codec encode --quiet raw-fp16-specials.npy raw-fp16-specials.kvd

# CacheGen: the .npy next to each container is its decoded tensor (the codec is lossy).
"$kvdepot" codec synth cg-in-small.npy --layers 2 --tokens 9 --heads 3 --dim 16 --seed 4 --quiet
"$kvdepot" codec encode --quiet --codec cachegen cg-in-small.npy cachegen-fp16-small.kvd
"$kvdepot" codec synth cg-in-bins.npy --layers 3 --tokens 300 --heads 1 --dim 40 --seed 5 \
  --dtype bf16 --quiet
"$kvdepot" codec encode --quiet --codec cachegen --dtype bf16 --k-bins 2:1,64:1,7 --v-bins 5 \
  cg-in-bins.npy cachegen-bf16-bins.kvd
/usr/bin/python3 - <<'PY'
import numpy as np
a = np.random.default_rng(6).standard_normal((1, 2, 20, 2, 16)).astype(np.float32)
a[0, 0, 3, 1, 5] = 1.0e6
np.save("cg-in-fp32.npy", a)
PY
"$kvdepot" codec encode --quiet --codec cachegen cg-in-fp32.npy cachegen-fp32-scales.kvd
# HACK INT2: one block of 64 tokens plus a 1-token tail (channel orientation, nearest), and
# token orientation with stochastic rounding, 32-token partitions and 2 sink tokens in bf16.
"$kvdepot" codec synth hk-in-a.npy --layers 2 --tokens 65 --heads 2 --dim 64 --seed 7 --quiet
"$kvdepot" codec encode --quiet --codec hack-int2 hk-in-a.npy hack-fp16-tail.kvd
"$kvdepot" codec synth hk-in-b.npy --layers 1 --tokens 70 --heads 1 --dim 40 --seed 8 \
  --dtype bf16 --quiet
"$kvdepot" codec encode --quiet --codec hack-int2 --dtype bf16 --partition 32 \
  --orientation token --rounding stochastic --seed 99 --sinks 2 hk-in-b.npy hack-bf16-token.kvd
rm -f hk-in-*.npy
for v in cachegen-fp16-small cachegen-bf16-bins cachegen-fp32-scales hack-fp16-tail hack-bf16-token; do
  "$kvdepot" codec decode --quiet "$v.kvd" "$v.npy"
done
rm -f cg-in-*.npy

PYTHONPATH="$root/tests/python" /usr/bin/python3 - <<'PY'
import struct
import numpy as np
import kvd_reference as ref

small = open("raw-fp16-small.kvd", "rb").read()
arr = np.load("raw-fp16-small.npy")
payload = arr.tobytes()

def save(name, data):
    open(name, "wb").write(data)

# Forward compatibility: an unknown section kind flagged optional must be skipped.
save("raw-fp16-optional-section.kvd",
     ref.encode(0, 1, arr.shape, [(1000, 1, b"future metadata"), (2, 0, payload)]))
np.save("raw-fp16-optional-section.npy", arr)
# Malformed containers.
save("bad-magic.kvd", b"\x89KVE" + small[4:])
bad = bytearray(small); bad[-1] ^= 0x01
save("bad-section-checksum.kvd", bytes(bad))
save("truncated.kvd", small[:-5])
v2 = bytearray(small); v2[8:10] = struct.pack("<H", 2)
save("version-2.kvd", bytes(v2))
save("unknown-required-section.kvd", ref.encode(0, 1, arr.shape, [(1000, 0, b"x"), (2, 0, payload)]))
pad = bytearray(ref.encode(0, 1, arr.shape, [(2, 0, payload)])); pad[100] = 7
save("nonzero-padding.kvd", bytes(pad))
PY

cat > manifest.txt <<'MANIFEST'
# file                            expect   decoded tensor / error code (docs/format.md, "Test vectors")
raw-fp16-small.kvd                ok       raw-fp16-small.npy
raw-bf16-odd.kvd                  ok       raw-bf16-odd.npy
raw-fp32-one.kvd                  ok       raw-fp32-one.npy
raw-fp16-specials.kvd             ok       raw-fp16-specials.npy
raw-fp16-optional-section.kvd     ok       raw-fp16-optional-section.npy
cachegen-fp16-small.kvd           ok       cachegen-fp16-small.npy
cachegen-bf16-bins.kvd            ok       cachegen-bf16-bins.npy
cachegen-fp32-scales.kvd          ok       cachegen-fp32-scales.npy
hack-fp16-tail.kvd                ok       hack-fp16-tail.npy
hack-bf16-token.kvd               ok       hack-bf16-token.npy
bad-magic.kvd                     error    corruption
bad-section-checksum.kvd          error    corruption
truncated.kvd                     error    corruption
version-2.kvd                     error    unimplemented
unknown-required-section.kvd      error    unimplemented
nonzero-padding.kvd               error    corruption
MANIFEST
echo "wrote $(ls "$out" | wc -l) files to $out"
