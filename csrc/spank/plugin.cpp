// sdnmpi_spank.so: the Slurm SPANK plugin of the interconnect manager (issue 6).
//
// Adds --comm-pattern=NAME|FILE to srun, sbatch and salloc, and tells the
// manager (proto/sdnmpi/wire/manager.proto) about each job step:
//
//   context    hook                   what
//   any        slurm_spank_init       parse plugstack.conf arguments, register the option
//   allocator  option callback        sbatch/salloc: check the value (file readable and
//                                     at most 64 MiB, or a pattern name); no RPC, there
//                                     is no job id yet
//   local      option callback        srun: the same check
//   local      local_user_init        srun: read the pattern file (the user's view of
//                                     the filesystem), OfferJob (as the job's user)
//   remote     user_init              slurmstepd, before the tasks are forked: the
//                                     full-duplex MPI settings (duplex=1, default) into
//                                     the step's environment, which every task inherits
//   remote     task_post_fork         slurmstepd: after the last local task is forked,
//                                     CreateJob from the user's offer + StartJob (the
//                                     first node creates, the others find the same job),
//                                     RegisterProcess for every local task, then
//                                     WaitRoutes; the tasks wait for this hook before
//                                     they exec, so the job starts on its routes
//   remote     exit                   slurmstepd of node 0 of the step: FinishJob
//   local      exit                   srun, if it offered: FinishJob (a no-op if node 0
//                                     already finished it; for steps whose tasks never
//                                     started, it withdraws the offer)
//
// Why the file is read by srun, which offers it, and the job created by
// slurmstepd: slurmstepd runs on the compute nodes, which may not see the user's
// files (or see another cwd), while srun always runs where the user (or the
// batch script) is (local_user_init).  But srun runs as the user, who could name
// any job id, and slurmstepd runs as root with the job id, uid and nodes Slurm
// gave the step: so only slurmstepd creates the job and registers its ranks (the
// manager lets only the scheduler do either for Slurm's job ids), taking the
// offer of the uid Slurm names.  Another user's offer for the same id is never
// taken; see docs/manager.md, "Security model".  sbatch and
// salloc run before the job has an id, so they only validate the value, which
// reaches every srun of the job through Slurm's option environment; the file
// must therefore be visible where the batch script runs (store it with
// `sdnmpi pattern put` and pass its name otherwise).  slurmstepd needs only the
// job id, so nothing but the option's presence crosses to the remote side.
//
// Why all remote RPCs are made from task_post_fork in slurmstepd itself: gRPC
// starts threads and is not fork-safe, so no channel may exist before the tasks
// are forked and none is made in a forked task; task_post_fork runs in
// slurmstepd after every task is forked and before any task is released to
// exec, and registering all local ranks before waiting avoids a deadlock
// between the ranks of one node.
//
// Fail-open: every RPC session is bounded by connect_timeout + timeout; a
// manager that is down, slow or answering an error costs one "sdnmpi:" log line
// and the job runs on default routes, unless require=1 (then the hook fails).
// No RPC at all without --comm-pattern and without default_pattern.
//
// Why the full-duplex settings (sdnmpi/duplex.h, docs/mpi-duplex.md) are set in
// user_init: it runs once per step and node in slurmstepd, after the step's
// environment (srun's, with the user's variables) is known and before any task
// is forked, and spank_setenv there changes that environment, which every task
// execs with.  spank_setenv(..., 0) keeps a variable the user set.  task_init
// would do the same once per task, in each forked task; task_post_fork is too
// late (the tasks have their copy of the environment).  Only steps with a
// pattern get them: a job without one has not asked for sdnmpi, and the
// settings cost memory at the receiver, so the plugin leaves it as it is.
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}

#include "client.hpp"
#include "config.hpp"

#define SDN_EXPORT __attribute__((visibility("default")))

extern "C" {
SDN_EXPORT extern const char plugin_name[];
SDN_EXPORT extern const char plugin_type[];
SDN_EXPORT extern const unsigned int plugin_version;
SDN_EXPORT extern const unsigned int spank_plugin_version;
const char plugin_name[] = "sdnmpi";
const char plugin_type[] = "spank";
const unsigned int plugin_version = SLURM_VERSION_NUMBER;
const unsigned int spank_plugin_version = 0;

SDN_EXPORT int slurm_spank_init(spank_t sp, int ac, char **av);
SDN_EXPORT int slurm_spank_local_user_init(spank_t sp, int ac, char **av);
SDN_EXPORT int slurm_spank_user_init(spank_t sp, int ac, char **av);
SDN_EXPORT int slurm_spank_task_post_fork(spank_t sp, int ac, char **av);
SDN_EXPORT int slurm_spank_exit(spank_t sp, int ac, char **av);
}

