// Parsers of the SPANK plugin (see config.hpp).  No Slurm, no gRPC.
#include "config.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include <sdnmpi/duplex.h>

namespace sdnmpi::spank {
namespace {

constexpr std::size_t kMaxPatternNameBytes = 256;
constexpr const char *kKnownKeys =
    "manager, timeout, connect_timeout, default_pattern, require, tls_ca, token_file, duplex";

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A stored pattern's name ([A-Za-z0-9_.:-]) or a built-in spec, which adds '=' and ','
// (alltoall:nprocs=8,bytes=1048576); the manager checks which it is.
bool is_name_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) || c == '_' ||
           c == '.' || c == ':' || c == '-' || c == '=' || c == ',';
}

// Host names and IPv4 literals: letters, digits, '-', '.'.
bool is_host_name(std::string_view host) {
    if (host.empty() || host.size() > 253) return false;
    for (char c : host) {
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) || c == '-' ||
                  c == '.';
        if (!ok) return false;
    }
    return true;
}

bool is_ipv6_literal(std::string_view host) {
    if (host.size() < 2 || host.size() > 45) return false;
    for (char c : host) {
        bool ok = is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
                  c == '.';
        if (!ok) return false;
    }
    return host.find(':') != std::string_view::npos;
}

// A decimal port 1..65535.
bool parse_port(std::string_view text, unsigned &port) {
    if (text.empty() || text.size() > 5) return false;
    unsigned v = 0;
    for (char c : text) {
        if (!is_digit(c)) return false;
        v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v == 0 || v > 65535) return false;
    port = v;
    return true;
}

std::string quoted(std::string_view text) { return "'" + one_line(text, 120) + "'"; }

std::string parse_unix_address(std::string_view text, Address &out) {
    std::string_view path = text.substr(5);
    if (path.empty() || path[0] != '/')
        return "manager=" + quoted(text) + ": a unix socket path must be absolute";
    if (path.size() > kMaxUnixPathBytes)
        return "manager=" + quoted(text) + ": the socket path is longer than " +
               std::to_string(kMaxUnixPathBytes) + " bytes";
    for (char c : path) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            return "manager=" + quoted(text) + ": control character in the socket path";
    }
    Address a;
    a.kind = AddressKind::kUnix;
    a.text = std::string(text);
    a.target = "unix:" + std::string(path);
    a.unix_path = std::string(path);
    out = a;
    return "";
}

std::string parse_tcp_address(std::string_view text, Address &out) {
    std::string_view host;
    std::string_view port_text;
    if (!text.empty() && text[0] == '[') {
        std::size_t close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
            return "manager=" + quoted(text) + ": expected [IPv6]:port";
        host = text.substr(1, close - 1);
        port_text = text.substr(close + 2);
        if (!is_ipv6_literal(host))
            return "manager=" + quoted(text) + ": not an IPv6 address in brackets";
    } else {
        std::size_t colon = text.rfind(':');
        if (colon == std::string_view::npos)
            return "manager=" + quoted(text) + ": expected unix:/path or host:port";
        host = text.substr(0, colon);
        port_text = text.substr(colon + 1);
        if (!is_host_name(host))
            return "manager=" + quoted(text) + ": bad host name (IPv6 needs [brackets])";
    }
    unsigned port = 0;
    if (!parse_port(port_text, port))
        return "manager=" + quoted(text) + ": the port must be 1..65535";
    Address a;
    a.kind = AddressKind::kTcp;
    a.text = std::string(text);
    a.target = std::string(text);
    a.unix_path.clear();
    out = a;
    return "";
}

std::string parse_bool01(std::string_view key, std::string_view text, bool &out) {
    if (text == "0" || text == "1") {
        out = text == "1";
        return "";
    }
    return std::string(key) + "=" + quoted(text) + ": expected 0 or 1";
}

std::string parse_abs_path(std::string_view key, std::string_view text, std::string &out) {
    if (text.empty() || text[0] != '/')
        return std::string(key) + "=" + quoted(text) + ": expected an absolute path";
    out = std::string(text);
    return "";
}

