"""fuzz/new_pcs.py on a made-up libFuzzer log: minutes from runs / exec/s, categories, the summary
and the --after filter."""
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "fuzz" / "new_pcs.py"

LOG = """\
INFO: Seed: 1
#512\tINITED cov: 100 ft: 200 corp: 10/1Kb exec/s: 0 rss: 30Mb
\tNEW_PC: 0x1000 in kvdepot::ParseContainer(std::span<std::byte const>) /src/codec/src/container.cc:191:5
#6000\tNEW    cov: 101 ft: 201 corp: 11/1Kb lim: 4 exec/s: 100 rss: 30Mb L: 4/4 MS: 1 ChangeBit-
\tNEW_PC: 0x2000 in kvdepot::daemon::ConnectionTimeouts::Check(long) /src/daemon/src/timeouts.cc:40:7
\tNEW_PC: 0x3000 in unsigned int std::__detail::__to_chars_len<unsigned long>(unsigned long, int) /usr/include/c++/12/bits/charconv.h:60
#120000\tNEW    cov: 103 ft: 205 corp: 12/1Kb lim: 4 exec/s: 100 rss: 30Mb L: 4/4 MS: 1 ChangeBit-
#240000\tpulse  cov: 103 ft: 205 corp: 12/1Kb lim: 4 exec/s: 100 rss: 30Mb
"""


def run(tmp_path, *args):
    log = tmp_path / "fuzz.log"
    log.write_text(LOG)
    p = subprocess.run([sys.executable, str(TOOL), str(log), *args], capture_output=True,
                       text=True, timeout=30)
    return p.returncode, p.stdout.splitlines(), p.stderr


def test_times_categories_and_summary(tmp_path):
    rc, lines, err = run(tmp_path)
    assert rc == 0, err
    assert lines[0].split()[:6] == ["1.0", "min", "cov", "101", "input", "0x1000"]
    assert lines[1].split()[:6] == ["20.0", "min", "cov", "103", "timing", "0x2000"]
    assert lines[2].split()[4] == "value"
    assert "# INITED cov 100; last stats line: 240000 runs, ~40.0 min, cov 103" in lines
    assert "# input       1 new PCs, the last at ~1.0 min" in lines
    assert "# timing      1 new PCs, the last at ~20.0 min" in lines


def test_after_filters_the_listing_not_the_summary(tmp_path):
    rc, lines, _ = run(tmp_path, "--after", "10")
    assert rc == 0
    assert [line.split()[4] for line in lines if not line.startswith("#")] == ["timing", "value"]
    assert "# input       1 new PCs, the last at ~1.0 min" in lines


def test_a_log_without_inited_is_an_error(tmp_path):
    log = tmp_path / "other.log"
    log.write_text("not a fuzzer log\n")
    p = subprocess.run([sys.executable, str(TOOL), str(log)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2
    assert "no INITED line" in p.stderr
