// sdnmpi_spank_driver: the plugin's manager calls (client.cpp) and parsers
// without Slurm, for tests.  The same functions the hooks call, the same
// plugstack arguments:
//
//   driver config [KEY=VALUE...]
//   driver offer  JOB NAME UID NTASKS PATTERN|- [KEY=VALUE...]   (srun's local_user_init)
//   driver tasks  JOB UID NTASKS NODE RANK:PID[,RANK:PID...] [KEY=VALUE...]
//                                                  (slurmstepd's task_post_fork)
//   driver finish JOB [KEY=VALUE...]                             (exit)
//
// Log lines go to stderr with the plugin's "sdnmpi: " prefix and level; the
// outcome goes to stdout: "ok", "skipped", "fail-open" or "fail-closed".
// Exit status: 0 ok or skipped, 3 fail-open, 1 fail-closed, 2 usage or bad input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "client.hpp"
#include "config.hpp"

using namespace sdnmpi::spank;

namespace {

constexpr int kUsage = 2;

void log_stderr(LogLevel level, const std::string &msg) {
    const char *tag = level == LogLevel::kError     ? "error"
                      : level == LogLevel::kInfo    ? "info"
                      : level == LogLevel::kVerbose ? "verbose"
                                                    : "debug";
    std::fprintf(stderr, "%s: sdnmpi: %s\n", tag, msg.c_str());
}

int usage(const std::string &why) {
    std::fprintf(stderr, "sdnmpi_spank_driver: %s\n", why.c_str());
    std::fprintf(stderr,
                 "usage: driver config [K=V...]\n"
                 "       driver offer JOB NAME UID NTASKS PATTERN|- [K=V...]\n"
                 "       driver tasks JOB NODE RANK:PID[,RANK:PID...] [K=V...]\n"
                 "       driver finish JOB [K=V...]\n");
    return kUsage;
}

int report(Outcome o) {
    switch (o) {
    case Outcome::kOk: std::puts("ok"); return 0;
    case Outcome::kFailOpen: std::puts("fail-open"); return 3;
    case Outcome::kFailClosed: std::puts("fail-closed"); return 1;
    }
    return 1;
}

bool parse_u64(const std::string &text, std::uint64_t max, std::uint64_t &out) {
    if (text.empty() || text.size() > 20) return false;
    std::uint64_t v = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return false;
        std::uint64_t d = static_cast<std::uint64_t>(c - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    out = v;
    return true;
}

bool parse_u32(const std::string &text, std::uint32_t &out) {
    std::uint64_t v = 0;
    if (!parse_u64(text, UINT32_MAX, v)) return false;
    out = static_cast<std::uint32_t>(v);
    return true;
}

// RANK:PID[,RANK:PID...]
bool parse_tasks(const std::string &text, std::vector<TaskInfo> &out) {
    std::size_t pos = 0;
    while (pos <= text.size()) {
        std::size_t comma = text.find(',', pos);
        std::string item = text.substr(pos, comma == std::string::npos ? comma : comma - pos);
        std::size_t colon = item.find(':');
        TaskInfo t;
        if (colon == std::string::npos || !parse_u32(item.substr(0, colon), t.rank) ||
            !parse_u32(item.substr(colon + 1), t.pid))
            return false;
        out.push_back(t);
        if (comma == std::string::npos) return true;
        pos = comma + 1;
    }
    return false;
}

// argv[first..] are plugstack arguments.
bool load_config(int argc, char **argv, int first, Config &cfg) {
    std::vector<const char *> args(argv + first, argv + argc);
    std::string err = parse_plugstack_args(static_cast<int>(args.size()), args.data(), cfg);
    if (err.empty()) return true;
    log_stderr(LogLevel::kError, "plugstack.conf: " + err + "; plugin disabled");
    return false;
}

int cmd_config(int argc, char **argv) {
    Config cfg;
    if (!load_config(argc, argv, 2, cfg)) return kUsage;
    std::printf("manager=%s\ntarget=%s\ntimeout=%g\nconnect_timeout=%g\n", cfg.manager.text.c_str(),
                cfg.manager.target.c_str(), cfg.timeout_s, cfg.connect_timeout_s);
    std::printf("default_pattern=%s\nrequire=%d\ntls_ca=%s\ntoken_file=%s\n",
                cfg.default_pattern.c_str(), cfg.require ? 1 : 0, cfg.tls_ca.c_str(),
                cfg.token_file.c_str());
    return 0;
}

int cmd_offer(int argc, char **argv) {
    if (argc < 7) return usage("offer needs JOB NAME UID NTASKS PATTERN");
    JobInfo job;
    job.name = argv[3];
    if (!parse_u64(argv[2], (1ULL << 40) - 1, job.job_id) || !parse_u32(argv[4], job.uid) ||
        !parse_u32(argv[5], job.ntasks))
        return usage("bad JOB, UID or NTASKS");
    Config cfg;
    if (!load_config(argc, argv, 7, cfg)) return kUsage;
    std::string option = argv[6] == std::string("-") ? "" : argv[6];
    bool active = false;
    PatternArg pattern;
    std::string err = resolve_pattern(option, cfg, &active, pattern);
    if (!err.empty()) {
        log_stderr(LogLevel::kError, err);
        return kUsage;
    }
    if (!active) {
        std::puts("skipped");
        return 0;
    }
    return report(offer_job(cfg, job, std::move(pattern), log_stderr));
}

int cmd_tasks(int argc, char **argv) {
    if (argc < 7) return usage("tasks needs JOB UID NTASKS NODE RANK:PID[,...]");
    JobInfo job;
    std::vector<TaskInfo> tasks;
    if (!parse_u64(argv[2], (1ULL << 40) - 1, job.job_id) || !parse_u32(argv[3], job.uid) ||
        !parse_u32(argv[4], job.ntasks) || !parse_tasks(argv[6], tasks))
        return usage("bad JOB, UID, NTASKS or RANK:PID list");
    Config cfg;
    if (!load_config(argc, argv, 7, cfg)) return kUsage;
    return report(register_and_wait(cfg, job, argv[5], tasks, log_stderr));
}

int cmd_finish(int argc, char **argv) {
    if (argc < 3) return usage("finish needs JOB");
    std::uint64_t job_id = 0;
    if (!parse_u64(argv[2], (1ULL << 40) - 1, job_id)) return usage("bad JOB");
    Config cfg;
    if (!load_config(argc, argv, 3, cfg)) return kUsage;
    return report(finish_job(cfg, job_id, false, log_stderr));
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) return usage("no command");
    std::string cmd = argv[1];
    try {
        if (cmd == "config") return cmd_config(argc, argv);
        if (cmd == "offer") return cmd_offer(argc, argv);
        if (cmd == "tasks") return cmd_tasks(argc, argv);
        if (cmd == "finish") return cmd_finish(argc, argv);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "sdnmpi_spank_driver: internal error: %s\n", e.what());
        return 1;
    }
    return usage("unknown command " + cmd);
}