// One key=value argument into cfg; seen records the keys already given.
std::string apply_arg(std::string_view arg, Config &cfg, std::string &seen) {
    std::size_t eq = arg.find('=');
    if (eq == std::string_view::npos || eq == 0)
        return "plugstack argument " + quoted(arg) + " is not key=value";
    std::string_view key = arg.substr(0, eq);
    std::string_view value = arg.substr(eq + 1);
    std::string marker = "," + std::string(key) + ",";
    if (seen.find(marker) != std::string::npos)
        return "plugstack argument " + quoted(key) + " given twice";
    if (value.empty()) return "plugstack argument " + quoted(key) + " has an empty value";
    std::string err;
    if (key == "manager") {
        err = parse_address(value, cfg.manager);
    } else if (key == "timeout") {
        err = parse_seconds(key, value, kMaxTimeoutS, cfg.timeout_s);
    } else if (key == "connect_timeout") {
        err = parse_seconds(key, value, kMaxConnectTimeoutS, cfg.connect_timeout_s);
    } else if (key == "default_pattern") {
        if (!is_pattern_name(value))
            err = "default_pattern=" + quoted(value) +
                  ": not a pattern name ([A-Za-z0-9_.:=,-]{1,256})";
        else
            cfg.default_pattern = std::string(value);
    } else if (key == "require") {
        err = parse_bool01(key, value, cfg.require);
    } else if (key == "tls_ca") {
        err = parse_abs_path(key, value, cfg.tls_ca);
    } else if (key == "token_file") {
        err = parse_abs_path(key, value, cfg.token_file);
    } else if (key == "duplex") {
        err = parse_bool01(key, value, cfg.duplex);
    } else {
        err = "unknown plugstack argument " + quoted(key) + " (known: " + kKnownKeys + ")";
    }
    seen += marker;
    return err;
}

}  // namespace

std::string parse_plugstack_args(int argc, const char *const argv[], Config &out) {
    Config cfg;
    std::string seen = ",";
    for (int i = 0; i < argc; i++) {
        if (argv[i] == nullptr) return "plugstack argument " + std::to_string(i) + " is null";
        std::string err = apply_arg(argv[i], cfg, seen);
        if (!err.empty()) return err;
    }
    bool tcp = cfg.manager.kind == AddressKind::kTcp;
    if (!tcp && (!cfg.tls_ca.empty() || !cfg.token_file.empty()))
        return "tls_ca and token_file need a TCP manager address (host:port); a unix socket "
               "identifies the caller by SO_PEERCRED";
    if (!cfg.token_file.empty() && cfg.tls_ca.empty())
        return "token_file needs tls_ca: a token is never sent over plain TCP";
    out = cfg;
    return "";
}

std::string parse_address(std::string_view text, Address &out) {
    if (text.substr(0, 5) == "unix:") return parse_unix_address(text, out);
    return parse_tcp_address(text, out);
}

std::string parse_seconds(std::string_view key, std::string_view text, double max_s, double &out) {
    // Digits, optionally '.' and up to 3 more digits: no signs, exponents, inf or nan.
    std::size_t dot = text.find('.');
    std::string_view whole = text.substr(0, dot);
    std::string_view frac = dot == std::string_view::npos ? "" : text.substr(dot + 1);
    bool ok = !whole.empty() && whole.size() <= 6 && frac.size() <= 3 &&
              (dot == std::string_view::npos || !frac.empty());
    double v = 0;
    for (char c : whole) {
        ok = ok && is_digit(c);
        v = v * 10 + (c - '0');
    }
    double scale = 0.1;
    for (char c : frac) {
        ok = ok && is_digit(c);
        v += (c - '0') * scale;
        scale /= 10;
    }
    if (!ok) return std::string(key) + "=" + quoted(text) + ": expected seconds, e.g. 10 or 0.5";
    if (v <= 0 || v > max_s)
        return std::string(key) + "=" + quoted(text) + ": must be more than 0 and at most " +
               format_seconds(max_s);
    out = v;
    return "";
}

bool is_pattern_name(std::string_view name) {
    if (name.empty() || name.size() > kMaxPatternNameBytes) return false;
    for (char c : name) {
        if (!is_name_char(c)) return false;
    }
    return true;
}

FileProbe probe_file(const std::string &path) {
    FileProbe p;
    struct stat st {};
    if (path.empty() || stat(path.c_str(), &st) != 0) return p;
    p.exists = true;
    p.regular = S_ISREG(st.st_mode);
    p.readable = access(path.c_str(), R_OK) == 0;
    p.size_bytes = st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    return p;
}

