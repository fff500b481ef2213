// Unit tests of the SPANK plugin's parsers (config.cpp): no Slurm, no gRPC.
// Prints "test_parse: N checks, F failures" and exits non-zero on a failure.
#include <cstdio>
#include <map>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include <sdnmpi/duplex.h>

#include "config.hpp"

using namespace sdnmpi::spank;

namespace {

int g_checks = 0;
int g_failures = 0;

void check(bool ok, const char *what, int line, const std::string &detail = "") {
    g_checks++;
    if (ok) return;
    g_failures++;
    std::fprintf(stderr, "FAIL line %d: %s %s\n", line, what, detail.c_str());
}

#define CHECK(cond) check((cond), #cond, __LINE__)
#define CHECK_OK(err) check((err).empty(), #err " is empty", __LINE__, (err))
// The parser failed with a message that contains `part`.
#define CHECK_ERR(err, part)                                                                   \
    check(!(err).empty() && (err).find(part) != std::string::npos,                             \
          #err " contains " #part, __LINE__, "got: '" + (err) + "'")

std::string parse(const std::vector<const char *> &args, Config &cfg) {
    return parse_plugstack_args(static_cast<int>(args.size()), args.data(), cfg);
}

void test_defaults() {
    Config cfg;
    cfg.timeout_s = 99;
    CHECK_OK(parse({}, cfg));
    CHECK(cfg.timeout_s == 10.0);
    CHECK(cfg.connect_timeout_s == 2.0);
    CHECK(cfg.manager.kind == AddressKind::kUnix);
    CHECK(cfg.manager.target == "unix:/run/sdnmpi/manager.sock");
    CHECK(cfg.manager.unix_path == "/run/sdnmpi/manager.sock");
    CHECK(!cfg.require);
    CHECK(cfg.default_pattern.empty() && cfg.tls_ca.empty() && cfg.token_file.empty());
    CHECK(cfg.duplex);
}

void test_all_keys() {
    Config cfg;
    CHECK_OK(parse({"manager=mgr.example:7070", "timeout=30", "connect_timeout=0.5",
                    "default_pattern=cg:8", "require=1", "tls_ca=/etc/sdnmpi/ca.pem",
                    "token_file=/etc/sdnmpi/token", "duplex=0"},
                   cfg));
    CHECK(cfg.manager.kind == AddressKind::kTcp);
    CHECK(cfg.manager.target == "mgr.example:7070");
    CHECK(cfg.timeout_s == 30.0);
    CHECK(cfg.connect_timeout_s == 0.5);
    CHECK(cfg.default_pattern == "cg:8");
    CHECK(cfg.require);
    CHECK(cfg.tls_ca == "/etc/sdnmpi/ca.pem");
    CHECK(cfg.token_file == "/etc/sdnmpi/token");
    CHECK(!cfg.duplex);
}

void test_bad_args() {
    Config cfg;
    cfg.timeout_s = 42;
    std::string err = parse({"timeout=5", "colour=blue"}, cfg);
    CHECK_ERR(err, "unknown plugstack argument 'colour'");
    CHECK_ERR(err, "known: manager, timeout");
    CHECK(cfg.timeout_s == 42);  // nothing half-applied
    err = parse({"timeout=5", "timeout=6"}, cfg);
    CHECK_ERR(err, "'timeout' given twice");
    err = parse({"verbose"}, cfg);
    CHECK_ERR(err, "'verbose' is not key=value");
    err = parse({"=5"}, cfg);
    CHECK_ERR(err, "is not key=value");
    err = parse({"manager="}, cfg);
    CHECK_ERR(err, "'manager' has an empty value");
    err = parse({"require=yes"}, cfg);
    CHECK_ERR(err, "require='yes': expected 0 or 1");
    err = parse({"default_pattern=a/b"}, cfg);
    CHECK_ERR(err, "default_pattern='a/b': not a pattern name");
    err = parse({"tls_ca=/ca.pem"}, cfg);
    CHECK_ERR(err, "need a TCP manager address");
    err = parse({"manager=h:1", "token_file=/t"}, cfg);
    CHECK_ERR(err, "token_file needs tls_ca");
    err = parse({"manager=h:1", "tls_ca=ca.pem"}, cfg);
    CHECK_ERR(err, "tls_ca='ca.pem': expected an absolute path");
    err = parse({"manager=h:1", "tls_ca=/ca.pem"}, cfg);
    CHECK_OK(err);
    const char *null_arg[] = {"timeout=1", nullptr};
    err = parse_plugstack_args(2, null_arg, cfg);
    CHECK_ERR(err, "argument 1 is null");
    err = parse({"timeout=\x1b[31m"}, cfg);
    CHECK_ERR(err, "'?[31m'");  // control bytes never reach a log line
}

void test_seconds() {
    double v = 7;
    CHECK_OK(parse_seconds("timeout", "10", 600, v));
    CHECK(v == 10.0);
    CHECK_OK(parse_seconds("timeout", "0.25", 600, v));
    CHECK(v == 0.25);
    CHECK_OK(parse_seconds("timeout", "600", 600, v));
    CHECK(v == 600.0);
    CHECK_OK(parse_seconds("timeout", "0.001", 600, v));
    v = 7;
    const char *bad[] = {"0", "0.0", "-1", "+1", "1e3", "601", "1.", ".5", "abc", "10s",
                         "1.2345", "inf", "nan", " 1", "1 ", "1234567", "1..2"};
    for (const char *b : bad) {
        std::string err = parse_seconds("timeout", b, 600, v);
        check(!err.empty() && err.find("timeout=") == 0, "bad seconds rejected", __LINE__, b);
    }
    CHECK(v == 7.0);
    std::string err = parse_seconds("connect_timeout", "61", kMaxConnectTimeoutS, v);
    CHECK_ERR(err, "at most 60 s");
    err = parse_seconds("timeout", "x", 600, v);
    CHECK_ERR(err, "expected seconds");
}

void test_address() {
    Address a;
    CHECK_OK(parse_address("unix:/run/sdnmpi/m.sock", a));
    CHECK(a.kind == AddressKind::kUnix && a.unix_path == "/run/sdnmpi/m.sock");
    CHECK(a.target == "unix:/run/sdnmpi/m.sock" && a.text == "unix:/run/sdnmpi/m.sock");
    CHECK_OK(parse_address("127.0.0.1:50051", a));
    CHECK(a.kind == AddressKind::kTcp && a.target == "127.0.0.1:50051" && a.unix_path.empty());
    CHECK_OK(parse_address("[::1]:50051", a));
    CHECK(a.kind == AddressKind::kTcp && a.target == "[::1]:50051");
    CHECK_OK(parse_address("manager-1.cluster:65535", a));
    std::string path107 = "unix:/" + std::string(106, 'p');
    CHECK_OK(parse_address(path107, a));
    a = Address{};
    std::string err = parse_address("unix:/" + std::string(107, 'p'), a);
    CHECK_ERR(err, "longer than 107 bytes");
    CHECK(a.unix_path == "/run/sdnmpi/manager.sock");  // untouched on error
    CHECK_ERR(parse_address("unix:run/m.sock", a), "must be absolute");
    CHECK_ERR(parse_address("unix:", a), "must be absolute");
    CHECK_ERR(parse_address("unix:/a\nb", a), "control character");
    CHECK_ERR(parse_address("localhost", a), "expected unix:/path or host:port");
    CHECK_ERR(parse_address("h:0", a), "port must be 1..65535");
    CHECK_ERR(parse_address("h:65536", a), "port must be 1..65535");
    CHECK_ERR(parse_address("h:", a), "port must be 1..65535");
    CHECK_ERR(parse_address("h:8o", a), "port must be 1..65535");
    CHECK_ERR(parse_address(":80", a), "bad host name");
    CHECK_ERR(parse_address("::1:80", a), "IPv6 needs [brackets]");
    CHECK_ERR(parse_address("h_x:80", a), "bad host name");
    CHECK_ERR(parse_address("[::1]50051", a), "expected [IPv6]:port");
    CHECK_ERR(parse_address("[::1]", a), "expected [IPv6]:port");
    CHECK_ERR(parse_address("[zz]:1", a), "not an IPv6 address");
    CHECK_ERR(parse_address("dns:///h:1", a), "bad host name");
}

void test_pattern_names() {
    CHECK(is_pattern_name("cg:8"));
    CHECK(is_pattern_name("lammps-rhodo_128.v2"));
    CHECK(is_pattern_name("stencil3d:nprocs=160"));
    CHECK(is_pattern_name("alltoall:nprocs=8,bytes=1048576"));
    CHECK(is_pattern_name(std::string(256, 'a')));
    CHECK(!is_pattern_name(std::string(257, 'a')));
    CHECK(!is_pattern_name(""));
    CHECK(!is_pattern_name("a b"));
    CHECK(!is_pattern_name("a/b"));
    CHECK(!is_pattern_name("caf\xc3\xa9"));
}

FileProbe probe(bool exists, bool regular, bool readable, std::uint64_t size) {
    FileProbe p;
    p.exists = exists;
    p.regular = regular;
    p.readable = readable;
    p.size_bytes = size;
    return p;
}

void test_classify() {
    PatternChoice c;
    CHECK_OK(classify_pattern("cg:8", probe(false, false, false, 0), c));
    CHECK(c.kind == PatternKind::kName && c.value == "cg:8");
    CHECK_OK(classify_pattern("p.json", probe(true, true, true, 10), c));
    CHECK(c.kind == PatternKind::kFile && c.value == "p.json");
    CHECK_OK(classify_pattern("/x/p.json", probe(true, true, true, kMaxPatternBytes), c));
    CHECK(c.kind == PatternKind::kFile);
    c = PatternChoice{};
    std::string err = classify_pattern("/x/p.json", probe(true, true, true, kMaxPatternBytes + 1), c);
    CHECK_ERR(err, "67108865 bytes, more than the 64 MiB");
    CHECK(c.value.empty());
    err = classify_pattern("./missing.json", probe(false, false, false, 0), c);
    CHECK_ERR(err, "--comm-pattern='./missing.json': no such file, and not a pattern name");
    CHECK_ERR(classify_pattern("/tmp", probe(true, false, true, 0), c), "not a regular file");
    CHECK_ERR(classify_pattern("p.json", probe(true, true, false, 5), c), "not readable");
    CHECK_ERR(classify_pattern("", probe(false, false, false, 0), c), "needs a pattern name");
}

// A scratch directory, removed with the files it lists.
struct TempDir {
    std::string path;
    std::vector<std::string> files;
    TempDir() {
        char tmpl[] = "/tmp/sdnmpi-test-parse-XXXXXX";
        if (mkdtemp(tmpl) != nullptr) path = tmpl;
    }
    ~TempDir() {
        for (const std::string &f : files) unlink((path + "/" + f).c_str());
        if (!path.empty()) rmdir(path.c_str());
    }
};

bool write_file(const std::string &path, const std::string &data) {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return false;
    bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
    return std::fclose(f) == 0 && ok;
}

void test_files() {
    TempDir dir;
    CHECK(!dir.path.empty());
    dir.files.push_back("ring.json");
    std::string file = dir.path + "/ring.json";
    std::string body = "{\"nranks\": 2}\n";
    body.push_back('\0');  // binary-safe (.tar.gz)
    CHECK(write_file(file, body));
    FileProbe p = probe_file(file);
    CHECK(p.exists && p.regular && p.readable && p.size_bytes == body.size());
    CHECK(!probe_file(dir.path + "/none").exists);
    FileProbe d = probe_file(dir.path);
    CHECK(d.exists && !d.regular);
    CHECK(!probe_file("").exists);

    std::string data = "old";
    CHECK_OK(read_pattern_file(file, kMaxPatternBytes, data));
    CHECK(data == body);
    data = "old";
    std::string err = read_pattern_file(file, 4, data);
    CHECK_ERR(err, "more than 4 bytes");
    CHECK(data == "old");
    CHECK_ERR(read_pattern_file(dir.path + "/none", 10, data), "No such file or directory");
    CHECK_ERR(read_pattern_file(dir.path, 10, data), "not a regular file");
    dir.files.push_back("fifo");
    std::string fifo = dir.path + "/fifo";
    CHECK(mkfifo(fifo.c_str(), 0600) == 0);
    CHECK(!probe_file(fifo).regular);
    CHECK_ERR(read_pattern_file(fifo, 10, data), "not a regular file");  // and no blocking
    err = read_pattern_file(dir.path + "/none", 10, data, "tls_ca");
    CHECK_ERR(err, "tls_ca '" + dir.path + "/none': No such file or directory");

    Config cfg;
    PatternArg arg;
    bool active = true;
    CHECK_OK(resolve_pattern("", cfg, &active, arg));
    CHECK(!active);
    cfg.default_pattern = "ring:4";
    CHECK_OK(resolve_pattern("", cfg, &active, arg));
    CHECK(active && arg.kind == PatternKind::kName && arg.name == "ring:4");
    CHECK_OK(resolve_pattern(file, cfg, &active, arg));
    CHECK(active && arg.kind == PatternKind::kFile && arg.filename == "ring.json");
    CHECK(arg.data == body);
    CHECK_OK(resolve_pattern("cg:8", cfg, &active, arg));
    CHECK(active && arg.kind == PatternKind::kName && arg.name == "cg:8" && arg.data.empty());
    err = resolve_pattern(dir.path + "/no/such.json", cfg, &active, arg);
    CHECK_ERR(err, "no such file, and not a pattern name");
    CHECK(!active);
}

void test_text() {
    CHECK(base_name("/a/b/c.json") == "c.json");
    CHECK(base_name("c.json") == "c.json");
    CHECK(base_name("dir/") == "dir");
    CHECK(base_name("/") == "/");
    CHECK(one_line("a\nb\tc\x7f") == "a?b?c?");
    CHECK(one_line(std::string(300, 'x')).size() == 203);
    CHECK(one_line("abcdef", 3) == "abc...");
    CHECK(format_seconds(10) == "10 s");
    CHECK(format_seconds(0.5) == "0.5 s");
}

void test_duplex() {
    Config cfg;
    CHECK_OK(parse({"duplex=1"}, cfg));
    CHECK(cfg.duplex);
    std::string err = parse({"duplex=yes"}, cfg);
    CHECK_ERR(err, "duplex='yes': expected 0 or 1");
    err = parse({"duplex=1", "duplex=0"}, cfg);
    CHECK_ERR(err, "'duplex' given twice");
    err = parse({"colour=1"}, cfg);
    CHECK_ERR(err, "tls_ca, token_file, duplex)");
    // only steps with a pattern: --comm-pattern or default_pattern
    Config on;
    CHECK(wants_duplex(on, "cg:8"));
    CHECK(!wants_duplex(on, ""));
    on.default_pattern = "ring:2";
    CHECK(wants_duplex(on, ""));
    Config off;
    CHECK_OK(parse({"duplex=0", "default_pattern=ring:2"}, off));
    CHECK(!wants_duplex(off, "cg:8") && !wants_duplex(off, ""));
    // every variable of the table, without overwriting; the user's values kept
    std::map<std::string, std::string> env = {{"UCX_RNDV_THRESH", "64k"}};
    DuplexResult r = apply_duplex([&env](const char *name, const char *value) {
        if (env.count(name) != 0) return SetEnvResult::kKept;
        env[name] = value;
        return SetEnvResult::kSet;
    });
    CHECK(r.set == static_cast<int>(SDNMPI_DUPLEX_NVARS) - 1 && r.kept == 1 && r.failed.empty());
    CHECK(env["UCX_RNDV_THRESH"] == "64k");
    CHECK(env["OMPI_MCA_btl_tcp_eager_limit"] == "4194304");
    CHECK(env["OMPI_MCA_btl_tcp_rndv_eager_limit"] == "4194304");
    CHECK(env["OMPI_MCA_btl_tcp_max_send_size"] == "4194304");
    CHECK(env["OMPI_MCA_btl_tcp_sndbuf"] == "4194304");
    CHECK(env["UCX_TCP_RCVBUF"] == "4194304");
    CHECK(env.size() == SDNMPI_DUPLEX_NVARS);
    r = apply_duplex([](const char *name, const char *) {
        return std::string(name).find("OMPI_MCA_btl_tcp_") == 0 ? SetEnvResult::kFailed
                                                                  : SetEnvResult::kSet;
    });
    CHECK(r.set == 3 && r.kept == 0);  // the three UCX_ variables
    CHECK(r.failed ==
          "OMPI_MCA_btl_tcp_eager_limit,OMPI_MCA_btl_tcp_rndv_eager_limit,"
          "OMPI_MCA_btl_tcp_max_send_size,OMPI_MCA_btl_tcp_sndbuf,OMPI_MCA_btl_tcp_rcvbuf");
}

}  // namespace

int main() {
    test_defaults();
    test_all_keys();
    test_bad_args();
    test_seconds();
    test_address();
    test_pattern_names();
    test_classify();
    test_files();
    test_text();
    test_duplex();
    std::printf("test_parse: %d checks, %d failures\n", g_checks, g_failures);
    return g_failures == 0 ? 0 : 1;
}
