// The plugin's calls to the interconnect manager (proto/sdnmpi/wire/manager.proto),
// one function per moment of a job.  gRPC, but no Slurm: build/spank/
// sdnmpi_spank_driver runs these same functions against a test server.
//
// Fail-open: each function makes at most one attempt, bounded in total by
// connect_timeout + timeout, and on any failure (manager unreachable, slow, or
// answering an error) logs exactly one line through `log` and returns
// Outcome::kFailOpen, or Outcome::kFailClosed when the site set require=1.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config.hpp"

namespace sdnmpi::spank {

enum class LogLevel { kError, kInfo, kVerbose, kDebug };

// Receives one message per call, without the "sdnmpi: " prefix (the sink adds it).
using Logger = std::function<void(LogLevel, const std::string &)>;

enum class Outcome {
    kOk,          // the manager did what was asked
    kFailOpen,    // it did not; the job goes on with default routes (one line logged)
    kFailClosed,  // it did not, and require=1: the caller fails the job
};

struct JobInfo {
    std::uint64_t job_id = 0;
    std::string name;
    std::uint32_t uid = 0;
    std::uint32_t ntasks = 0;
};

struct TaskInfo {
    std::uint32_t rank = 0;  // global task id
    std::uint32_t pid = 0;
};

// Job start (srun, local context, as the job's user): OfferJob, the job's pattern
// for the scheduler's side to take when it creates the job.  The pattern is taken
// by value: a file's contents (up to 64 MiB) move into the request.
Outcome offer_job(const Config &cfg, const JobInfo &job, PatternArg pattern, const Logger &log);

// Task start (slurmstepd, the scheduler's side, after all local tasks are forked):
// CreateJob from the user's offer and StartJob (the first node creates the job,
// the others find the same one), RegisterProcess for each local task, then
// WaitRoutes until the job's routes are installed.
Outcome register_and_wait(const Config &cfg, const JobInfo &job, const std::string &node,
                          const std::vector<TaskInfo> &tasks, const Logger &log);

// Job end: FinishJob.  A job the manager does not know is not an error (it was
// never created: srun's FinishJob then withdraws its offer); quiet logs a failure at
// verbose level only (the job's start already logged one).
Outcome finish_job(const Config &cfg, std::uint64_t job_id, bool quiet, const Logger &log);

}  // namespace sdnmpi::spank