std::string classify_pattern(std::string_view value, const FileProbe &probe, PatternChoice &out) {
    std::string opt = "--comm-pattern=" + quoted(value);
    if (value.empty()) return "--comm-pattern needs a pattern name or a file";
    if (probe.exists) {
        if (!probe.regular) return opt + ": not a regular file";
        if (!probe.readable) return opt + ": the file is not readable";
        if (probe.size_bytes > kMaxPatternBytes)
            return opt + ": the file has " + std::to_string(probe.size_bytes) +
                   " bytes, more than the 64 MiB (" + std::to_string(kMaxPatternBytes) +
                   " bytes) a pattern file may have";
        out = PatternChoice{PatternKind::kFile, std::string(value)};
        return "";
    }
    if (!is_pattern_name(value))
        return opt + ": no such file, and not a pattern name ([A-Za-z0-9_.:=,-]{1,256})";
    out = PatternChoice{PatternKind::kName, std::string(value)};
    return "";
}

std::string resolve_pattern(std::string_view option_value, const Config &cfg, bool *active,
                            PatternArg &out) {
    *active = false;
    if (option_value.empty() && cfg.default_pattern.empty()) return "";
    PatternArg arg;
    if (option_value.empty()) {
        arg.kind = PatternKind::kName;
        arg.name = cfg.default_pattern;
    } else {
        std::string path(option_value);
        PatternChoice choice;
        std::string err = classify_pattern(option_value, probe_file(path), choice);
        if (!err.empty()) return err;
        arg.kind = choice.kind;
        if (choice.kind == PatternKind::kName) {
            arg.name = choice.value;
        } else {
            arg.filename = base_name(path);
            err = read_pattern_file(path, kMaxPatternBytes, arg.data);
            if (!err.empty()) return err;
        }
    }
    out = std::move(arg);
    *active = true;
    return "";
}

std::string read_pattern_file(const std::string &path, std::uint64_t max_bytes, std::string &data,
                              const char *label) {
    std::string where = std::string(label) + " " + quoted(path);
    // O_NONBLOCK: a FIFO put in the file's place must not block srun.
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return where + ": " + std::strerror(errno);
    std::string buf;
    std::string err;
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        err = where + ": " + std::strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
        err = where + ": not a regular file";
    }
    char chunk[65536];
    while (err.empty()) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            err = where + ": " + std::strerror(errno);
        } else if (n == 0) {
            break;
        } else if (buf.size() + static_cast<std::size_t>(n) > max_bytes) {
            err = where + ": more than " + std::to_string(max_bytes) + " bytes";
        } else {
            buf.append(chunk, static_cast<std::size_t>(n));
        }
    }
    close(fd);
    if (!err.empty()) return err;
    data.swap(buf);
    return "";
}

bool wants_duplex(const Config &cfg, std::string_view option_value) {
    return cfg.duplex && (!option_value.empty() || !cfg.default_pattern.empty());
}

DuplexResult apply_duplex(const std::function<SetEnvResult(const char *, const char *)> &set_env) {
    DuplexResult r;
    for (const sdnmpi_duplex_var &v : sdnmpi_duplex_vars) {
        switch (set_env(v.name, v.value)) {
        case SetEnvResult::kSet: r.set++; break;
        case SetEnvResult::kKept: r.kept++; break;
        case SetEnvResult::kFailed:
            r.failed += (r.failed.empty() ? "" : ",") + std::string(v.name);
            break;
        }
    }
    return r;
}

std::string base_name(std::string_view path) {
    while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
    std::size_t slash = path.rfind('/');
    if (path.size() == 1) return std::string(path);
    return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string one_line(std::string_view text, std::size_t max_bytes) {
    std::string out;
    std::size_t n = text.size() > max_bytes ? max_bytes : text.size();
    out.reserve(n + 3);
    for (std::size_t i = 0; i < n; i++) {
        unsigned char c = static_cast<unsigned char>(text[i]);
        out.push_back(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
    }
    if (text.size() > max_bytes) out += "...";
    return out;
}

std::string format_seconds(double s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g s", s);
    return buf;
}

}  // namespace sdnmpi::spank
