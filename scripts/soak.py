#!/usr/bin/env python3
"""Load/soak test: many concurrent connections against a fresh kvdepotd.

Starts kvdepotd (host tier only, on an ephemeral port), runs `kvdepot bench --op mixed` (20% PUT,
50% GET, 30% LOOKUP on random keys, one blocking client-library connection per thread) from
--connections connections for --duration seconds, and meanwhile samples the daemon's RSS and its
open connection count. Fails (exit 1) on any request error, when fewer connections than asked
were open at once, or when the daemon's peak RSS exceeds the configured host capacity plus the
documented overhead (docs/benchmarks.md: BASE_OVERHEAD + PER_CONNECTION_OVERHEAD per connection).

  scripts/soak.py --build build --connections 1000 --duration 12       # the ctest version
  make soak                                                            # 1000 connections, 150 s
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time

MiB = 1 << 20
BASE_OVERHEAD = 64 * MiB             # code, allocator arenas, index, I/O buffers
PER_CONNECTION_OVERHEAD = 64 * 1024  # Asio socket state, header/small buffers, queued frames


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--duration", type=int, default=12)
    ap.add_argument("--host-capacity-mib", type=int, default=128)
    ap.add_argument("--value-size", default="16KiB")
    ap.add_argument("--keys", type=int, default=4096)
    ap.add_argument("--io-threads", type=int, default=2)
    args = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < args.connections + 64:
        print(f"soak: hard open-file limit {hard} is below {args.connections} connections; skipping")
        return 77

    kvdepotd = os.path.join(args.build, "bin", "kvdepotd")
    kvdepot = os.path.join(args.build, "bin", "kvdepot")
    capacity = args.host_capacity_mib * MiB
    with tempfile.TemporaryDirectory(prefix="kvdepot-soak-") as tmp:
        log_path = os.path.join(tmp, "kvdepotd.log")
        log = open(log_path, "w")
        daemon = subprocess.Popen(
            [kvdepotd, "--listen", "127.0.0.1:0", "--unix", "", "--ssd-dir", "",
             "--metrics-listen", "", "--data-dir", os.path.join(tmp, "data"),
             "--host-capacity", f"{args.host_capacity_mib}MiB",
             "--io-threads", str(args.io_threads)],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            port = None
            for _ in range(200):
                with open(log_path) as f:
                    m = re.search(r"tcp=127\.0\.0\.1:(\d+)", f.read())
                if m:
                    port = int(m.group(1))
                    break
                if daemon.poll() is not None:
                    break
                time.sleep(0.05)
            if port is None:
                print("soak: kvdepotd did not start:\n" + open(log_path).read())
                return 1
            addr = f"127.0.0.1:{port}"
            samples = {"rss": 0, "open": 0, "host_bytes": 0}
            done = threading.Event()

            def sample():
                while not done.is_set():
                    samples["rss"] = max(samples["rss"], rss_bytes(daemon.pid))
                    try:
                        out = subprocess.run([kvdepot, "--addr", addr, "stats", "--json"],
                                             capture_output=True, text=True, timeout=10).stdout
                        doc = json.loads(out)
                        samples["open"] = max(samples["open"], doc["connections_open"])
                        # The peak: bench deletes its keys when it ends.
                        samples["host_bytes"] = max(samples["host_bytes"],
                                                    doc["tiers"]["host"]["bytes"])
                    except Exception:  # noqa: BLE001 - a missed sample is not a failure
                        pass
                    done.wait(0.5)

            sampler = threading.Thread(target=sample)
            sampler.start()
            t0 = time.time()
            bench = subprocess.run(
                [kvdepot, "--addr", addr, "bench", "--op", "mixed", "--connections",
                 str(args.connections), "--duration", str(args.duration), "--value-size",
                 args.value_size, "--keys", str(args.keys), "--json", "--no-progress"],
                capture_output=True, text=True, timeout=args.duration + 120)
            wall = time.time() - t0
            done.set()
            sampler.join()
            samples["rss"] = max(samples["rss"], rss_bytes(daemon.pid))
            stats = json.loads(subprocess.run([kvdepot, "--addr", addr, "stats", "--json"],
                                              capture_output=True, text=True).stdout)
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
            log.close()

        if bench.returncode != 0 or not bench.stdout.strip():
            print("soak: bench failed:\n" + bench.stdout + bench.stderr)
            return 1
        result = json.loads(bench.stdout)[0]
        bound = capacity + BASE_OVERHEAD + PER_CONNECTION_OVERHEAD * args.connections
        report = {
            "connections": args.connections, "duration_s": args.duration, "wall_s": round(wall, 1),
            "ops": result["ops"], "ops_per_s": round(result["ops_per_s"]),
            "p50_us": round(result["p50_us"], 1), "p99_us": round(result["p99_us"], 1),
            "p999_us": round(result["p999_us"], 1), "errors": 1 if "error" in result else 0,
            "peak_connections_open": samples["open"],
            "peak_rss_mib": round(samples["rss"] / MiB, 1),
            "host_capacity_mib": args.host_capacity_mib,
            "host_bytes_mib": round(samples["host_bytes"] / MiB, 1),
            "rss_bound_mib": round(bound / MiB, 1),
            "protocol_errors": stats["protocol_errors"],
        }
        print(json.dumps(report, indent=1))
        failures = []
        if "error" in result:
            failures.append("request error: " + result["error"])
        if stats["protocol_errors"] != 0:
            failures.append(f"{stats['protocol_errors']} protocol errors")
        if samples["open"] < args.connections:
            failures.append(f"only {samples['open']} connections were open at once")
        if samples["rss"] > bound:
            failures.append(f"peak RSS {samples['rss'] / MiB:.0f} MiB over the bound {bound / MiB:.0f} MiB")
        if result["ops"] == 0:
            failures.append("no requests completed")
        for f in failures:
            print("soak: FAIL: " + f)
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
