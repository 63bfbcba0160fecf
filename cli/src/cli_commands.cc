#include "cli_commands.h"

#include <algorithm>
#include <map>
#include <set>

namespace kvdepot::cli {
namespace {

constexpr std::size_t kColumns = 100;

const std::vector<FlagDoc> kConnectionFlags = {{"--addr", "HOST:PORT|unix:PATH"},
                                               {"--token-file", "FILE"},
                                               {"--tls", ""},
                                               {"--tls-ca", "FILE"},
                                               {"--tls-cert", "FILE"},
                                               {"--tls-key", "FILE"},
                                               {"--tls-server-name", "NAME"}};

const FlagDoc kJson{"--json", ""};
const FlagDoc kQuiet{"--quiet", ""};
const FlagDoc kDtype{"--dtype", "fp16|bf16|fp32"};

const std::vector<CommandSpec>& Table() {
  static const std::vector<CommandSpec> table = {
      {"ping", "", "round trip to kvdepotd", {kJson}},
      {"stats",
       "",
       "the daemon's statistics in sections, with human units and hit rates",
       {kJson, {"--watch", "SECONDS"}, {"--count", "N"}},
       "--json prints the daemon's STATS document with its raw numbers. --watch SECONDS is\n"
       "'kvdepot top --interval SECONDS'."},
      {"top",
       "",
       "a live view: one line per interval of rates, hit rates, traffic and connections",
       {{"--interval", "SECONDS"}, {"--count", "N"}, kJson},
       "Each line covers one interval (default 1 s; fractions allowed): requests/s, the hit\n"
       "rate of each tier, bytes in and out per second, evictions/s, open connections and the\n"
       "STATS round trip seen from here (rtt; per-op latency histograms are on /metrics as\n"
       "kvdepot_request_duration_seconds). --count N stops after N lines; Ctrl-C stops too\n"
       "(exit 0). --json: one object per line with the raw per-interval numbers."},
      {"ls",
       "[PATTERN]",
       "list stored keys with their tier, size and idle time",
       {{"--namespace", "NSID"},
        {"--prefix", "P"},
        {"--tier", "gpu|host|ssd"},
        {"--limit", "N"},
        {"--sort", "key|size|tier|idle"},
        kJson},
       "PATTERN is a glob ('model-*', '*/7') or, without * ? [, a key prefix. --sort size lists\n"
       "the largest first, idle the longest idle first; default key (byte order). At most\n"
       "--limit keys (default 100) are listed."},
      {"inspect", "KEY", "the container header of a stored chunk", {kJson}},
      {"get",
       "KEY",
       "a value, to -o FILE or to stdout unless it is a terminal",
       {{"-o", "FILE"}, {"--output", "FILE"}, kJson}},
      {"put",
       "KEY FILE|-",
       "store a file (- reads standard input); the server's limits.max_value_bytes applies",
       {kJson}},
      {"del",
       "[KEY...]",
       "delete keys, or purge every key under --prefix P or --namespace NSID",
       {{"--prefix", "P"}, {"--namespace", "NSID"}, {"--yes", ""}, kJson},
       "--prefix / --namespace scan for the matching keys, then delete them in batches and\n"
       "print how many keys and bytes went. On a terminal it asks first unless --yes; without\n"
       "a terminal on stdin it refuses (exit 2) unless --yes."},
      {"lookup", "KEY...", "longest cached prefix of keys given in prefix order", {kJson}},
      {"cluster status",
       "",
       "the cluster's members, their use and capacity, as this node sees them",
       {kJson},
       "--json: the node's CLUSTER_INFO document (docs/protocol.md): self, fenced, revision,\n"
       "placement and a members array (id, addr, state \"up\", capacity, used)."},
      {"cluster owner", "KEY", "which member(s) own KEY (primary first, then replicas)", {kJson}},
      {"bench",
       "",
       "PUT / GET / LOOKUP load generator against kvdepotd (and Redis, lm://)",
       {{"--op", "get|put|lookup|mixed"},
        {"--connections", "N"},
        {"--value-size", "SIZE"},
        {"--keys", "N"},
        {"--duration", "SECONDS"},
        {"--pipeline", "DEPTH"},
        {"--redis", "HOST:PORT"},
        {"--lm", "HOST:PORT"},
        {"--daemon-pid", "PID"},
        {"--no-native", ""},
        {"--no-huge-pages", ""},
        {"--chunk-keys", ""},
        {"--no-progress", ""},
        kJson},
       "Preloads KEYS values under a throwaway prefix (kvdepot-bench-PID-RANDOM/), then runs the\n"
       "operation on random keys from N connections for the duration (mixed: 20% PUT, 50% GET,\n"
       "30% LOOKUP; N up to 8192, one thread each; SIZE up to 1GiB), and deletes its keys again\n"
       "(in Redis too). --redis runs the same workload against Redis (SET, GET, EXISTS)\n"
       "afterwards and prints both; --lm, the PUT or GET workload over kvdepotd's lm://\n"
       "listener (LMCache's protocol; a PUT batch ends with a HEALTH round trip; its keys are\n"
       "deleted over ADDR). --no-native skips the run over ADDR. --daemon-pid: also print the\n"
       "minor page faults process PID (kvdepotd, same host) took per GiB moved. Each\n"
       "connection receives GET values into one buffer, sized and touched before the clock\n"
       "starts; that buffer and the value PUT are advised for transparent huge pages\n"
       "(--no-huge-pages: not). --chunk-keys: 48-byte keys shaped like chunk keys (what KV\n"
       "events announce). A progress bar goes to stderr when it is a terminal (--no-progress:\n"
       "never)."},
      {"codec encode",
       "IN.npy OUT.kvd",
       "encode a KV array into a chunk container",
       {{"--codec", "raw|cachegen|hack-int2"},
        kDtype,
        {"--k-bins", "SPEC"},
        {"--v-bins", "SPEC"},
        {"--partition", "32|64|128"},
        {"--orientation", "channel|token"},
        {"--rounding", "nearest|stochastic"},
        {"--seed", "N"},
        {"--sinks", "N"},
        kQuiet,
        kJson}},
      {"codec decode", "IN.kvd OUT.npy", "decode a chunk container", {kDtype, kQuiet, kJson}},
      {"codec inspect", "IN.kvd", "a container's header, sections and checksums", {kJson}},
      {"codec compare",
       "A B",
       "compare two arrays (.npy or .kvd)",
       {kDtype,
        {"--max-rel-l2", "X"},
        {"--expect-bit-exact", ""},
        {"--probe-queries", "N"},
        kJson}},
      {"codec synth",
       "OUT.npy",
       "write a synthetic KV array",
       {{"--layers", "L"},
        {"--tokens", "T"},
        {"--heads", "H"},
        {"--dim", "D"},
        {"--seed", "S"},
        kDtype,
        kQuiet,
        kJson}},
      {"completion", "bash|zsh", "print a shell completion script", {}},
      {"version", "", "print the version", {}},
      {"help", "[COMMAND]", "this text, or one command's", {}},
  };
  return table;
}

std::string Synopsis(const CommandSpec& command) {
  std::string s(command.path);
  for (const FlagDoc& f : command.flags) {
    s += " [" + std::string(f.name) + (f.metavar.empty() ? "" : " " + std::string(f.metavar)) + "]";
  }
  if (!command.operands.empty()) s += " " + std::string(command.operands);
  return s;
}

// Splits `text` at spaces into lines of at most kColumns, continuation lines indented further.
void PrintWrapped(const std::string& text, std::size_t indent, std::ostream& out) {
  std::string line(indent, ' ');
  std::size_t start = 0;
  bool first_word = true;
  while (start < text.size()) {
    // A bracketed flag ("[--tier gpu|host|ssd]") is one word.
    std::size_t end = text.find(text[start] == '[' ? "] " : " ", start);
    end = end == std::string::npos ? text.size() : end + (text[start] == '[' ? 1 : 0);
    const std::string word = text.substr(start, end - start);
    if (!first_word && line.size() + 1 + word.size() > kColumns) {
      out << line << "\n";
      line = std::string(indent + 2, ' ');
      first_word = true;
    }
    line += (first_word ? "" : " ") + word;
    first_word = false;
    start = end + 1;
  }
  out << line << "\n";
}

// The words a shell may complete after `command`: its flags.
std::string FlagWords(const CommandSpec& command) {
  std::string words;
  for (const FlagDoc& f : command.flags) words += (words.empty() ? "" : " ") + std::string(f.name);
  return words;
}

bool HasValuedFlag(const CommandSpec& command) {
  return std::any_of(command.flags.begin(), command.flags.end(),
                     [](const FlagDoc& f) { return !f.metavar.empty(); });
}

std::string JoinWords(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

// The commands' first words ("codec" once), then the subcommands of each.
std::vector<std::string> TopWords() {
  std::vector<std::string> words;
  for (const CommandSpec& c : Table()) {
    const std::string first(c.path.substr(0, c.path.find(' ')));
    if (std::find(words.begin(), words.end(), first) == words.end()) words.push_back(first);
  }
  return words;
}

std::map<std::string, std::vector<std::string>> SubWords() {
  std::map<std::string, std::vector<std::string>> subs;
  for (const CommandSpec& c : Table()) {
    const auto space = c.path.find(' ');
    if (space != std::string_view::npos) {
      subs[std::string(c.path.substr(0, space))].emplace_back(c.path.substr(space + 1));
    }
  }
  return subs;
}

// Connection flags that take a value (the completion scripts skip their values).
std::string ValuedConnectionFlags(const char* separator) {
  std::string s;
  for (const FlagDoc& f : kConnectionFlags) {
    if (!f.metavar.empty()) s += (s.empty() ? "" : separator) + std::string(f.name);
  }
  return s;
}

void PrintBash(std::ostream& out) {
  out << "# bash completion for kvdepot (generated by 'kvdepot completion bash').\n"
         "# Load it with: source <(kvdepot completion bash)\n"
         "_kvdepot() {\n"
         "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
         "  local cmd=\"\" sub=\"\" i w\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    w=\"${COMP_WORDS[i]}\"\n"
         "    case \"$w\" in\n"
         "      "
      << ValuedConnectionFlags("|")
      << ") ((i++)) ;;\n"
         "      -*) ;;\n"
         "      *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;\n"
         "    esac\n"
         "  done\n"
         "  if [[ -z $cmd ]]; then\n"
         "    case \"$prev\" in\n";
  for (const FlagDoc& f : kConnectionFlags) {
    if (f.TakesFile())
      out << "      " << f.name << ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n";
  }
  out << "    esac\n"
         "    COMPREPLY=($(compgen -W \""
      << JoinWords(TopWords()) << " ";
  for (const FlagDoc& f : kConnectionFlags) out << f.name << " ";
  out << "--help --version\" -- \"$cur\"))\n"
         "    return\n"
         "  fi\n"
         "  local spec=\"$cmd\"\n"
         "  case \"$cmd\" in\n";
  for (const auto& [parent, subs] : SubWords()) {
    out << "    " << parent << ")\n"
        << "      if [[ -z $sub ]]; then COMPREPLY=($(compgen -W \"" << JoinWords(subs)
        << " help\" -- \"$cur\")); return; fi\n"
        << "      spec=\"$cmd $sub\" ;;\n";
  }
  out << "    help) COMPREPLY=($(compgen -W \"" << JoinWords(TopWords())
      << "\" -- \"$cur\")); return ;;\n"
         "    completion) COMPREPLY=($(compgen -W \"bash zsh\" -- \"$cur\")); return ;;\n"
         "  esac\n"
         "  local flags=\"\"\n"
         "  case \"$spec\" in\n";
  for (const CommandSpec& c : Table()) {
    if (c.flags.empty()) continue;
    out << "    \"" << c.path << "\")\n";
    if (HasValuedFlag(c)) {
      out << "      case \"$prev\" in\n";
      for (const FlagDoc& f : c.flags) {
        if (!f.Choices().empty()) {
          out << "        " << f.name << ") COMPREPLY=($(compgen -W \"" << JoinWords(f.Choices())
              << "\" -- \"$cur\")); return ;;\n";
        } else if (f.TakesFile()) {
          out << "        " << f.name << ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n";
        } else if (!f.metavar.empty()) {
          out << "        " << f.name << ") return ;;\n";  // a value to type
        }
      }
      out << "      esac\n";
    }
    out << "      flags=\"" << FlagWords(c) << " --help\" ;;\n";
  }
  out << "  esac\n"
         "  if [[ $cur == -* ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n"
         "  else\n"
         "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "  fi\n"
         "}\n"
         "complete -F _kvdepot kvdepot\n";
}

void PrintZsh(std::ostream& out) {
  out << "#compdef kvdepot\n"
         "# zsh completion for kvdepot (generated by 'kvdepot completion zsh').\n"
         "# Load it with: source <(kvdepot completion zsh), or save it as _kvdepot in $fpath.\n"
         "_kvdepot() {\n"
         "  local cmd=\"\" sub=\"\" i w prev=\"${words[CURRENT-1]}\"\n"
         "  for ((i = 2; i < CURRENT; i++)); do\n"
         "    w=\"${words[i]}\"\n"
         "    case \"$w\" in\n"
         "      ("
      << ValuedConnectionFlags("|")
      << ") ((i++)) ;;\n"
         "      (-*) ;;\n"
         "      (*) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;\n"
         "    esac\n"
         "  done\n"
         "  if [[ -z $cmd ]]; then\n"
         "    case \"$prev\" in\n";
  for (const FlagDoc& f : kConnectionFlags) {
    if (f.TakesFile()) out << "      (" << f.name << ") _files; return ;;\n";
  }
  out << "    esac\n"
         "    compadd -- "
      << JoinWords(TopWords()) << " ";
  for (const FlagDoc& f : kConnectionFlags) out << f.name << " ";
  out << "--help --version\n"
         "    return\n"
         "  fi\n"
         "  local spec=\"$cmd\"\n"
         "  case \"$cmd\" in\n";
  for (const auto& [parent, subs] : SubWords()) {
    out << "    (" << parent << ")\n"
        << "      if [[ -z $sub ]]; then compadd -- " << JoinWords(subs) << " help; return; fi\n"
        << "      spec=\"$cmd $sub\" ;;\n";
  }
  out << "    (help) compadd -- " << JoinWords(TopWords())
      << "; return ;;\n"
         "    (completion) compadd -- bash zsh; return ;;\n"
         "  esac\n"
         "  local -a flags\n"
         "  case \"$spec\" in\n";
  for (const CommandSpec& c : Table()) {
    if (c.flags.empty()) continue;
    out << "    (\"" << c.path << "\")\n";
    if (HasValuedFlag(c)) {
      out << "      case \"$prev\" in\n";
      for (const FlagDoc& f : c.flags) {
        if (!f.Choices().empty()) {
          out << "        (" << f.name << ") compadd -- " << JoinWords(f.Choices())
              << "; return ;;\n";
        } else if (f.TakesFile()) {
          out << "        (" << f.name << ") _files; return ;;\n";
        } else if (!f.metavar.empty()) {
          out << "        (" << f.name << ") return ;;\n";  // a value to type
        }
      }
      out << "      esac\n";
    }
    out << "      flags=(" << FlagWords(c) << " --help) ;;\n";
  }
  out << "  esac\n"
         "  if [[ ${words[CURRENT]} == -* ]]; then\n"
         "    compadd -- $flags\n"
         "  else\n"
         "    _files\n"
         "  fi\n"
         "}\n"
         "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n"
         "  _kvdepot \"$@\"\n"
         "else\n"
         "  compdef _kvdepot kvdepot\n"
         "fi\n";
}

}  // namespace

std::vector<std::string> FlagDoc::Choices() const {
  std::vector<std::string> choices;
  if (metavar.find('|') == std::string_view::npos) return choices;
  // "HOST:PORT|unix:PATH" names forms, not values: choices are lowercase words and digits.
  const bool values = std::none_of(metavar.begin(), metavar.end(),
                                   [](char c) { return (c >= 'A' && c <= 'Z') || c == ':'; });
  if (!values) return choices;
  std::size_t start = 0;
  while (start <= metavar.size()) {
    const std::size_t bar = std::min(metavar.find('|', start), metavar.size());
    choices.emplace_back(metavar.substr(start, bar - start));
    start = bar + 1;
  }
  return choices;
}

bool FlagDoc::TakesFile() const {
  return metavar == "FILE" || metavar.ends_with(".npy") || metavar.ends_with(".kvd");
}

std::span<const CommandSpec> Commands() {
  return Table();
}

std::span<const FlagDoc> ConnectionFlags() {
  return kConnectionFlags;
}

const CommandSpec* FindCommand(std::string_view path) {
  for (const CommandSpec& c : Table()) {
    if (c.path == path) return &c;
  }
  return nullptr;
}

FlagSpec FlagsOf(std::string_view path) {
  FlagSpec spec;
  if (const CommandSpec* c = FindCommand(path)) {
    for (const FlagDoc& f : c->flags) {
      (f.metavar.empty() ? spec.switches : spec.with_value).emplace(f.name);
    }
  }
  return spec;
}

void PrintSynopsis(const CommandSpec& command, std::ostream& out, std::size_t indent) {
  PrintWrapped(Synopsis(command), indent, out);
}

void PrintCommandHelp(const CommandSpec& command, std::ostream& out) {
  out << "usage: kvdepot [connection flags] ";
  PrintWrapped(Synopsis(command), 0, out);
  out << command.summary << "\n";
  if (!command.details.empty()) out << command.details << "\n";
}

Status PrintCompletion(std::string_view shell, std::ostream& out) {
  if (shell == "bash") {
    PrintBash(out);
  } else if (shell == "zsh") {
    PrintZsh(out);
  } else {
    return UsageError("completion " + std::string(shell) + ": kvdepot writes completion for " +
                      "bash or zsh (e.g. 'kvdepot completion bash')");
  }
  return Status::Ok();
}

}  // namespace kvdepot::cli
