// The SPANK plugin's parsers: plugstack.conf arguments, the manager address,
// and the --comm-pattern value.  Plain C++17, no Slurm and no gRPC, so that
// build/spank/test_parse can test them without either.
//
// Every parser returns an empty string on success and otherwise a one-line
// message naming the offending value; it never throws and never half-fills its
// output (the output is written only on success).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace sdnmpi::spank {

// A PatternFile carries at most this many bytes (manager.proto).
constexpr std::uint64_t kMaxPatternBytes = 64ULL * 1024 * 1024;
// WaitRoutesRequest.timeout_ms is at most 600000 (manager.proto).
constexpr double kMaxTimeoutS = 600.0;
constexpr double kMaxConnectTimeoutS = 60.0;
// sizeof(sockaddr_un.sun_path) is 108, including the terminating NUL.
constexpr std::size_t kMaxUnixPathBytes = 107;

enum class AddressKind { kUnix, kTcp };

// Where the manager listens: "unix:/abs/path", "host:port" or "[v6]:port".
struct Address {
    AddressKind kind = AddressKind::kUnix;
    std::string text = "unix:/run/sdnmpi/manager.sock";  // as configured, for log lines
    std::string target = "unix:/run/sdnmpi/manager.sock";  // the gRPC channel target
    std::string unix_path = "/run/sdnmpi/manager.sock";  // kUnix only
};

// The plugstack.conf arguments (key=value), with their defaults.
struct Config {
    Address manager;
    double timeout_s = 10.0;         // bound on the route wait
    double connect_timeout_s = 2.0;  // bound on reaching the manager
    std::string default_pattern;     // a stored pattern's name, or empty
    bool require = false;            // fail closed instead of open
    std::string tls_ca;              // PEM file (TCP only)
    std::string token_file;          // bearer token file (TCP with TLS only)
    bool duplex = true;              // full-duplex MPI settings for jobs with a pattern
};

// Parse plugstack.conf arguments: `manager=`, `timeout=`, `connect_timeout=`,
// `default_pattern=`, `require=`, `tls_ca=`, `token_file=`, `duplex=`.  Unknown
// and repeated keys are rejected.
std::string parse_plugstack_args(int argc, const char *const argv[], Config &out);

// "unix:/abs/path" (absolute, at most 107 bytes) or "host:port" / "[v6]:port".
std::string parse_address(std::string_view text, Address &out);

// A decimal number of seconds in (0, max_s]: "10", "0.5".
std::string parse_seconds(std::string_view key, std::string_view text, double max_s, double &out);

// A stored pattern's name or a built-in spec: [A-Za-z0-9_.:=,-]{1,256} (manager.proto).
bool is_pattern_name(std::string_view name);

// What the filesystem says about a --comm-pattern value, as seen by the caller.
struct FileProbe {
    bool exists = false;    // stat() succeeded
    bool regular = false;   // S_ISREG
    bool readable = false;  // access(R_OK) succeeded
    std::uint64_t size_bytes = 0;
};

// stat() + access() of path in the calling process (the user's view).
FileProbe probe_file(const std::string &path);

enum class PatternKind { kName, kFile };

struct PatternChoice {
    PatternKind kind = PatternKind::kName;
    std::string value;  // the name, or the path of the file
};

// Decide what --comm-pattern=VALUE means, given what the filesystem says about
// VALUE: a readable regular file of at most 64 MiB is a pattern file; anything
// else that exists is an error (directory, unreadable, too big); a value that
// does not exist is a stored pattern's name if it is a valid one, else an error.
std::string classify_pattern(std::string_view value, const FileProbe &probe, PatternChoice &out);

// The pattern sent with CreateJob: a stored pattern's name, or a file's contents.
struct PatternArg {
    PatternKind kind = PatternKind::kName;
    std::string name;      // kName
    std::string filename;  // kFile: its base name (decides the format)
    std::string data;      // kFile: at most 64 MiB
};

// What the job asks for, as seen by the calling process (srun: the user's view):
// --comm-pattern=VALUE if given, else default_pattern.  *active is false (and
// nothing else is set) when neither is given: the plugin then does nothing.
std::string resolve_pattern(std::string_view option_value, const Config &cfg, bool *active,
                            PatternArg &out);

// Read a whole pattern file (a regular file of at most max_bytes) into data.
// Errors start with `label` and the quoted path.
std::string read_pattern_file(const std::string &path, std::uint64_t max_bytes, std::string &data,
                              const char *label = "pattern file");

// Whether a job step's tasks get the full-duplex MPI settings
// (csrc/include/sdnmpi/duplex.h, docs/mpi-duplex.md): duplex=1 and the step has a
// communication pattern (--comm-pattern=VALUE, or default_pattern).
bool wants_duplex(const Config &cfg, std::string_view option_value);

// What setting one variable without overwriting it did.
enum class SetEnvResult { kSet, kKept, kFailed };

// The outcome of apply_duplex: how many variables were set, how many the job's
// environment already had (the user's value is kept), and the names that failed.
struct DuplexResult {
    int set = 0;
    int kept = 0;
    std::string failed;  // comma-separated names, empty if none
};

// Set every variable of the duplex table through set_env(name, value), which
// must not overwrite a variable that exists (spank_setenv(..., 0)).
DuplexResult apply_duplex(const std::function<SetEnvResult(const char *, const char *)> &set_env);

// The last path component ("/a/b/cg.json" -> "cg.json"): PatternFile.filename.
std::string base_name(std::string_view path);

// Untrusted text made fit for one log line: control bytes become '?', and
// text longer than max_bytes is cut and ends in "...".
std::string one_line(std::string_view text, std::size_t max_bytes = 200);

// Seconds for a log line: "10 s", "0.5 s".
std::string format_seconds(double s);

}  // namespace sdnmpi::spank
