"""The docs against the binaries (issue 23 §7): every `--flag` that README.md and docs/*.md give to
kvdepotd or kvdepot is one `kvdepotd --help` or the CLI's help lists, and every `kvdepot_*` metric
name they mention is one a live kvdepotd exports (with the SSD tier, lm://, resp:// and KV events
on, so that every exporter registers). Flags of other tools, library and binary names, and metrics
this build cannot export are the deliberate exceptions below, each with its reason."""
import re
import subprocess

from kvd import KVDEPOT, KVDEPOTD, REPO, Daemon, every_exporter_flags, exported_metric_names

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FLAG = re.compile(r"(?<![\w./-])(--[a-z][a-z0-9-]*)")
METRIC = re.compile(r"\bkvdepot_[a-z0-9_]+")

# A line that runs another tool: its flags are that tool's, not kvdepot's. Matched in the line
# and the two before it (a command may wrap onto the next lines); a line that itself runs
# kvdepot or kvdepotd is checked all the same.
OTHER_TOOLS = re.compile(
    r"\b(cmake|ctest|pip|pytest|fio|redis-server|redis-benchmark|redis-cli|vllm|nsys|ncu|nvcc|"
    r"nvidia-smi|promtool|prometheus|systemd-run|git|gtest|llvm-symbolizer|lmcache|"
    r"kvdepot_[a-z0-9_]*bench|kvdepot_hack_accuracy|kvdepot_hack_quality|kvdepot_cachegen_rd|kvdepot_eviction_trace|"
    r"kvdepot_gpu_fetch|torch_sdpa\.py|[a-z_]+_tests)\b|\b(scripts|bench)/\S+|Nsight")
RUNS_KVDEPOT = re.compile(r"\bkvdepotd\s+--|\bkvdepot\s+(--|(ping|stats|top|ls|inspect|get|put|"
                          r"del|lookup|bench|codec|completion|help|version)\b)")

# Flags the docs name that belong to no kvdepot binary, where the tool is not named on the line
# or the two before it.
OTHER_FLAGS = {
    "--kv-transfer-config": "vLLM's flag (docs/lmcache.md's vLLM example)",
    "--stat": "redis-cli --stat, which `kvdepot top` is likened to",
    "--use": "nvcc's --use_fast_math (the word stops at the underscore)",
    "--only": "kvdepot_hack_bench --only, mentioned after the command was given",
    "--metrics": "Nsight Compute's --metrics on the line after the ncu command",
    "--kib": "bench/lmcache/mp_bench.py's flag, given as 'same command otherwise'",
    "--batch": "bench/lmcache/mp_bench.py's flag, given as 'same command otherwise'",
    "--control": "scripts/bench-events.sh's flag ('the same script with --control')",
    "--write-only": "kvdepot_ssd_bench's flag, described in prose",
    "--durability": "kvdepot_ssd_bench's flag ('same command with --durability')",
    "--mib": "kvdepot_gpu_bench's flag, described in prose",
    "--prefill-math": "kvdepot_hack_bench's flag, described in prose",
    "--batches": "kvdepot_hack_bench's flag, given after the command",
    "--chunked": "kvdepot_hack_bench's and torch_sdpa.py's flag, described in prose",
}

# Targets and C API names that share the kvdepot_ prefix with the metrics.
NOT_METRICS_PATTERN = re.compile(r"kvdepot_(open|options|close|put|get|lookup|free|error|errstr)"
                                 r"(_[a-z]+)?$")

# Metrics a CPU build cannot export: the GPU tier registers its tier="gpu" series only with CUDA,
# so there is no GPU-only family (checked: docs/metrics.md gives the GPU tier as a label value).
NOT_EXPORTED_HERE = {}


def doc_lines(context=0):
    """(where, line) of every doc line; with context N, the line joined to the N before it."""
    for path in DOCS:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            before = lines[max(0, number - 1 - context):number - 1]
            yield f"{path.relative_to(REPO)}:{number}", line, " ".join(before)


def cmake_targets():
    """Every kvdepot_* target name the build defines (libraries, binaries, test executables)."""
    names = set()
    for cmake in REPO.glob("**/CMakeLists.txt"):
        if "build" in cmake.relative_to(REPO).parts[0]:
            continue
        names |= set(re.findall(r"(?:add_library|add_executable|kvdepot_add_test)\((kvdepot_\w+)",
                                cmake.read_text()))
    return names


def c_api_names():
    text = "".join(p.read_text() for p in (REPO / "client/include").glob("**/*.h"))
    return set(re.findall(r"\bkvdepot_[a-z0-9_]+", text))


def help_text(*args):
    p = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout


def binary_flags():
    # --help and --version: both binaries answer them (checked here), though neither lists them.
    assert help_text(KVDEPOTD, "--version").startswith("kvdepotd ")
    assert help_text(KVDEPOT, "--version").startswith("kvdepot ")
    text = "--help --version " + help_text(KVDEPOTD, "--help") + help_text(KVDEPOT, "help")
    for sub in ("encode", "decode", "inspect", "compare", "synth"):
        text += help_text(KVDEPOT, "codec", sub, "--help")
    for command in ("stats", "top", "ls", "del", "bench", "get"):
        text += help_text(KVDEPOT, command, "--help")
    return set(FLAG.findall(text))


def test_every_documented_flag_is_accepted():
    known = binary_flags()
    unknown = []
    for where, line, before in doc_lines(context=2):
        foreign = OTHER_TOOLS.search(before + " " + line) and not RUNS_KVDEPOT.search(line)
        for flag in FLAG.findall(line):
            if flag in known or flag in OTHER_FLAGS or foreign:
                continue
            if any(flag.startswith(f) for f in ("--gtest", "--benchmark")):
                continue
            unknown.append(f"{where}: {flag}")
    assert not unknown, ("flags the docs give that neither kvdepotd --help nor kvdepot help "
                         "lists:\n" + "\n".join(unknown))


def test_the_exceptions_are_still_needed():
    """An exception the docs no longer need is removed, so the list stays honest."""
    text = "\n".join(line for _, line, _ in doc_lines())
    known = binary_flags()
    for flag in OTHER_FLAGS:
        assert flag in text, f"{flag} is no longer in the docs: drop its exception"
        assert flag not in known, f"{flag} is a kvdepot flag now: drop its exception"


def test_every_documented_metric_is_exported(tmp_path):
    not_metrics = cmake_targets() | c_api_names()
    mentioned = {}
    for where, line, _ in doc_lines():
        for name in METRIC.findall(line):
            if name in not_metrics or NOT_METRICS_PATTERN.match(name):
                continue
            mentioned.setdefault(name, where)
    d = Daemon(tmp_path, *every_exporter_flags(tmp_path))
    try:
        exported = exported_metric_names(d)
    finally:
        d.stop()
    missing = []
    for name, where in sorted(mentioned.items()):
        if name in NOT_EXPORTED_HERE:
            continue
        if name.endswith("_"):  # a family named by its prefix, e.g. `kvdepot_ssd_*`
            ok = any(e.startswith(name) for e in exported)
        else:
            ok = name in exported
        if not ok:
            missing.append(f"{where}: {name}")
    assert not missing, "metrics the docs name that kvdepotd does not export:\n" + "\n".join(
        missing)