namespace {

using namespace sdnmpi::spank;

// What one plugin instance (one srun, sbatch, salloc or slurmstepd) knows.
struct State {
    Config cfg;
    bool configured = false;  // plugstack.conf arguments parsed
    std::string pattern;      // --comm-pattern value, empty if not given
    // srun
    std::uint64_t local_job_id = 0;  // the job srun offered a pattern for, or 0
    // slurmstepd
    bool step_known = false;
    bool regular_step = false;
    std::uint64_t job_id = 0;
    std::uint32_t uid = 0;     // the job's owner, as Slurm says
    std::uint32_t ntasks = 0;  // the step's tasks on all nodes
    std::uint32_t node_id = 0;
    std::uint32_t local_tasks = 0;
    std::vector<TaskInfo> tasks;
    bool start_failed = false;
};

State g;

// ESPANK_SUCCESS is a plain int in slurm_errno.h.
constexpr spank_err_t kSpankOk = static_cast<spank_err_t>(ESPANK_SUCCESS);

void log_line(LogLevel level, const std::string &msg) {
    // Fail-open on a node goes to slurmd's log, not to the user's terminal: srun has
    // already printed the one line the user needs (slurm_error in slurmstepd would be
    // repeated on every node). With require=1 the failure is the job's, so it shows.
    if (level == LogLevel::kError && g.configured && !g.cfg.require &&
        spank_context() == S_CTX_REMOTE)
        level = LogLevel::kInfo;
    switch (level) {
    case LogLevel::kError: slurm_error("sdnmpi: %s", msg.c_str()); break;
    case LogLevel::kInfo: slurm_info("sdnmpi: %s", msg.c_str()); break;
    case LogLevel::kVerbose: slurm_verbose("sdnmpi: %s", msg.c_str()); break;
    case LogLevel::kDebug: slurm_debug("sdnmpi: %s", msg.c_str()); break;
    }
}

const Logger kLog = log_line;

// The hook's return value for an outcome: only require=1 fails a job.
int rc_of(Outcome o) { return o == Outcome::kFailClosed ? -1 : 0; }

// A failure of Slurm itself (an item it cannot give): one line, then fail open.
int slurm_failure(const std::string &what, spank_err_t err) {
    std::string tail = g.cfg.require ? "; job fails (require=1)" : "; job runs on default routes";
    log_line(LogLevel::kError, what + ": " + spank_strerror(err) + tail);
    return g.cfg.require ? -1 : 0;
}

// Run a hook body; no C++ exception may cross into Slurm.
template <typename Body> int guarded(const char *hook, Body body) {
    try {
        return body();
    } catch (const std::exception &e) {
        log_line(LogLevel::kError, std::string("internal error in ") + hook + " (" +
                                       one_line(e.what()) + "); job runs on default routes");
    } catch (...) {
        log_line(LogLevel::kError,
                 std::string("internal error in ") + hook + "; job runs on default routes");
    }
    return g.cfg.require ? -1 : 0;
}

bool active() { return g.configured && (!g.pattern.empty() || !g.cfg.default_pattern.empty()); }

// --comm-pattern: checked where the user's files are (remote == 0), kept as is
// in slurmstepd (remote == 1), which only needs to know it was given.
int opt_comm_pattern(int, const char *optarg, int remote) {
    return guarded("--comm-pattern", [&]() -> int {
        std::string value = optarg != nullptr ? optarg : "";
        if (remote == 0) {
            PatternChoice choice;
            std::string err = classify_pattern(value, probe_file(value), choice);
            if (!err.empty()) {
                log_line(LogLevel::kError, err);
                return -1;
            }
        }
        g.pattern = value;
        return 0;
    });
}

char kOptName[] = "comm-pattern";
char kOptArg[] = "NAME|FILE";
char kOptUsage[] =
    "[sdnmpi] Communication pattern of the job: a stored pattern's name (see `sdnmpi "
    "pattern list`) or a pattern file (.json, .xml, .tar.gz; at most 64 MiB). The "
    "interconnect manager installs routes for it before the tasks start.";

struct spank_option g_options[] = {
    {kOptName, kOptArg, kOptUsage, 1, 0, opt_comm_pattern},
    SPANK_OPTIONS_TABLE_END,
};

int register_options(spank_t sp) {
    for (struct spank_option *o = g_options; o->name != nullptr; o++) {
        spank_err_t err = spank_option_register(sp, o);
        if (err != ESPANK_SUCCESS) {
            log_line(LogLevel::kError, std::string("cannot register --") + o->name + ": " +
                                           spank_strerror(err));
            return -1;
        }
    }
    return 0;
}

// SLURM_JOB_NAME from the step's environment, else the command's base name.
std::string job_name(spank_t sp) {
    char **env = nullptr;
    if (spank_get_item(sp, S_JOB_ENV, &env) == ESPANK_SUCCESS && env != nullptr) {
        const char *key = "SLURM_JOB_NAME=";
        for (char **e = env; *e != nullptr; e++) {
            if (std::strncmp(*e, key, std::strlen(key)) == 0) return *e + std::strlen(key);
        }
    }
    int argc = 0;
    char **argv = nullptr;
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0 &&
        argv != nullptr && argv[0] != nullptr)
        return base_name(argv[0]);
    return "";
}

// srun: the job's identity and pattern, offered for slurmstepd to create the job.
int local_start(spank_t sp) {
    bool want = false;
    PatternArg pattern;
    std::string err = resolve_pattern(g.pattern, g.cfg, &want, pattern);
    if (!err.empty()) {
        log_line(LogLevel::kError, err);
        return -1;
    }
    if (!want) return 0;
    std::uint32_t job_id = 0;
    uid_t uid = 0;
    std::uint32_t ntasks = 0;
    spank_err_t e = spank_get_item(sp, S_JOB_ID, &job_id);
    if (e != ESPANK_SUCCESS) return slurm_failure("srun: no job id", e);
    if ((e = spank_get_item(sp, S_JOB_UID, &uid)) != ESPANK_SUCCESS)
        return slurm_failure("srun: no uid for job " + std::to_string(job_id), e);
    if ((e = spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ntasks)) != ESPANK_SUCCESS)
        return slurm_failure("srun: no task count for job " + std::to_string(job_id), e);
    JobInfo job{job_id, job_name(sp), uid, ntasks};
    Outcome o = offer_job(g.cfg, job, std::move(pattern), kLog);
    if (o == Outcome::kOk) g.local_job_id = job_id;
    return rc_of(o);
}

bool is_regular_step(std::uint32_t step_id) {
    return step_id != SLURM_BATCH_SCRIPT && step_id != SLURM_EXTERN_CONT &&
           step_id != SLURM_INTERACTIVE_STEP && step_id != SLURM_PENDING_STEP;
}

// slurmstepd: which job, step and node this is (once).
spank_err_t read_step(spank_t sp) {
    if (g.step_known) return kSpankOk;
    std::uint32_t job_id = 0;
    std::uint32_t step_id = 0;
    uid_t uid = 0;
    spank_err_t e = spank_get_item(sp, S_JOB_ID, &job_id);
    if (e == ESPANK_SUCCESS) e = spank_get_item(sp, S_JOB_STEPID, &step_id);
    if (e == ESPANK_SUCCESS) e = spank_get_item(sp, S_JOB_UID, &uid);
    if (e == ESPANK_SUCCESS) e = spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &g.ntasks);
    if (e == ESPANK_SUCCESS) e = spank_get_item(sp, S_JOB_NODEID, &g.node_id);
    if (e == ESPANK_SUCCESS) e = spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &g.local_tasks);
    if (e != ESPANK_SUCCESS) return e;
    g.job_id = job_id;
    g.uid = uid;  // uid_t is 32 bits on Linux
    g.regular_step = is_regular_step(step_id);
    g.step_known = true;
    return kSpankOk;
}

std::string host_name() {
    char buf[256] = {0};
    if (gethostname(buf, sizeof buf - 1) != 0) return "";
    return buf;
}

// slurmstepd, once per forked task: collect (rank, pid); after the last one,
// register them all and wait for the job's routes.
int remote_task_forked(spank_t sp) {
    spank_err_t e = read_step(sp);
    if (e != ESPANK_SUCCESS) return slurm_failure("slurmstepd: no job or step id", e);
    if (!g.regular_step) return 0;
    std::uint32_t rank = 0;
    pid_t pid = 0;
    e = spank_get_item(sp, S_TASK_GLOBAL_ID, &rank);
    if (e == ESPANK_SUCCESS) e = spank_get_item(sp, S_TASK_PID, &pid);
    if (e != ESPANK_SUCCESS) {
        g.start_failed = true;
        return slurm_failure("job " + std::to_string(g.job_id) + ": no task rank or pid", e);
    }
    g.tasks.push_back(TaskInfo{rank, static_cast<std::uint32_t>(pid)});
    if (g.tasks.size() < g.local_tasks) return 0;
    std::string node = host_name();
    if (node.empty()) {
        g.start_failed = true;
        log_line(LogLevel::kError, "job " + std::to_string(g.job_id) +
                                       ": gethostname failed; job runs on default routes");
        return g.cfg.require ? -1 : 0;
    }
    // No name: the manager keeps the one srun offered.
    JobInfo job{g.job_id, "", g.uid, g.ntasks};
    Outcome o = register_and_wait(g.cfg, job, node, g.tasks, kLog);
    g.start_failed = o != Outcome::kOk;
    return rc_of(o);
}

// slurmstepd, before the tasks are forked: the full-duplex MPI settings into the
// step's environment (the user's values kept).  Never fails the step.
int remote_set_duplex(spank_t sp) {
    spank_err_t e = read_step(sp);
    if (e != ESPANK_SUCCESS) {
        log_line(LogLevel::kVerbose, std::string("no job or step id (") + spank_strerror(e) +
                                         "); full-duplex MPI settings not set");
        return 0;
    }
    if (!g.regular_step) return 0;
    DuplexResult r = apply_duplex([sp](const char *name, const char *value) {
        spank_err_t err = spank_setenv(sp, name, value, 0);
        if (err == ESPANK_SUCCESS) return SetEnvResult::kSet;
        return err == ESPANK_ENV_EXISTS ? SetEnvResult::kKept : SetEnvResult::kFailed;
    });
    std::string msg = "job " + std::to_string(g.job_id) + ": full-duplex MPI settings: " +
                      std::to_string(r.set) + " set, " + std::to_string(r.kept) +
                      " kept from the job's environment";
    if (!r.failed.empty()) msg += ", failed: " + r.failed;
    log_line(r.failed.empty() ? LogLevel::kVerbose : LogLevel::kInfo, msg);
    return 0;
}

// slurmstepd at step end: node 0 of a regular step finishes the job.
int remote_exit(spank_t sp) {
    if (read_step(sp) != ESPANK_SUCCESS || !g.regular_step || g.node_id != 0) return 0;
    finish_job(g.cfg, g.job_id, g.start_failed, kLog);
    return 0;  // the step is over: a failed finish is logged, never the job's failure
}

}  // namespace

extern "C" {

int slurm_spank_init(spank_t sp, int ac, char **av) {
    return guarded("init", [&]() -> int {
        int rc = 0;
        switch (spank_context()) {
        case S_CTX_LOCAL:
        case S_CTX_REMOTE:
        case S_CTX_ALLOCATOR: rc = register_options(sp); break;
        default: break;
        }
        Config cfg;
        std::string err = parse_plugstack_args(ac, av, cfg);
        if (!err.empty()) {
            log_line(LogLevel::kError, "plugstack.conf: " + err + "; plugin disabled");
            return -1;
        }
        g.cfg = cfg;
        g.configured = true;
        return rc;
    });
}

int slurm_spank_local_user_init(spank_t sp, int, char **) {
    return guarded("local_user_init", [&]() -> int {
        if (spank_context() != S_CTX_LOCAL || !g.configured) return 0;
        return local_start(sp);
    });
}

int slurm_spank_user_init(spank_t sp, int, char **) {
    return guarded("user_init", [&]() -> int {
        if (spank_context() != S_CTX_REMOTE || !g.configured ||
            !wants_duplex(g.cfg, g.pattern))
            return 0;
        return remote_set_duplex(sp);
    });
}

int slurm_spank_task_post_fork(spank_t sp, int, char **) {
    return guarded("task_post_fork", [&]() -> int {
        if (spank_context() != S_CTX_REMOTE || !active()) return 0;
        return remote_task_forked(sp);
    });
}

int slurm_spank_exit(spank_t sp, int, char **) {
    return guarded("exit", [&]() -> int {
        switch (spank_context()) {
        case S_CTX_REMOTE:
            if (!active()) return 0;
            return remote_exit(sp);
        case S_CTX_LOCAL:
            if (g.local_job_id != 0) finish_job(g.cfg, g.local_job_id, false, kLog);
            return 0;
        default: return 0;
        }
    });
}

}  // extern "C"
